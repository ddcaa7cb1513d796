"""The daemon tests' fixture; the daemon harness itself is tests/daemon/harness.py (importable without pytest)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.daemon.harness import Env, serving
from tests.resize.harness import ResizeNode
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import FakeCRI


@pytest.fixture
def env(
    tmp_path: Path, fake_cgroup_tree: Callable[..., FakeCgroupTree], fake_cri: FakeCRI
) -> Iterator[Env]:
    node = ResizeNode(fake_cgroup_tree("v1"), fake_cri, tmp_path / "harness-state")
    try:
        with serving(tmp_path, node, fake_cri) as e:
            yield e
    finally:
        log = tmp_path / "daemon.log"
        if log.exists():  # shown by pytest on failure
            sys.stdout.write(log.read_text()[-6000:])
