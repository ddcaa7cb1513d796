"""The strict fake tree itself: it must look like the kernel, or every test built on it lies."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cgroupfs.errors import CgroupNotFound
from cgroupfs.files import CgroupFiles
from cgroupfs.layout import Hierarchy, RenderOptions, canonical, cgroup_directory, render
from cgroupfs.types import CgroupName, CgroupValues, Controller, DriverKind
from tests.support.cgroup_tree import FakeCgroupTree

KUBEPODS = CgroupName(("kubepods",))
POD = CgroupName(("kubepods", "burstable", "pod1234-ab"))
VALUES = CgroupValues(
    cpu_shares=122,
    cpu_quota=50000,
    cpu_period=100000,
    memory_limit=128 << 20,
    memory_reservation=64 << 20,
    hugetlb={2 << 20: 0, 1 << 30: 0},
)


@pytest.mark.parametrize(
    ("mode", "leaf", "files"),
    [
        pytest.param(
            "v1",
            "cpu/kubepods/burstable/pod1234-ab",
            {"cpu.shares": "1024", "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"},
            id="v1-cpu",
        ),
        pytest.param(
            "v1",
            "memory/kubepods/burstable/pod1234-ab",
            {
                "memory.limit_in_bytes": "9223372036854771712",
                "memory.soft_limit_in_bytes": "9223372036854771712",
                "memory.memsw.limit_in_bytes": "9223372036854771712",
                "memory.usage_in_bytes": "0",
            },
            id="v1-memory",
        ),
        pytest.param(
            "v1",
            "hugetlb/kubepods/burstable/pod1234-ab",
            {"hugetlb.2MB.limit_in_bytes": "9223372036854771712", "hugetlb.1GB.limit_in_bytes": "9223372036854771712"},
            id="v1-hugetlb",
        ),
        pytest.param(
            "v2",
            "kubepods/burstable/pod1234-ab",
            {
                "cpu.weight": "100",
                "cpu.max": "max 100000",
                "memory.max": "max",
                "memory.low": "0",
                "memory.current": "0",
                "hugetlb.2MB.max": "9223372036854771712",
                "cgroup.controllers": "cpuset cpu memory hugetlb pids",
                "cgroup.subtree_control": "cpuset cpu memory hugetlb pids",
            },
            id="v2",
        ),
        pytest.param(
            "hybrid",
            "unified/kubepods/burstable/pod1234-ab",
            {"hugetlb.2MB.max": "9223372036854771712", "cgroup.controllers": "hugetlb"},
            id="hybrid-unified",
        ),
    ],
)
def test_a_new_cgroup_holds_the_kernel_defaults(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], mode: str, leaf: str, files: dict[str, str]
) -> None:
    tree = fake_cgroup_tree(mode)
    assert leaf in tree.create(POD)
    for name, value in files.items():
        assert tree.read(f"{leaf}/{name}") == value, name


@pytest.mark.parametrize(
    ("mode", "leaf", "absent"),
    [
        ("v1", "cpu/kubepods/burstable/pod1234-ab", ["cpu.weight", "cpu.max", "memory.limit_in_bytes"]),
        ("v2", "kubepods/burstable/pod1234-ab", ["cpu.shares", "memory.limit_in_bytes", "hugetlb.2MB.limit_in_bytes"]),
        ("hybrid", "unified/kubepods/burstable/pod1234-ab", ["cpu.weight", "memory.max"]),
    ],
    ids=["v1-has-no-v2-files", "v2-has-no-v1-files", "hybrid-unified-only-hugetlb"],
)
def test_files_of_other_versions_and_controllers_are_absent(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], mode: str, leaf: str, absent: list[str]
) -> None:
    tree = fake_cgroup_tree(mode)
    tree.create(POD)
    present = set(tree.files(leaf))
    assert present
    assert not present & set(absent)


def test_ancestors_are_created_and_seeded(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> None:
    tree = fake_cgroup_tree("v1")
    tree.create(POD)
    for d in ("cpu/kubepods", "cpu/kubepods/burstable"):
        assert tree.read(f"{d}/cpu.shares") == "1024"
    assert tree.read("cpu/cpu.shares") == "1024"  # the hierarchy root is a cgroup too


def test_systemd_naming_uses_expanded_slices(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> None:
    tree = fake_cgroup_tree("v2", driver=DriverKind.SYSTEMD)
    (leaf,) = tree.create(POD)
    assert leaf == "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab.slice"
    assert tree.read("kubepods.slice/kubepods-burstable.slice/cpu.weight") == "100"


def test_co_mounted_cpu_holds_cpu_and_cpuacct_files(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> None:
    tree = fake_cgroup_tree("v1", co_mounted=True)
    (leaf,) = tree.create(POD, controllers=["cpu"])
    assert leaf == "cpu,cpuacct/kubepods/burstable/pod1234-ab"
    assert {"cpu.shares", "cpuacct.usage"} <= set(tree.files(leaf))
    assert tree.hierarchy.v1["cpuacct"] == "cpu,cpuacct"


@pytest.mark.parametrize("mode", ["v1", "v2", "hybrid"])
@pytest.mark.parametrize("driver", [DriverKind.CGROUPFS, DriverKind.SYSTEMD])
def test_every_file_layout_renders_exists_in_the_fake(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], mode: str, driver: DriverKind
) -> None:
    """The fake and cgroupfs.layout agree on file names: each rendered file can be written and read back."""
    tree = fake_cgroup_tree(mode, driver=driver)
    tree.create(POD)
    settings = render(POD, VALUES, tree.hierarchy, RenderOptions(driver))
    roots = {cgroup_directory(KUBEPODS, c, tree.hierarchy, driver) for c in Controller}
    files = CgroupFiles(tree.root, tuple(r for r in roots if r is not None))
    assert {s.controller for s in settings} == {"cpu", "memory", "hugetlb"}
    for s in settings:
        files.write(s.path, s.value)
        back = files.read(s.path)
        assert back is not None
        assert canonical(s.filename, back) == canonical(s.filename, s.value)
    assert files.writes == len(settings)


def test_a_write_to_a_file_that_was_not_seeded_fails(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> None:
    tree = fake_cgroup_tree("hybrid")
    tree.create(POD)
    files = CgroupFiles(tree.root, ("memory/kubepods",))
    with pytest.raises(CgroupNotFound):
        files.write("memory/kubepods/burstable/memory.max", "max")  # v2 name on v1 memory
    with pytest.raises(FileNotFoundError):
        tree.set("memory/kubepods/burstable/memory.lmit_in_bytes", "1")  # the builder is strict too


def test_the_expected_hierarchy_matches_the_layout(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> None:
    assert fake_cgroup_tree("hybrid").hierarchy == Hierarchy(
        v1={"cpu": "cpu", "cpuacct": "cpuacct", "cpuset": "cpuset", "memory": "memory", "pids": "pids"},
        unified="unified",
        unified_controllers=frozenset({"hugetlb"}),
    )
    assert fake_cgroup_tree("v2").hierarchy.mode == "v2"
    assert fake_cgroup_tree("v1").hierarchy.mode == "v1"
