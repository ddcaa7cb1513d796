"""Facts the pure code relies on, checked against a real cgroup v2 kernel: the guest is pure v2, and what
layout.render writes is what the kernel takes and reads back canonically, boundaries and edge values included.

Runs only inside the guest of `make e2e-v2` (see conftest.py). Each test states one fact; when one fails,
either the kernel behaves differently than the code assumes, or the code is wrong. Memory limits below the
usage are test_guest_memory_below_usage.py; systemd's side, test_guest_systemd.py.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgroupfs.convert import V1_UNLIMITED_READBACK
from cgroupfs.layout import (
    CPU_MAX,
    CPU_WEIGHT,
    MEMORY_LOW,
    MEMORY_MAX,
    RenderOptions,
    canonical,
    render,
)
from cgroupfs.types import UNLIMITED, CgroupName, CgroupValues, CgroupVersion
from tests.v2guest import guestlib
from tests.v2guest.guestlib import CgroupTree, read_text, v2_hierarchy, write_text

pytestmark = pytest.mark.v2guest

MiB = 1 << 20
HUGE_2M = 2 * MiB
MOUNT = guestlib.CGROUP_MOUNT


# ------------------------------------------------------------------------------------------ the guest
def test_guest_is_pure_v2_with_systemd() -> None:
    assert guestlib.pid1_comm() == "systemd"
    assert guestlib.cgroup_mount_type() == "cgroup2"
    mounts = Path("/proc/self/mounts").read_text().split("\n")
    assert not [m for m in mounts if m.split(" ")[2:3] == ["cgroup"]], "a cgroup v1 hierarchy is mounted"
    controllers = set(read_text(MOUNT / "cgroup.controllers").split())
    assert {"cpu", "memory", "hugetlb", "pids"} <= controllers
    assert Path("/sys/kernel/mm/hugepages/hugepages-2048kB").is_dir()
    assert v2_hierarchy().mode == "v2"


# -------------------------------------------------------------------- layout.render on the real kernel
RENDER_CASES = {
    "burstable-like": CgroupValues(
        cpu_shares=1024,
        cpu_quota=50_000,
        cpu_period=100_000,
        memory_limit=100_000_000,  # not page aligned: the kernel keeps 99999744
        memory_reservation=50_000_001,
        hugetlb={HUGE_2M: 5 * MiB},  # not 2 MiB aligned: the kernel keeps 4 MiB
    ),
    "unlimited": CgroupValues(
        cpu_shares=2, cpu_quota=UNLIMITED, cpu_period=100_000, memory_limit=UNLIMITED, hugetlb={HUGE_2M: 0}
    ),
    "kubelet-qos-unbounded-hugetlb": CgroupValues(cpu_shares=262_144, hugetlb={HUGE_2M: 1 << 62}),
    "quota-only-default-period": CgroupValues(cpu_quota=1000),
    "huge-memory": CgroupValues(memory_limit=(1 << 62) + 12345, memory_reservation=(1 << 50) + 1),
    "period-only": CgroupValues(cpu_period=50_000),
}


@pytest.mark.parametrize("values", RENDER_CASES.values(), ids=RENDER_CASES.keys())
def test_render_v2_files_exist_and_kernel_reads_back_canonically(
    cgroup_tree: CgroupTree, values: CgroupValues
) -> None:
    cgroup_tree.mkdir("pod")
    name = CgroupName((cgroup_tree.name, "pod"))
    settings_ = render(name, values, v2_hierarchy(), RenderOptions())
    assert settings_, "render produced nothing"
    for s in settings_:
        assert s.version is CgroupVersion.V2
        assert s.directory == f"{cgroup_tree.name}/pod"
        path = MOUNT / s.path
        assert path.is_file(), f"render names {s.path}, which a real v2 cgroup does not have"
        write_text(path, s.value)
        back = read_text(path)
        assert canonical(s.filename, back) == canonical(s.filename, s.value), (s.path, s.value, back)


def test_render_v2_file_set_matches_the_kernels(cgroup_tree: CgroupTree) -> None:
    """Every v2 file name render can produce is one the kernel offers in a cgroup with the controllers on."""
    path = cgroup_tree.mkdir("pod")
    values = CgroupValues(
        cpu_shares=10,
        cpu_quota=2000,
        cpu_period=10_000,
        memory_limit=MiB * 64,
        memory_reservation=MiB,
        hugetlb={HUGE_2M: HUGE_2M},
    )
    names = {
        s.filename
        for s in render(CgroupName((cgroup_tree.name, "pod")), values, v2_hierarchy(), RenderOptions())
    }
    assert names == {CPU_WEIGHT, CPU_MAX, MEMORY_MAX, MEMORY_LOW, "hugetlb.2MB.max"}
    assert names <= {p.name for p in path.iterdir()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shares=st.integers(min_value=2, max_value=300_000),  # 0 and 1: see the xfail below
    quota=st.one_of(st.just(UNLIMITED), st.integers(min_value=1000, max_value=10_000_000)),
    period=st.one_of(st.none(), st.integers(min_value=1000, max_value=1_000_000)),
    memory=st.one_of(st.just(UNLIMITED), st.integers(min_value=0, max_value=1 << 62)),
    low=st.integers(min_value=0, max_value=1 << 50),
    huge=st.integers(min_value=0, max_value=1 << 50),
)
def test_kernel_accepts_every_rendered_value(
    cgroup_tree: CgroupTree, shares: int, quota: int, period: int | None, memory: int, low: int, huge: int
) -> None:
    cgroup_tree.mkdir("pod")
    values = CgroupValues(
        cpu_shares=shares,
        cpu_quota=quota,
        cpu_period=period,
        memory_limit=memory,
        memory_reservation=low,
        hugetlb={HUGE_2M: huge},
    )
    for opts in (RenderOptions(), RenderOptions(weight_formula="quadratic")):
        for s in render(CgroupName((cgroup_tree.name, "pod")), values, v2_hierarchy(), opts):
            path = MOUNT / s.path
            write_text(path, s.value)
            assert canonical(s.filename, read_text(path)) == canonical(s.filename, s.value), (s.path, s.value)


def test_kernel_rejects_quota_below_1ms_and_minus_one_for_memory(cgroup_tree: CgroupTree) -> None:
    """Why the compute layer clamps quota to 1000 µs and the v2 renderer must say "max", never -1."""
    path = cgroup_tree.mkdir("pod")
    with pytest.raises(OSError) as quota_err:
        write_text(path / CPU_MAX, "999 100000")
    assert quota_err.value.errno == errno.EINVAL
    with pytest.raises(OSError) as mem_err:
        write_text(path / MEMORY_MAX, "-1")
    assert mem_err.value.errno == errno.EINVAL
    write_text(path / MEMORY_MAX, "max")
    assert read_text(path / MEMORY_MAX) == "max"


# 0, sub-page, one page, and the top end, where the kernel's page counter saturates and reads back "max"
BOUNDARY_BYTES = [0, 4095, 4096, 1 << 62, V1_UNLIMITED_READBACK - 1, V1_UNLIMITED_READBACK, (1 << 63) - 1]
# hugetlb saturates earlier: at PAGE_COUNTER_MAX rounded down to whole huge pages (2 MiB here)
HUGETLB_2M_SATURATION = (V1_UNLIMITED_READBACK // 4096) // 512 * 512 * 4096  # 9223372036852678656
HUGETLB_BOUNDARIES = [
    0,
    4096,
    HUGE_2M - 1,
    HUGE_2M,
    1 << 62,
    HUGETLB_2M_SATURATION - HUGE_2M,
    HUGETLB_2M_SATURATION,
    V1_UNLIMITED_READBACK - 1,
    V1_UNLIMITED_READBACK,
    (1 << 63) - 1,
]


def round_trip(tree: CgroupTree, values: CgroupValues) -> None:
    tree.mkdir("pod")
    for s in render(CgroupName((tree.name, "pod")), values, v2_hierarchy(), RenderOptions()):
        path = MOUNT / s.path
        write_text(path, s.value)
        back = read_text(path)
        assert canonical(s.filename, back) == canonical(s.filename, s.value), (s.path, s.value, back)


@pytest.mark.parametrize("limit", BOUNDARY_BYTES)
def test_memory_boundaries_read_back_canonically(cgroup_tree: CgroupTree, limit: int) -> None:
    round_trip(cgroup_tree, CgroupValues(memory_limit=limit, memory_reservation=limit))


@pytest.mark.parametrize("limit", HUGETLB_BOUNDARIES)
def test_hugetlb_boundaries_read_back_canonically(cgroup_tree: CgroupTree, limit: int) -> None:
    round_trip(cgroup_tree, CgroupValues(hugetlb={HUGE_2M: limit}))


@pytest.mark.parametrize(
    ("values", "opts"),
    [
        (CgroupValues(memory_reservation=UNLIMITED), RenderOptions()),
        (CgroupValues(hugetlb={HUGE_2M: UNLIMITED}), RenderOptions()),
        (CgroupValues(cpu_shares=0), RenderOptions(weight_formula="quadratic")),
    ],
    ids=["memory.low-unlimited", "hugetlb-unlimited", "quadratic-shares-0"],
)
def test_render_v2_edge_values_are_accepted_by_the_kernel(
    cgroup_tree: CgroupTree, values: CgroupValues, opts: RenderOptions
) -> None:
    cgroup_tree.mkdir("pod")
    for s in render(CgroupName((cgroup_tree.name, "pod")), values, v2_hierarchy(), opts):
        write_text(MOUNT / s.path, s.value)
        assert canonical(s.filename, read_text(MOUNT / s.path)) == canonical(s.filename, s.value)
