"""`apply` with the systemd driver: the pod's and tiers' values go to their slice units as properties over
D-Bus (to a recording fake systemd on a private bus), and only what systemd cannot express (hugetlb, the v1
soft limit) is written to files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.apply import reconcile_once
from agent.settings import from_mapping
from cgroupfs.systemd.properties import USEC_INFINITY
from cgroupfs.types import CgroupName, DriverKind
from tests.fakes.cgroup_tree import FakeCgroupTree
from tests.systemd.fakesystemd import FakeSystemd, PrivateBus
from tests.unit.podbuild import ctr, pod

UID = "cccccccc-1111-4000-8000-000000000003"
MI = 1024**2


def test_apply_sets_unit_properties_then_leftover_files(
    fake_cgroup_tree: Callable[..., FakeCgroupTree],
    private_bus: PrivateBus,
    fake_systemd: FakeSystemd,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", private_bus.address)
    tree = fake_cgroup_tree("v2", driver=DriverKind.SYSTEMD)
    from cgroupfs.naming import to_systemd_unit

    for name in (
        ("kubepods",),
        ("kubepods", "burstable"),
        ("kubepods", "besteffort"),
        ("kubepods", "burstable", f"pod{UID}"),
    ):
        tree.create(CgroupName(name))
        fake_systemd.units[to_systemd_unit(CgroupName(name))] = {}  # slices the kubelet made
    pods = [
        pod(
            "b",
            [
                ctr(
                    "app",
                    req={"cpu": "250m", "memory": "64Mi", "hugepages-2Mi": "2Mi"},
                    lim={"cpu": "333m", "memory": "128Mi", "hugepages-2Mi": "2Mi"},
                )
            ],
            uid=UID,
        )
    ]
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "List", "items": pods}))
    settings = from_mapping(
        {
            "cgroupfs": str(tree.root),
            "cgroupDriver": "systemd",
            "pods": str(tmp_path / "pods.json"),
            "hugepageSizes": ["2Mi"],
        }
    )
    report = reconcile_once(settings)
    assert report.ok, report.to_json()
    calls = [
        (c.member, c.args[0], {p[0]: p[1][1] for p in c.args[2]})
        for c in fake_systemd.calls
        if c.member == "SetUnitProperties"
    ]
    by_unit: dict[str, dict[str, object]] = {}
    for _, unit, props in calls:
        by_unit.setdefault(unit, {}).update(props)
    pod_unit = "kubepods-burstable-podcccccccc_1111_4000_8000_000000000003.slice"
    # 333m rounds up to 34% as systemd keeps whole percents: 340000 µs per second
    assert by_unit[pod_unit]["CPUQuotaPerSecUSec"] == 340000
    assert by_unit[pod_unit]["CPUWeight"] == 10  # 256 shares, linear
    assert by_unit[pod_unit]["MemoryMax"] == 128 * MI
    assert by_unit["kubepods-besteffort.slice"]["CPUWeight"] == 1
    assert all(c[1] != "kubepods.slice" or "MemoryMax" not in c[2] for c in calls)  # no allocatable given
    # every SetUnitProperties is a runtime change (a drop-in under /run, not /etc)
    assert all(c.args[1] is True for c in fake_systemd.calls if c.member == "SetUnitProperties")
    # hugetlb is not a systemd property: written to the file
    pod_dir = "kubepods.slice/kubepods-burstable.slice/" + pod_unit
    assert tree.read(f"{pod_dir}/hugetlb.2MB.max") == str(2 * MI)
    # the quota the diff expects is systemd's rounded one, never the raw 33300
    assert any(s.to_json().get("to") == "34000 100000" for s in report.plan.steps)
    assert USEC_INFINITY not in by_unit[pod_unit].values()
