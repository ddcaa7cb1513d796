"""Facts about a real systemd (PID 1) the systemd driver relies on: its slice names and cgroup paths, how
it rounds CPUQuota, what daemon-reload reverts and what it keeps, where cpu files exist, and that it
leaves hugetlb to the agent.

Runs only inside the guest of `make e2e-v2` (see conftest.py), from ci-runner.service.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from cgroupfs.layout import CPU_MAX, CPU_WEIGHT, MEMORY_MAX, RenderOptions, render
from cgroupfs.naming import expand_slice, to_systemd, to_systemd_unit
from cgroupfs.types import CgroupName, CgroupValues, DriverKind
from tests.v2guest import guestlib
from tests.v2guest.guestlib import SliceFactory, read_text, v2_hierarchy, write_text

pytestmark = pytest.mark.v2guest

MiB = 1 << 20
HUGE_2M = 2 * MiB
MOUNT = guestlib.CGROUP_MOUNT


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
