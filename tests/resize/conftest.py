"""Fixtures for the resize tests: a ResizeNode over a strict v1 fake tree and the fake CRI server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.resize.harness import ResizeNode, node_on_kernel
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import FakeCRI
from tests.support.kernel import skip_reason


@pytest.fixture
def node(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], fake_cri: FakeCRI, tmp_path: Path
) -> Iterator[ResizeNode]:
    n = ResizeNode(fake_cgroup_tree("v1"), fake_cri, tmp_path / "state")
    try:
        yield n
    finally:
        n.close()


@pytest.fixture
def kernel_node(tmp_path: Path) -> Iterator[ResizeNode]:
    """The same node on this host's real cgroup v1 files, below a private root removed afterwards;
    skips unless root on a v1 host."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    notes: list[str] = []
    with node_on_kernel(tmp_path / "node", notes) as n:
        yield n
    assert not notes, notes
