"""read_many: one directory walk per cgroup, the same confinement and answers as read()."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cgroupfs.errors import CgroupPathRefused
from cgroupfs.files import CgroupFiles
from cgroupfs.types import CgroupName
from tests.support.cgroup_tree import FakeCgroupTree


def test_read_many_matches_read_and_reports_directories(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], both_openers: str
) -> None:
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
    assert dirs == {
        "cpu/kubepods/burstable": True,
        "cpu/kubepods/burstable/pod1": False,
        "memory/kubepods": True,
    }


def test_read_many_refuses_paths_outside_the_owned_roots(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], both_openers: str
) -> None:
    tree = fake_cgroup_tree("v1")
    files = CgroupFiles(tree.root, ("cpu/kubepods",))
    with pytest.raises(CgroupPathRefused):
        files.read_many(["cpu/kubepods/cpu.shares", "cpu/../memory/memory.limit_in_bytes"])
    with pytest.raises(CgroupPathRefused):
        files.read_many(["memory/memory.limit_in_bytes"])


def test_read_many_over_a_deep_tree_keeps_the_answers_of_read_and_never_follows_a_symlink(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, both_openers: str
) -> None:
    """Directories share their open leading components: siblings, a missing cgroup between two present
    ones, a file where a directory should be, and a symlinked directory deep in a shared prefix."""
    tree = fake_cgroup_tree("v1")
    for name in ("a", "b", "c"):
        tree.create(CgroupName(("kubepods", "burstable", f"pod{name}")))
        tree.set(f"cpu/kubepods/burstable/pod{name}/cpu.shares", f"{ord(name)}")
    (tree.path("cpu/kubepods/burstable") / "podfile").write_text("not a cgroup\n")
    files = CgroupFiles(tree.root, ("cpu/kubepods", "memory/kubepods"))
    paths = [
        "cpu/kubepods/burstable/podc/cpu.shares",
        "cpu/kubepods/burstable/podfile/cpu.shares",
        "cpu/kubepods/burstable/pod-missing/cpu.shares",
        "cpu/kubepods/burstable/pocket/cpu.shares",
        "cpu/kubepods/burstable/poda/cpu.shares",
        "memory/kubepods/burstable/poda/memory.limit_in_bytes",
        "cpu/kubepods/burstable/podb/cpu.shares",
        "cpu/kubepods/cpu.shares",
    ]
    texts, dirs = files.read_many(paths)
    assert texts == {p: files.read(p) for p in paths}
    assert [texts[f"cpu/kubepods/burstable/pod{n}/cpu.shares"] for n in "abc"] == ["97\n", "98\n", "99\n"]
    assert dirs["cpu/kubepods/burstable/pod-missing"] is False
    assert dirs["cpu/kubepods/burstable/podfile"] is False
    assert dirs["cpu/kubepods/burstable/podb"] is True and dirs["cpu/kubepods"] is True

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "cpu.shares").write_text("1024\n")
    (tree.path("cpu/kubepods/burstable") / "podz").symlink_to(outside)
    with pytest.raises(CgroupPathRefused, match="symlink"):
        files.read_many(["cpu/kubepods/burstable/poda/cpu.shares", "cpu/kubepods/burstable/podz/cpu.shares"])


@pytest.mark.parametrize("size", [0, 1, 2047, 2048, 4096, 65536, 65537, 200_000])
def test_a_file_is_read_whole_whatever_its_size(tmp_path: Path, both_openers: str, size: int) -> None:
    """One read when the first returns less than half a page; read on to the end otherwise."""
    (tmp_path / "cpu" / "kubepods").mkdir(parents=True)
    text = ("12345678\n" * (size // 9 + 1))[:size]
    (tmp_path / "cpu" / "kubepods" / "cpu.stat").write_text(text)
    files = CgroupFiles(tmp_path, ("cpu/kubepods",))
    texts, _ = files.read_many(["cpu/kubepods/cpu.stat"])
    assert texts["cpu/kubepods/cpu.stat"] == text == files.read("cpu/kubepods/cpu.stat")
