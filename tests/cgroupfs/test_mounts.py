"""Mode detection: mountinfo text of three kinds of host, and plain-directory trees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cgroupfs.layout import Hierarchy
from cgroupfs.mounts import (
    CgroupMount,
    HierarchyNotFound,
    detect_hierarchy,
    force_version,
    hierarchy_from_layout,
    hierarchy_from_mounts,
    parse_mountinfo,
    unified_mount,
)
from cgroupfs.types import CgroupVersion, Controller
from tests.support.cgroup_tree import FakeCgroupTree

# Captured from this development machine (Debian 12, kernel 6.18, no systemd): v1 with cpu and cpuacct
# mounted separately, a named systemd hierarchy, and cgroup2 at unified offering only hugetlb.
THIS_MACHINE = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334460k,nr_inodes=3083615,mode=755
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684084k
26 24 0:24 / /dev/pts rw,relatime - devpts devpts rw,mode=600,ptmxmode=000
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
THIS_MACHINE_UNIFIED_CONTROLLERS = "hugetlb\n"

# A pure v2 host booted by systemd (Debian 12 / Ubuntu 22.04 style): one cgroup2 mount, optional
# "shared:N" fields before the separator.
PURE_V2 = """\
22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 22 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
27 22 0:25 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:10 - pstore pstore rw
"""
PURE_V2_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc\n"

# A systemd v1 host of the CentOS 7 kind: cpu and cpuacct co-mounted (super options list cpuacct first),
# net_cls,net_prio co-mounted, extra flags (xattr, clone_children, release_agent=...) and no unified.
CO_MOUNTED = """\
18 62 0:17 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw,seclabel
23 18 0:18 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,seclabel,mode=755
24 23 0:19 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,seclabel,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
26 23 0:21 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,seclabel,cpuset,clone_children
27 23 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,seclabel,cpuacct,cpu
28 23 0:23 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,seclabel,memory
31 23 0:26 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,seclabel,net_prio,net_cls
34 23 0:29 / /sys/fs/cgroup/hugetlb rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,seclabel,hugetlb
35 23 0:30 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:20 - cgroup cgroup rw,seclabel,pids
"""

# The same host seen from a DaemonSet that mounts the node's /sys/fs/cgroup at /host/sys/fs/cgroup.
IN_DAEMONSET = "\n".join(
    line.replace(" /sys/fs/cgroup", " /host/sys/fs/cgroup") for line in THIS_MACHINE.splitlines()
)


@pytest.mark.parametrize(
    ("text", "cgroupfs", "controllers_text", "expected"),
    [
        pytest.param(
            THIS_MACHINE,
            "/sys/fs/cgroup",
            THIS_MACHINE_UNIFIED_CONTROLLERS,
            Hierarchy(
                v1={
                    "blkio": "blkio",
                    "cpu": "cpu",
                    "cpuacct": "cpuacct",
                    "cpuset": "cpuset",
                    "devices": "devices",
                    "freezer": "freezer",
                    "memory": "memory",
                    "pids": "pids",
                },
                unified="unified",
                unified_controllers=frozenset({"hugetlb"}),
            ),
            id="this-machine-hybrid-separate-cpu-and-cpuacct",
        ),
        pytest.param(
            PURE_V2,
            "/sys/fs/cgroup",
            PURE_V2_CONTROLLERS,
            Hierarchy(
                unified="",
                unified_controllers=frozenset(PURE_V2_CONTROLLERS.split()),
            ),
            id="pure-v2",
        ),
        pytest.param(
            CO_MOUNTED,
            "/sys/fs/cgroup",
            None,
            Hierarchy(
                v1={
                    "cpu": "cpu,cpuacct",
                    "cpuacct": "cpu,cpuacct",
                    "cpuset": "cpuset",
                    "hugetlb": "hugetlb",
                    "memory": "memory",
                    "net_cls": "net_cls,net_prio",
                    "net_prio": "net_cls,net_prio",
                    "pids": "pids",
                }
            ),
            id="co-mounted-cpu-cpuacct-no-unified",
        ),
        pytest.param(
            IN_DAEMONSET,
            "/host/sys/fs/cgroup",
            THIS_MACHINE_UNIFIED_CONTROLLERS,
            Hierarchy(
                v1={
                    "blkio": "blkio",
                    "cpu": "cpu",
                    "cpuacct": "cpuacct",
                    "cpuset": "cpuset",
                    "devices": "devices",
                    "freezer": "freezer",
                    "memory": "memory",
                    "pids": "pids",
                },
                unified="unified",
                unified_controllers=frozenset({"hugetlb"}),
            ),
            id="daemonset-host-mount",
        ),
        pytest.param(THIS_MACHINE, "/elsewhere", None, Hierarchy(), id="mounts-outside-cgroupfs-are-ignored"),
    ],
)
def test_mountinfo_gives_the_hierarchy_relative_to_cgroupfs(
    text: str, cgroupfs: str, controllers_text: str | None, expected: Hierarchy
) -> None:
    assert hierarchy_from_mounts(parse_mountinfo(text), cgroupfs, controllers_text) == expected


@pytest.mark.parametrize(
    ("text", "mode", "cpu", "hugetlb"),
    [
        pytest.param(THIS_MACHINE, "hybrid", (CgroupVersion.V1, "cpu"), (CgroupVersion.V2, "unified"), id="this"),
        pytest.param(PURE_V2, "v2", (CgroupVersion.V2, ""), (CgroupVersion.V2, ""), id="pure-v2"),
        pytest.param(
            CO_MOUNTED, "v1", (CgroupVersion.V1, "cpu,cpuacct"), (CgroupVersion.V1, "hugetlb"), id="co-mounted"
        ),
    ],
)
def test_each_host_locates_cpu_and_hugetlb_where_its_kernel_has_them(
    text: str, mode: str, cpu: tuple[CgroupVersion, str], hugetlb: tuple[CgroupVersion, str]
) -> None:
    controllers = {THIS_MACHINE: THIS_MACHINE_UNIFIED_CONTROLLERS, PURE_V2: PURE_V2_CONTROLLERS}.get(text)
    h = hierarchy_from_mounts(parse_mountinfo(text), "/sys/fs/cgroup", controllers)
    assert h.mode == mode
    assert h.locate(Controller.CPU) == cpu
    assert h.locate(Controller.HUGETLB) == hugetlb


def test_named_hierarchies_and_flags_are_not_controllers() -> None:
    mounts = parse_mountinfo(CO_MOUNTED)
    by_point = {m.mount_point: m for m in mounts}
    assert by_point["/sys/fs/cgroup/systemd"].controllers == frozenset()
    assert by_point["/sys/fs/cgroup/cpuset"].controllers == {"cpuset"}
    assert by_point["/sys/fs/cgroup/cpu,cpuacct"].controllers == {"cpu", "cpuacct"}
    assert all(m.fstype == "cgroup" for m in mounts)


def test_escaped_mount_points_are_unescaped() -> None:
    text = r"41 31 0:38 / /mnt/my\040cgroups rw,relatime - cgroup2 cgroup2 rw" + "\n"
    assert parse_mountinfo(text) == (CgroupMount("/mnt/my cgroups", "cgroup2", frozenset()),)
    assert unified_mount(parse_mountinfo(text), "/mnt/my cgroups") == ""


def test_a_later_mount_on_the_same_point_hides_the_earlier() -> None:
    text = THIS_MACHINE + "99 32 0:50 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,pids\n"
    h = hierarchy_from_mounts(parse_mountinfo(text), "/sys/fs/cgroup", None)
    assert "cpu" not in h.v1
    assert h.v1["pids"] == "cpu"  # both pids mounts are equally shallow; the names sort "cpu" first


def test_the_shallowest_cgroup2_mount_is_the_unified_one() -> None:
    text = PURE_V2 + "50 26 0:24 /sub /sys/fs/cgroup/nested rw - cgroup2 cgroup2 rw\n"
    assert unified_mount(parse_mountinfo(text), "/sys/fs/cgroup") == ""


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=300))
def test_the_parser_never_raises_on_arbitrary_text(text: str) -> None:
    for m in parse_mountinfo(text):
        assert m.fstype in ("cgroup", "cgroup2")


@pytest.mark.parametrize(
    ("version", "v1", "unified"),
    [("auto", True, True), ("1", True, False), ("2", False, True)],
    ids=["auto-keeps-both", "v1-keeps-v1-only", "v2-keeps-unified-only"],
)
def test_a_forced_version_keeps_only_that_version(version: str, v1: bool, unified: bool) -> None:
    h = hierarchy_from_mounts(parse_mountinfo(THIS_MACHINE), "/sys/fs/cgroup", THIS_MACHINE_UNIFIED_CONTROLLERS)
    forced = force_version(h, version)
    assert bool(forced.v1) is v1
    assert (forced.unified is not None) is unified


def test_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, 1, 2"):
        force_version(Hierarchy(), "3")


# ----- directory layout (sample and fake trees)


@pytest.mark.parametrize(
    ("dirs", "top", "unified", "expected"),
    [
        pytest.param(
            ["cpu", "memory", "systemd", "random"],
            None,
            None,
            Hierarchy(v1={"cpu": "cpu", "memory": "memory"}),
            id="v1",
        ),
        pytest.param(
            ["cpu", "cpu,cpuacct", "cpuacct", "memory"],
            None,
            None,
            Hierarchy(v1={"cpu": "cpu,cpuacct", "cpuacct": "cpu,cpuacct", "memory": "memory"}),
            id="co-mounted-wins-over-its-alias",
        ),
        pytest.param(
            ["cpu", "memory", "unified"],
            None,
            "hugetlb",
            Hierarchy(v1={"cpu": "cpu", "memory": "memory"}, unified="unified", unified_controllers=frozenset({"hugetlb"})),
            id="hybrid",
        ),
        pytest.param(
            ["kubepods.slice", "system.slice"],
            "cpu memory",
            None,
            Hierarchy(unified="", unified_controllers=frozenset({"cpu", "memory"})),
            id="pure-v2",
        ),
        pytest.param(["random"], None, None, Hierarchy(), id="nothing"),
    ],
)
def test_layout_inference(dirs: list[str], top: str | None, unified: str | None, expected: Hierarchy) -> None:
    assert hierarchy_from_layout(dirs, top, unified) == expected


EMPTY_MOUNTINFO = "22 27 0:21 / /proc rw,relatime - proc proc rw\n"


@pytest.mark.parametrize("mode", ["v1", "v2", "hybrid"])
@pytest.mark.parametrize("co_mounted", [False, True], ids=["separate", "co-mounted"])
def test_fake_trees_are_detected_from_their_layout(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, mode: str, co_mounted: bool
) -> None:
    tree = fake_cgroup_tree(mode, co_mounted=co_mounted)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(EMPTY_MOUNTINFO)
    assert detect_hierarchy(tree.root, mountinfo) == tree.hierarchy


def test_the_sample_node_is_hybrid() -> None:
    sample = Path(__file__).resolve().parents[2] / "agent" / "commands" / "samples" / "node" / "cgroupfs"
    h = detect_hierarchy(sample, Path("/nonexistent/mountinfo"))
    assert h.mode == "hybrid"
    assert h.locate(Controller.HUGETLB) == (CgroupVersion.V2, "unified")


def test_detection_uses_the_mount_table_when_cgroupfs_holds_mounts(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path
) -> None:
    # the directory looks v1, but the mount table says a cgroup2 is mounted right there: the table wins
    tree = fake_cgroup_tree("v1")
    (tree.root / "cgroup.controllers").write_text("cpu memory\n")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"26 22 0:24 / {tree.root} rw - cgroup2 cgroup2 rw\n")
    assert detect_hierarchy(tree.root, mountinfo) == Hierarchy(
        unified="", unified_controllers=frozenset({"cpu", "memory"})
    )


@pytest.mark.parametrize(
    ("version", "match"),
    [("auto", "no cgroup hierarchy"), ("2", "no cgroup v2 hierarchy")],
    ids=["nothing-at-all", "no-v2-in-a-v1-tree"],
)
def test_detection_fails_with_a_clear_typed_error(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, version: str, match: str
) -> None:
    root = tmp_path / "empty" if version == "auto" else fake_cgroup_tree("v1").root
    root.mkdir(exist_ok=True)
    with pytest.raises(HierarchyNotFound, match=match) as info:
        detect_hierarchy(root, tmp_path / "no-mountinfo", version)
    assert str(root) in str(info.value)
    assert isinstance(info.value, ValueError)  # what the pipeline catches


def test_this_host_is_detected_from_its_mount_table() -> None:
    if not Path("/sys/fs/cgroup/cpu/cpu.shares").exists():
        pytest.skip("not a v1 host")
    h = detect_hierarchy(Path("/sys/fs/cgroup"))
    assert h.locate(Controller.CPU) == (CgroupVersion.V1, "cpu")
    assert h.locate(Controller.MEMORY) == (CgroupVersion.V1, "memory")


def test_a_missing_cgroupfs_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(HierarchyNotFound, match="is not a directory"):
        detect_hierarchy(tmp_path / "nope", tmp_path / "no-mountinfo")
