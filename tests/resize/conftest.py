"""Fixtures for the resize tests: a ResizeNode over a strict v1 fake tree and the fake CRI server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fakes.cgroup_tree import FakeCgroupTree
from tests.fakes.fake_cri import FakeCRI
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
