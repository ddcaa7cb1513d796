"""Fixtures for the resize tests: a ResizeNode over a strict v1 fake tree and the fake CRI server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fakes.cgroup_tree import FakeCgroupTree
from tests.fakes.fake_cri import FakeCRI
from tests.fakes.kernel import KernelRoot
from tests.fakes.kernel_tree import KernelTree
from tests.resize.harness import ResizeNode


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
def kernel_node(kernel_root: KernelRoot, fake_cri: FakeCRI, tmp_path: Path) -> Iterator[ResizeNode]:
    """The same node on this host's real cgroup v1 files, below the test's private root."""
    tree = KernelTree(kernel_root)
    n = ResizeNode(tree, fake_cri, tmp_path / "state", cgroup_root=tree.cgroup_root)
    try:
        yield n
    finally:
        n.close()
