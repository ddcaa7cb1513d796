"""Facts the pure code relies on, checked against a real cgroup v2 kernel and a real systemd (PID 1).

Runs only inside the guest of `make e2e-v2` (see conftest.py). Each test states one fact; when one fails,
either the kernel/systemd behaves differently than the code assumes, or the code is wrong.
"""

from __future__ import annotations

import errno
import os
import uuid
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
    Hierarchy,
    RenderOptions,
    canonical,
    render,
)
from cgroupfs.naming import expand_slice, to_systemd, to_systemd_unit
from cgroupfs.types import UNLIMITED, CgroupName, CgroupValues, CgroupVersion, DriverKind
from tests.v2guest import guestlib
from tests.v2guest.guestlib import CgroupTree, SliceFactory, read_text, write_text

pytestmark = pytest.mark.v2guest

MiB = 1 << 20
HUGE_2M = 2 * MiB
MOUNT = guestlib.CGROUP_MOUNT


def v2_hierarchy() -> Hierarchy:
    """What mode detection must produce on this guest: a pure v2 host."""
    return Hierarchy(
        unified="", unified_controllers=frozenset(read_text(MOUNT / "cgroup.controllers").split())
    )


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


# --------------------------------------------------------------- memory.max below the current usage
ANON_64M = (
    "import time\n"
    "b = bytearray(b'x') * (64 << 20)\n"  # written, so every page is charged
    "print('ready', flush=True)\n"
    "time.sleep(3600)\n"
)


def test_memory_max_below_anon_usage_oom_kills_not_ebusy(cgroup_tree: CgroupTree) -> None:
    """v1 refuses a limit below usage (EBUSY); v2 takes it, reclaims what it can, then OOM-kills.

    No swap in the guest, so 64 MiB of written anonymous memory cannot be reclaimed.
    """
    path = cgroup_tree.mkdir("pod")
    child = cgroup_tree.spawn("pod", ANON_64M)
    assert child.wait_ready() == "ready"
    assert int(read_text(path / "memory.current")) >= 64 * MiB
    before = guestlib.keyed(path / "memory.events")

    write_text(path / MEMORY_MAX, str(16 * MiB))  # no OSError: the write itself succeeds

    assert child.proc.wait(timeout=60) == -9, "the process over the new limit is SIGKILLed"
    events = guestlib.keyed(path / "memory.events")
    assert events["oom_kill"] == before["oom_kill"] + 1
    assert events["oom"] >= before["oom"] + 1
    assert read_text(path / MEMORY_MAX) == str(16 * MiB)
    assert int(read_text(path / "memory.current")) <= 16 * MiB


def test_memory_max_below_page_cache_usage_reclaims(cgroup_tree: CgroupTree, unique: str) -> None:
    """Clean page cache over the new limit is reclaimed; the process lives on."""
    path = cgroup_tree.mkdir("pod")
    data = Path(f"/var/tmp/kca-v2test-{unique}.bin")
    code = (
        "import os, time\n"
        f"p = {str(data)!r}\n"
        "with open(p, 'wb') as f:\n"
        "    for _ in range(48):\n"
        "        f.write(b'y' * (1 << 20))\n"
        "    f.flush(); os.fsync(f.fileno())\n"
        "with open(p, 'rb') as f:\n"
        "    while f.read(1 << 20):\n"
        "        pass\n"
        "print('ready', flush=True)\n"
        "time.sleep(3600)\n"
    )
    try:
        child = cgroup_tree.spawn("pod", code)
        assert child.wait_ready() == "ready"
        stat = guestlib.keyed(path / "memory.stat")
        assert stat["file"] >= 40 * MiB, stat
        write_text(path / MEMORY_MAX, str(24 * MiB))
        assert child.proc.poll() is None, "the process survived"
        assert int(read_text(path / "memory.current")) <= 24 * MiB
        assert guestlib.keyed(path / "memory.events")["oom_kill"] == 0
    finally:
        data.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------ real systemd
