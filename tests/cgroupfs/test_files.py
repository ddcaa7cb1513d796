"""cgroupfs.files against the strict fake tree: reads, writes, confinement, symlinks, errno mapping."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from cgroupfs.confine import split_relpath
from cgroupfs.errors import (
    CgroupError,
    CgroupNotFound,
    CgroupPathRefused,
    CgroupPermissionError,
    CgroupWriteError,
    MemoryBelowUsage,
    MemswOrderRefused,
    QuotaRefused,
)
from cgroupfs.files import CgroupFiles, TreeReader
from cgroupfs.types import CgroupName, DriverKind
from tests.support.cgroup_tree import FakeCgroupTree

BURSTABLE = CgroupName(("kubepods", "burstable"))
POD = BURSTABLE.child("pod1234-ab")


@pytest.fixture
def tree(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> FakeCgroupTree:
    t = fake_cgroup_tree("hybrid")
    t.create(POD)
    return t


@pytest.fixture
def files(tree: FakeCgroupTree) -> CgroupFiles:
    return CgroupFiles(tree.root, ("cpu/kubepods", "memory/kubepods", "unified/kubepods"))


# ----- reading and writing


@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        ("cpu/kubepods/burstable/pod1234-ab/cpu.shares", "1024"),
        ("cpu/kubepods/cpu.cfs_quota_us", "-1"),
        ("memory/kubepods/burstable/memory.limit_in_bytes", "9223372036854771712"),
        ("unified/kubepods/burstable/pod1234-ab/hugetlb.2MB.max", "9223372036854771712"),
    ],
    ids=["pod-shares", "tier-quota", "tier-memory", "v2-hugetlb"],
)
def test_read_returns_the_kernel_text(files: CgroupFiles, relpath: str, expected: str) -> None:
    text = files.read(relpath)
    assert text is not None
    assert text.strip() == expected


@pytest.mark.parametrize(
    "relpath",
    [
        "cpu/kubepods/burstable/pod1234-ab/cpu.weight",  # a v2 file on v1
        "cpu/kubepods/burstable/pod-gone/cpu.shares",  # no such cgroup
        "cpu/kubepods/burstable/pod1234-ab/cpu.shares/deeper",  # below a file
    ],
    ids=["file-the-kernel-lacks", "missing-cgroup", "below-a-file"],
)
def test_read_of_something_absent_is_none(files: CgroupFiles, relpath: str) -> None:
    assert files.read(relpath) is None


def test_write_then_read_back_and_count(files: CgroupFiles, tree: FakeCgroupTree) -> None:
    files.write("cpu/kubepods/burstable/pod1234-ab/cpu.shares", "122")
    files.write("cpu/kubepods/burstable/pod1234-ab/cpu.cfs_quota_us", "50000")
    assert tree.read("cpu/kubepods/burstable/pod1234-ab/cpu.shares") == "122"
    assert files.read("cpu/kubepods/burstable/pod1234-ab/cpu.cfs_quota_us") == "50000"
    assert files.writes == 2


def test_a_shorter_value_replaces_a_longer_one(files: CgroupFiles, tree: FakeCgroupTree) -> None:
    path = "memory/kubepods/burstable/memory.limit_in_bytes"
    files.write(path, "5")
    assert tree.read(path) == "5"


def test_writing_a_file_the_kernel_lacks_fails_and_creates_nothing(files: CgroupFiles, tree: FakeCgroupTree) -> None:
    path = "cpu/kubepods/burstable/pod1234-ab/cpu.max"  # v2 name in a v1 hierarchy
    with pytest.raises(CgroupNotFound, match="no such file in this cgroup") as info:
        files.write(path, "max 100000")
    assert not tree.path(path).exists()
    assert info.value.value == "max 100000"
    assert files.writes == 0


def test_writing_into_a_missing_cgroup_names_the_missing_directory(files: CgroupFiles) -> None:
    with pytest.raises(CgroupNotFound, match="cgroup cpu/kubepods/besteffort does not exist"):
        files.write("cpu/kubepods/besteffort/cpu.shares", "2")


def test_a_systemd_tree_is_written_through_its_slice_directories(
    fake_cgroup_tree: Callable[..., FakeCgroupTree],
) -> None:
    tree = fake_cgroup_tree("v1", driver=DriverKind.SYSTEMD)
    (leaf, *_) = tree.create(POD, controllers=["cpu"])
    assert leaf == "cpu/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab.slice"
    files = CgroupFiles(tree.root, ("cpu/kubepods.slice",))
    files.write(f"{leaf}/cpu.shares", "2")
    assert tree.read(f"{leaf}/cpu.shares") == "2"


# ----- directories


def test_exists_children_mkdir_rmdir(files: CgroupFiles, tree: FakeCgroupTree) -> None:
    assert files.exists("cpu/kubepods/burstable")
    assert not files.exists("cpu/kubepods/besteffort")
    assert files.mkdir("cpu/kubepods/besteffort") is True
    assert files.mkdir("cpu/kubepods/besteffort") is False
    assert files.children("cpu/kubepods") == ("besteffort", "burstable")
    files.rmdir("cpu/kubepods/besteffort")  # an empty directory, as a fresh real cgroup is to rmdir
    assert not files.exists("cpu/kubepods/besteffort")
    with pytest.raises(CgroupNotFound):
        files.rmdir("cpu/kubepods/besteffort")
    assert files.writes == 0  # directories are not file writes


def test_rmdir_of_a_cgroup_with_children_is_refused(files: CgroupFiles) -> None:
    with pytest.raises(CgroupWriteError, match="still has processes or child cgroups"):
        files.rmdir("cpu/kubepods/burstable")


def test_mkdir_needs_the_parent(files: CgroupFiles) -> None:
    with pytest.raises(CgroupNotFound, match="cpu/kubepods/nope does not exist"):
        files.mkdir("cpu/kubepods/nope/child")


# ----- confinement


@pytest.mark.parametrize(
    ("relpath", "reason"),
    [
        ("cpu/cpu.shares", "outside the cgroups this agent owns"),
        ("cpu/kubepods2/cpu.shares", "outside the cgroups this agent owns"),  # a prefix string is not a root
        ("memory/system.slice/memory.limit_in_bytes", "outside the cgroups this agent owns"),
        ("cpu/kubepods", "outside the cgroups this agent owns"),  # the root itself is a directory, not a file
        ("/sys/fs/cgroup/cpu/kubepods/cpu.shares", "absolute path"),
        ("cpu/kubepods/../cpu.shares", "not a plain name"),
        ("cpu/kubepods/./cpu.shares", "not a plain name"),
        ("cpu//kubepods/cpu.shares", "not a plain name"),
        ("cpu/kubepods/cpu.shares/", "not a plain name"),
        ("cpu/kubepods/cpu.shares\0", "NUL or newline"),
        ("cpu/kubepods/x\ny/cpu.shares", "NUL or newline"),
        ("cpu/kubepods/" + "x" * 256 + "/cpu.shares", "longer than 255 bytes"),
        ("cpu/kubepods/" + "é" * 128 + "/cpu.shares", "longer than 255 bytes"),
        ("cpu/kubepods/" + "/".join(["x"] * 2100), "longer than 4095 bytes"),
        ("cpu/kubepods/\ud800/cpu.shares", "not encodable"),
        ("", "outside the cgroups this agent owns"),
    ],
    ids=[
        "hierarchy-root",
        "sibling-with-common-prefix",
        "other-cgroup",
        "owned-root-as-file",
        "absolute",
        "dotdot",
        "dot",
        "empty-component",
        "trailing-slash",
        "nul",
        "newline",
        "long-component",
        "long-in-bytes-not-chars",
        "long-path",
        "lone-surrogate",
        "top",
    ],
)
def test_paths_outside_the_owned_roots_are_refused_before_any_syscall(
    files: CgroupFiles, tree: FakeCgroupTree, relpath: str, reason: str
) -> None:
    before = tree.read("cpu/cpu.shares")
    with pytest.raises(CgroupPathRefused, match=reason) as info:
        files.write(relpath, "2")
    assert info.value.errno is None  # refused by us, not by the kernel
    assert "\n" not in str(info.value)
    assert tree.read("cpu/cpu.shares") == before
    with pytest.raises(CgroupPathRefused):
        files.read(relpath)


def test_owned_roots_are_validated(tree: FakeCgroupTree) -> None:
    with pytest.raises(ValueError, match="whole cgroup tree"):
        CgroupFiles(tree.root, ("",))
    with pytest.raises(CgroupPathRefused):
        CgroupFiles(tree.root, ("cpu/../memory",))


@pytest.fixture
def outside(tree: FakeCgroupTree) -> Path:
    target = tree.root.parent / "outside"
    target.mkdir()
    (target / "cpu.shares").write_text("precious\n")
    return target


@pytest.mark.parametrize(
    ("link", "points_to", "relpath"),
    [
        ("cpu/kubepods/burstable/evil", "outside", "cpu/kubepods/burstable/evil/cpu.shares"),
        ("cpu/kubepods/burstable/cpu.shares", "outside/cpu.shares", "cpu/kubepods/burstable/cpu.shares"),
        ("cpu/kubepods/escape", "..", "cpu/kubepods/escape/memory/memory.limit_in_bytes"),
    ],
    ids=["symlinked-directory", "symlinked-file", "symlink-to-parent"],
)
def test_a_symlink_inside_the_tree_cannot_lead_a_write_out(
    files: CgroupFiles, tree: FakeCgroupTree, outside: Path, link: str, points_to: str, relpath: str
) -> None:
    target = (outside.parent / points_to).resolve() if points_to != ".." else tree.root
    link_path = tree.path(link)
    if link_path.exists():
        link_path.unlink()
    link_path.symlink_to(target)
    before = tree.read("memory/memory.limit_in_bytes")
    with pytest.raises(CgroupPathRefused, match="symlink") as info:
        files.write(relpath, "2")
    assert (outside / "cpu.shares").read_text() == "precious\n"
    assert tree.read("memory/memory.limit_in_bytes") == before
    assert files.writes == 0
    assert "symlink" in info.value.reason
    with pytest.raises(CgroupPathRefused, match="symlink"):
        files.read(relpath)


def test_a_symlinked_cgroup_is_neither_listed_nor_created_over(
    files: CgroupFiles, tree: FakeCgroupTree, outside: Path
) -> None:
    tree.path("cpu/kubepods/evil").symlink_to(outside)
    assert "evil" not in files.children("cpu/kubepods")
    with pytest.raises(CgroupPathRefused, match="symlink"):
        files.mkdir("cpu/kubepods/evil")
    with pytest.raises(CgroupPathRefused, match="symlink"):
        files.exists("cpu/kubepods/evil")


def test_the_tree_reader_reads_anywhere_but_still_refuses_symlinks(tree: FakeCgroupTree, outside: Path) -> None:
    reader = TreeReader(tree.root)
    assert reader.read("unified/cgroup.controllers") == "hugetlb\n"
    assert reader.children("") == ("cpu", "cpuacct", "cpuset", "memory", "pids", "systemd", "unified")
    tree.path("cpu/evil").symlink_to(outside)
    with pytest.raises(CgroupPathRefused):
        reader.read("cpu/evil/cpu.shares")
    assert not hasattr(reader, "write")


# ----- errno -> typed errors (the kernel's answers, injected where the fake cannot produce them)


class _Refusing(CgroupFiles):
    """CgroupFiles whose writes of one file name fail with a given errno (what the kernel would say)."""

    def __init__(self, root: Path, roots: tuple[str, ...], name: str, code: int) -> None:
        super().__init__(root, roots)
        self.name, self.code = name, code

    def write(self, relpath: str, value: str) -> None:
        if relpath.rsplit("/", 1)[-1] == self.name:
            parts = split_relpath(relpath)
            raise self._write_error(relpath, parts, value, OSError(self.code, os.strerror(self.code)))
        super().write(relpath, value)


ROOTS = ("cpu/kubepods", "memory/kubepods", "unified/kubepods")


@pytest.mark.parametrize(
    ("name", "code", "kind", "words"),
    [
        ("cpu.cfs_quota_us", errno.EINVAL, QuotaRefused, "child cgroup's quota/period may be above"),
        ("cpu.cfs_period_us", errno.EINVAL, QuotaRefused, "wrong order"),
        ("cpu.shares", errno.EACCES, CgroupPermissionError, "not permitted (EACCES"),
        ("cpu.shares", errno.EPERM, CgroupPermissionError, "not permitted (EPERM"),
        ("cpu.shares", errno.EROFS, CgroupPermissionError, "not permitted (EROFS"),
        ("cpu.shares", errno.EINVAL, CgroupWriteError, "EINVAL: Invalid argument"),
        ("cpu.shares", errno.ENOSPC, CgroupWriteError, "ENOSPC"),
    ],
    ids=["quota", "period", "eacces", "eperm", "erofs", "einval-elsewhere", "other"],
)
def test_cpu_errnos_become_typed_one_line_errors(
    tree: FakeCgroupTree, name: str, code: int, kind: type[CgroupError], words: str
) -> None:
    files = _Refusing(tree.root, ROOTS, name, code)
    path = f"cpu/kubepods/burstable/{name}"
    with pytest.raises(kind) as info:
        files.write(path, "30000")
    err = info.value
    assert type(err) is kind
    assert (err.path, err.value, err.errno) == (path, "30000", code)
    assert words in str(err)
    assert str(err).startswith(f"write '30000' to {path}: ")
    assert "\n" not in str(err)


def test_ebusy_on_a_v1_memory_limit_reports_the_current_usage(tree: FakeCgroupTree) -> None:
    tree.set("memory/kubepods/burstable/memory.usage_in_bytes", "44040192")
    files = _Refusing(tree.root, ROOTS, "memory.limit_in_bytes", errno.EBUSY)
    with pytest.raises(MemoryBelowUsage) as info:
        files.write("memory/kubepods/burstable/memory.limit_in_bytes", "8388608")
    assert info.value.usage == 44040192
    assert "current usage of 44040192 bytes (42.0 MiB)" in str(info.value)
    assert "'8388608'" in str(info.value)


def test_ebusy_on_v1_memsw_reports_memsw_usage(tree: FakeCgroupTree) -> None:
    tree.set("memory/kubepods/burstable/memory.memsw.usage_in_bytes", "1048576")
    files = _Refusing(tree.root, ROOTS, "memory.memsw.limit_in_bytes", errno.EBUSY)
    with pytest.raises(MemoryBelowUsage) as info:
        files.write("memory/kubepods/burstable/memory.memsw.limit_in_bytes", "4096")
    assert info.value.usage == 1048576


def test_ebusy_on_v2_memory_max_reports_memory_current(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> None:
    tree = fake_cgroup_tree("v2")
    tree.create(BURSTABLE)
    tree.set("kubepods/burstable/memory.current", "123456789")
    files = _Refusing(tree.root, ("kubepods",), "memory.max", errno.EBUSY)
    with pytest.raises(MemoryBelowUsage, match="123456789 bytes") as info:
        files.write("kubepods/burstable/memory.max", "1000")
    assert info.value.usage == 123456789


def test_ebusy_with_unreadable_usage_still_says_what_happened(tree: FakeCgroupTree) -> None:
    tree.path("memory/kubepods/burstable/memory.usage_in_bytes").unlink()
    files = _Refusing(tree.root, ROOTS, "memory.limit_in_bytes", errno.EBUSY)
    with pytest.raises(MemoryBelowUsage, match="usage of unknown") as info:
        files.write("memory/kubepods/burstable/memory.limit_in_bytes", "1")
    assert info.value.usage is None


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("memory.limit_in_bytes", "memory must stay <= memory+swap"),
        ("memory.memsw.limit_in_bytes", "memory+swap must stay >= memory"),
    ],
    ids=["limit-above-memsw", "memsw-below-limit"],
)
def test_einval_on_v1_memory_with_memsw_explains_the_order(tree: FakeCgroupTree, name: str, rule: str) -> None:
    tree.set("memory/kubepods/burstable/memory.memsw.limit_in_bytes", "209715200")
    tree.set("memory/kubepods/burstable/memory.limit_in_bytes", "104857600")
    files = _Refusing(tree.root, ROOTS, name, errno.EINVAL)
    with pytest.raises(MemswOrderRefused, match=re.escape(rule)) as info:
        files.write(f"memory/kubepods/burstable/{name}", "314572800")
    other = "memory.memsw.limit_in_bytes" if name == "memory.limit_in_bytes" else "memory.limit_in_bytes"
    assert f"now {other} = " in str(info.value)


def test_einval_on_memory_without_memsw_is_a_plain_write_error(
    fake_cgroup_tree: Callable[..., FakeCgroupTree],
) -> None:
    tree = fake_cgroup_tree("v1")
    tree.create(BURSTABLE, controllers=["memory"])
    tree.path("memory/kubepods/burstable/memory.memsw.limit_in_bytes").unlink()  # swapaccount=0
    files = _Refusing(tree.root, ("memory/kubepods",), "memory.limit_in_bytes", errno.EINVAL)
    with pytest.raises(CgroupWriteError) as info:
        files.write("memory/kubepods/burstable/memory.limit_in_bytes", "abc")
    assert type(info.value) is CgroupWriteError


def test_a_nul_in_a_value_is_refused(files: CgroupFiles) -> None:
    with pytest.raises(CgroupWriteError, match="NUL"):
        files.write("cpu/kubepods/cpu.shares", "2\0")
