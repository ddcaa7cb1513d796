"""PinnedFiles on a fake tree: the same bytes as a path read, the same confinement, stale descriptors
reopened, descriptors closed as soon as a group goes, and path reads (one warning) when they run out."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from cgroupfs.errors import CgroupError, CgroupPathRefused
from cgroupfs.files import CgroupFiles
from cgroupfs.pinned import PinnedFiles
from tests.support.cgroup_tree import FakeCgroupTree

POD = "kubepods/burstable/pod1"
V1_GROUP = (
    f"cpuacct/{POD}/c1/cpuacct.usage",
    f"memory/{POD}/c1/memory.usage_in_bytes",
    f"memory/{POD}/c1/memory.stat",
    f"memory/{POD}/c1/memory.oom_control",
)
V2_GROUP = (f"{POD}/c1/cpu.stat", f"{POD}/c1/memory.current", f"{POD}/c1/memory.stat", f"{POD}/c1/memory.events")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@dataclass
class Node:
    tree: FakeCgroupTree
    files: CgroupFiles
    group: tuple[str, ...]

    def write(self, value: int) -> None:
        """Give every counter file of the group a recognisable content."""
        for i, path in enumerate(self.group):
            self.tree.path(path).write_text(f"counter {value + i}\n")

    def add(self, count: int) -> list[tuple[str, ...]]:
        """`count` more containers beside c1, each counter file holding its index."""
        groups = []
        for i in range(count):
            self.tree.create(f"{POD}/x{i}", ("cpuacct", "memory") if self.tree.mode == "v1" else None)
            g = tuple(p.replace("/c1/", f"/x{i}/") for p in self.group)
            for p in g:
                self.tree.path(p).write_text(f"counter {i}\n")
            groups.append(g)
        return groups

    def by_path(self, group: tuple[str, ...] | None = None) -> list[bytes | None]:
        return [None if (t := self.files.read(p)) is None else t.encode() for p in group or self.group]


@pytest.fixture(params=["v1", "v2"])
def node(request: pytest.FixtureRequest, fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> Iterator[Node]:
    tree = fake_cgroup_tree(request.param)
    tree.create(f"{POD}/c1")
    group = V1_GROUP if request.param == "v1" else V2_GROUP
    roots = ["cpu/kubepods", "cpuacct/kubepods", "memory/kubepods"] if request.param == "v1" else ["kubepods"]
    n = Node(tree, CgroupFiles(tree.root, roots), group)
    n.write(100)
    yield n


def test_reads_are_the_path_reads_and_follow_each_write(node: Node) -> None:
    baseline = open_fds()
    pinned = PinnedFiles(node.files, budget=1000)
    for value in (100, 200, 7, 123456789):  # shorter and longer contents: pread at 0 sees each whole
        node.write(value)
        assert pinned.read(node.group) == node.by_path()
    assert len(pinned) == 1 and pinned.open_count == 4 and open_fds() == baseline + 4
    pinned.close()
    assert open_fds() == baseline


@pytest.mark.parametrize(
    ("change", "kept", "expected"),
    [
        ("nothing", 1, "path"),
        ("missing-file", 0, "path"),  # a file the kernel does not offer: read by path, nothing kept
        ("missing-cgroup", 0, "none"),  # not there (yet): None, opened again next time
        ("missing-in-one-hierarchy", 0, "path"),  # what is there is read, as by path
    ],
)
def test_what_is_kept(node: Node, change: str, kept: int, expected: str) -> None:
    baseline = open_fds()
    if change == "missing-file":
        node.tree.path(node.group[-1]).unlink()
    elif change == "missing-cgroup":
        for d in {p.rsplit("/", 1)[0] for p in node.group}:
            node.tree.remove(d)
    elif change == "missing-in-one-hierarchy":
        node.tree.remove(node.group[0].rsplit("/", 1)[0])
    pinned = PinnedFiles(node.files, budget=1000)
    got = pinned.read(node.group)
    assert got == (node.by_path() if expected == "path" else [None] * len(node.group))
    assert len(pinned) == kept and open_fds() == baseline + 4 * kept
    pinned.close()
    assert open_fds() == baseline


@pytest.mark.parametrize(
    "hostile",
    ["outside-roots", "dotdot", "symlinked-dir", "symlinked-file"],
)
def test_every_path_is_confined_as_a_path_read_is(node: Node, hostile: str) -> None:
    tree, group = node.tree, list(node.group)
    if hostile == "outside-roots":
        group[0] = "systemd/" + group[0].split("/", 1)[1] if tree.mode == "v1" else "system.slice/cpu.stat"
    elif hostile == "dotdot":
        group[0] = group[0].replace("/c1/", "/c1/../../../")
    elif hostile == "symlinked-dir":  # a planted link from inside the tree to a cgroup elsewhere
        elsewhere = tree.root / group[0].split("kubepods", 1)[0] / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / group[0].rsplit("/", 1)[1]).write_text("1\n")
        os.symlink(elsewhere, tree.path(group[0].replace("/c1/", "/evil/").rsplit("/", 1)[0]))
        group[0] = group[0].replace("/c1/", "/evil/")
    else:
        target = tree.path(group[0])
        target.unlink()
        os.symlink("/etc/hostname", target)
    baseline = open_fds()
    pinned = PinnedFiles(node.files, budget=1000)
    with pytest.raises(CgroupPathRefused):
        node.files.read(group[0])
    with pytest.raises(CgroupPathRefused):
        pinned.read(tuple(group))
    assert len(pinned) == 0 and open_fds() == baseline


class FlakyPread:
    """os.pread, but files whose inode is in `stale` answer `code` (as kernfs does for a removed cgroup)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.stale: set[int] = set()

    def __call__(self, fd: int, size: int, offset: int) -> bytes:
        if os.fstat(fd).st_ino in self.stale:
            raise OSError(self.code, os.strerror(self.code))
        return os.pread(fd, size, offset)


