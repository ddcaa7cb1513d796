"""read_many: one directory walk per cgroup, the same confinement and answers as read()."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cgroupfs.files import CgroupFiles, CgroupPathRefused
from cgroupfs.types import CgroupName
from tests.fakes.cgroup_tree import FakeCgroupTree


def test_read_many_matches_read_and_reports_directories(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> None:
    tree = fake_cgroup_tree("v1")
    tree.create(CgroupName(("kubepods", "burstable")))
    tree.set("cpu/kubepods/burstable/cpu.shares", "512")
    files = CgroupFiles(tree.root, ("cpu/kubepods", "memory/kubepods"))
    paths = [
        "cpu/kubepods/burstable/cpu.shares",
        "cpu/kubepods/burstable/cpu.cfs_quota_us",
        "cpu/kubepods/burstable/no.such.file",
        "cpu/kubepods/burstable/pod1/cpu.shares",
        "memory/kubepods/memory.limit_in_bytes",
    ]
    texts, dirs = files.read_many(paths)
    assert texts == {p: files.read(p) for p in paths}
    assert texts["cpu/kubepods/burstable/cpu.shares"] == "512\n"
    assert texts["cpu/kubepods/burstable/no.such.file"] is None
    assert dirs == {"cpu/kubepods/burstable": True, "cpu/kubepods/burstable/pod1": False, "memory/kubepods": True}


def test_read_many_refuses_paths_outside_the_owned_roots(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> None:
    tree = fake_cgroup_tree("v1")
    files = CgroupFiles(tree.root, ("cpu/kubepods",))
    with pytest.raises(CgroupPathRefused):
        files.read_many(["cpu/kubepods/cpu.shares", "cpu/../memory/memory.limit_in_bytes"])
    with pytest.raises(CgroupPathRefused):
        files.read_many(["memory/memory.limit_in_bytes"])