def pod_slice(unique: str, qos: str = "burstable") -> tuple[CgroupName, str]:
    """A kubelet pod cgroup name with a uid that has dashes, and its systemd unit name."""
    uid = str(uuid.UUID(unique.ljust(32, "0")))
    name = CgroupName(("kubepods", qos, f"pod{uid}"))
    return name, to_systemd_unit(name)


def test_naming_matches_systemds_cgroup_path(transient_slice: SliceFactory, unique: str) -> None:
    name, unit = pod_slice(unique)
    assert "_" in unit and unit.startswith("kubepods-burstable-pod")
    path = transient_slice(unit, [("MemoryAccounting", "b", True)])
    assert guestlib.unit_property(unit, "ControlGroup") == "/" + to_systemd(name)
    assert path == MOUNT / to_systemd(name)
    rendered = render(
        name, CgroupValues(memory_limit=MiB * 100), v2_hierarchy(), RenderOptions(driver=DriverKind.SYSTEMD)
    )
    assert [s.directory for s in rendered] == [to_systemd(name)]
    assert (MOUNT / rendered[0].path).is_file()


def test_set_property_cpuquota_and_systemds_10ms_rounding(transient_slice: SliceFactory, unique: str) -> None:
    """CPUQuota=15% is cpu.max "15000 100000". systemd keeps a quota only in whole percent (10 ms per
    second) across a reload: 15.5% applies as 15500 but comes back as 15000 after daemon-reload. That is
    why runc rounds CPUQuotaPerSecUSec up to a multiple of 10 ms."""
    _, unit = pod_slice(unique)
    path = transient_slice(unit, [("MemoryAccounting", "b", True)])
    guestlib.systemctl("set-property", "--runtime", unit, "CPUQuota=15%")
    assert guestlib.wait_for(
        lambda: (path / CPU_MAX).exists() and read_text(path / CPU_MAX) == "15000 100000"
    )
    assert guestlib.unit_property(unit, "CPUQuotaPerSecUSec") == "150ms"

    guestlib.set_unit_properties(unit, [("CPUQuotaPerSecUSec", "t", 155_000)])
    assert guestlib.wait_for(lambda: read_text(path / CPU_MAX) == "15500 100000"), read_text(path / CPU_MAX)
    guestlib.systemctl("daemon-reload")
    assert guestlib.wait_for(lambda: read_text(path / CPU_MAX) == "15000 100000"), read_text(path / CPU_MAX)
    assert guestlib.unit_property(unit, "CPUQuotaPerSecUSec") == "150ms"

    guestlib.set_unit_properties(unit, [("CPUQuotaPerSecUSec", "t", 160_000)])  # a multiple of 10 ms
    guestlib.systemctl("daemon-reload")
    assert guestlib.wait_for(lambda: read_text(path / CPU_MAX) == "16000 100000"), read_text(path / CPU_MAX)


def test_daemon_reload_reverts_direct_writes_keeps_dbus_properties(
    transient_slice: SliceFactory, unique: str
) -> None:
    _, unit = pod_slice(unique)
    path = transient_slice(unit, [("MemoryMax", "t", 128 * MiB)])
    guestlib.set_unit_properties(
        unit, [("CPUWeight", "t", 200), ("CPUQuotaPerSecUSec", "t", 250_000), ("MemoryMax", "t", 512 * MiB)]
    )
    want = {CPU_WEIGHT: "200", CPU_MAX: "25000 100000", MEMORY_MAX: str(512 * MiB)}

    def state() -> dict[str, str]:
        return {f: read_text(path / f) if (path / f).exists() else "<missing>" for f in want}

    assert guestlib.wait_for(lambda: state() == want), state()
    # what a cgroupfs-only driver would do behind systemd's back
    write_text(path / CPU_WEIGHT, "999")
    write_text(path / CPU_MAX, "50000 100000")
    write_text(path / MEMORY_MAX, str(64 * MiB))
    assert state() == {CPU_WEIGHT: "999", CPU_MAX: "50000 100000", MEMORY_MAX: str(64 * MiB)}

    guestlib.systemctl("daemon-reload")
    assert guestlib.wait_for(lambda: state() == want), state()