@pytest.mark.parametrize("code", [errno.ENODEV, errno.ENOENT, errno.ESTALE])
def test_a_recreated_cgroup_is_never_read_through_the_old_descriptor(node: Node, code: int) -> None:
    pread = FlakyPread(code)
    pinned = PinnedFiles(node.files, budget=1000, pread=pread)
    assert pinned.read(node.group) == node.by_path()
    old = list(pinned._groups[node.group])
    old_inodes = {os.fstat(fd).st_ino for fd in old}
    leaf_dirs = {p.rsplit("/", 1)[0] for p in node.group}
    for d in leaf_dirs:  # the pod's cgroup removed and created again under the same path
        node.tree.remove(d)
    node.tree.create(f"{POD}/c1")
    node.write(555)
    pread.stale = old_inodes
    assert pinned.read(node.group) == node.by_path()  # the new cgroup's values, at once
    new = pinned._groups[node.group]
    assert not old_inodes & {os.fstat(fd).st_ino for fd in new}
    assert pinned.open_count == 4


def test_another_read_error_is_typed_and_drops_the_group(node: Node) -> None:
    baseline = open_fds()
    pread = FlakyPread(errno.EIO)
    pinned = PinnedFiles(node.files, budget=1000, pread=pread)
    pinned.read(node.group)
    pread.stale = {os.fstat(fd).st_ino for fd in pinned._groups[node.group]}
    with pytest.raises(CgroupError) as info:
        pinned.read(node.group)
    assert info.value.errno == errno.EIO and node.group[0] in info.value.path
    assert len(pinned) == 0 and open_fds() == baseline


def test_descriptors_of_groups_that_went_away_are_closed_at_once(node: Node) -> None:
    groups = node.add(12)
    baseline = open_fds()
    pinned = PinnedFiles(node.files, budget=1000)
    for g in groups:
        pinned.read(g)
    assert open_fds() == baseline + 4 * len(groups)
    pinned.sweep(set(groups[:5]))
    assert len(pinned) == 5 and open_fds() == baseline + 20
    pinned.sweep(set())
    assert len(pinned) == 0 and pinned.open_count == 0 and open_fds() == baseline


def test_over_the_budget_the_rest_is_read_by_path_with_one_warning(node: Node) -> None:
    groups = node.add(5)
    warnings: list[str] = []
    pinned = PinnedFiles(node.files, warnings.append, budget=8)
    for _ in range(2):
        assert [pinned.read(g) for g in groups] == [node.by_path(g) for g in groups]
    assert len(pinned) == 2 and len(warnings) == 1 and "read by path" in warnings[0]


def test_emfile_degrades_to_path_reads_and_never_fails(node: Node) -> None:
    groups = node.add(24)
    expected = [node.by_path(g) for g in groups]
    warnings: list[str] = []
    pinned = PinnedFiles(node.files, warnings.append, budget=10**6)  # only the kernel's limit stops it
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 48, hard))
    try:
        got = [pinned.read(g) for g in groups] + [pinned.read(g) for g in groups]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert got == expected + expected
    assert 0 < len(pinned) < len(groups) and len(warnings) == 1 and "EMFILE" in warnings[0]
    pinned.close()


def test_the_soft_descriptor_limit_is_raised_toward_the_hard_one() -> None:
    code = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))\n"
        "from cgroupfs.pinned import raise_nofile_limit\n"
        "print(raise_nofile_limit(4096), *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    now, soft, hard = (int(x) for x in out)
    assert now == soft == min(4096, hard if hard != resource.RLIM_INFINITY else 4096)
