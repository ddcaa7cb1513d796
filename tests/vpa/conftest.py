"""The bare node the VPA tests resize: a fake v1 cgroup tree and the fake CRI (tests/resize/harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.resize.harness import ResizeNode
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import running_fake_cri


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ResizeNode]:
    with running_fake_cri(tmp_path) as cri:
        n = ResizeNode(FakeCgroupTree(tmp_path / "tree", "v1"), cri, tmp_path / "state")
        try:
            yield n
        finally:
            n.close()