def test_daemon_reload_resets_a_file_systemd_has_no_property_for(
    transient_slice: SliceFactory, unique: str
) -> None:
    """cpu.max written directly on a slice whose CPUQuota systemd never set: back to "max 100000"."""
    _, unit = pod_slice(unique)
    path = transient_slice(unit, [("CPUWeight", "t", 50)])
    assert read_text(path / CPU_MAX) == "max 100000"
    write_text(path / CPU_MAX, "30000 100000")
    guestlib.systemctl("daemon-reload")
    assert guestlib.wait_for(lambda: read_text(path / CPU_MAX) == "max 100000"), read_text(path / CPU_MAX)
    assert read_text(path / CPU_WEIGHT) == "50"


def test_slice_without_cpu_property_has_no_cpu_files_until_a_sibling_has_one(
    transient_slice: SliceFactory, unique: str
) -> None:
    """cpu.weight/cpu.max exist only where the parent enables cpu: a driver must not assume them.
    (CPUAccounting=yes alone does not enable the cpu controller; cpu.stat is always there.)"""
    parent = f"kcanocpu{unique}"
    first = transient_slice(f"{parent}-a.slice", [("MemoryMax", "t", 64 * MiB), ("CPUAccounting", "b", True)])
    assert (first / MEMORY_MAX).is_file()
    assert (first / "cpu.stat").is_file()
    assert not (first / CPU_WEIGHT).exists()
    assert not (first / CPU_MAX).exists()
    assert "cpu" not in read_text(first.parent / "cgroup.subtree_control").split()

    transient_slice(f"{parent}-b.slice", [("CPUWeight", "t", 50)])
    assert guestlib.wait_for((first / CPU_WEIGHT).exists)
    assert read_text(first / CPU_WEIGHT) == "100"
    assert read_text(first / CPU_MAX) == "max 100000"


def test_hugetlb_is_left_to_cgroupfs_and_survives_reload(transient_slice: SliceFactory, unique: str) -> None:
    """systemd does not manage hugetlb: the agent enables it along the path and writes the file itself;
    the value survives daemon-reload and set-property."""
    name, unit = pod_slice(unique)
    path = transient_slice(unit, [("MemoryMax", "t", 64 * MiB)])
    assert not (path / "hugetlb.2MB.max").exists()
    current = MOUNT
    for part in expand_slice(unit).split("/"):
        guestlib.enable_controllers(current, ["hugetlb"])
        current = current / part
    assert current == path
    [setting] = render(
        name,
        CgroupValues(hugetlb={HUGE_2M: 4 * MiB}),
        v2_hierarchy(),
        RenderOptions(driver=DriverKind.SYSTEMD),
    )
    write_text(MOUNT / setting.path, setting.value)
    guestlib.systemctl("daemon-reload")
    guestlib.systemctl("set-property", "--runtime", unit, "MemoryMax=32M")
    assert guestlib.wait_for(lambda: read_text(path / MEMORY_MAX) == str(32 * MiB))
    assert read_text(path / "hugetlb.2MB.max") == str(4 * MiB)
    assert "hugetlb" in read_text(path.parent / "cgroup.subtree_control").split()


def test_guest_process_is_root_in_system_slice() -> None:
    """The suite runs from ci-runner.service: root, in system.slice, with systemd on the system bus."""
    assert os.geteuid() == 0
    assert Path("/proc/self/cgroup").read_text().strip().startswith("0::/system.slice/ci-runner.service")
    assert guestlib.run(["busctl", "get-property", *guestlib.SYSTEMD_DEST, "Version"]).stdout.startswith("s ")
