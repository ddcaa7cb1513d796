"""SystemdUnits end to end over a real private bus: unit naming, create vs update, what it reports."""

from __future__ import annotations

import pytest

from cgroupfs.systemd.bus import NoSuchUnit, SystemdBus
from cgroupfs.systemd.driver import PropertyCall, SystemdUnits
from cgroupfs.systemd.properties import UINT64_MAX, Property
from cgroupfs.types import UNLIMITED, CgroupName, CgroupValues, CgroupVersion, NameError_
from tests.systemd.fakesystemd import FakeSystemd

POD = CgroupName(("kubepods", "burstable", "pod1234-ab"))
UNIT = "kubepods-burstable-pod1234_ab.slice"
VALUES = CgroupValues(
    cpu_shares=1024, cpu_quota=123456, cpu_period=100000, memory_limit=UNLIMITED, hugetlb={2 << 20: 0}
)
V2_PROPS = (
    Property("MemoryMax", "t", UINT64_MAX),
    Property("CPUWeight", "t", 39),
    Property("CPUQuotaPeriodUSec", "t", 100000),
    Property("CPUQuotaPerSecUSec", "t", 1240000),
)
V2_WIRE = [
    ("MemoryMax", ("t", UINT64_MAX)),
    ("CPUWeight", ("t", 39)),
    ("CPUQuotaPeriodUSec", ("t", 100000)),
    ("CPUQuotaPerSecUSec", ("t", 1240000)),
]


def test_updates_the_pod_slice(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.units[UNIT] = {}
    calls = SystemdUnits(client).apply(POD, VALUES, CgroupVersion.V2, "linear")
    assert calls == [PropertyCall("SetUnitProperties", UNIT, V2_PROPS)]
    assert [(c.member, c.args) for c in fake_systemd.calls] == [("SetUnitProperties", (UNIT, True, V2_WIRE))]


def test_v1_properties(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.units[UNIT] = {}
    SystemdUnits(client).apply(POD, VALUES, CgroupVersion.V1, "linear")
    (call,) = fake_systemd.calls
    assert [name for name, _ in call.args[2]] == [
        "MemoryLimit",
        "CPUShares",
        "CPUQuotaPeriodUSec",
        "CPUQuotaPerSecUSec",
    ]
    assert call.args[2][1] == ("CPUShares", ("t", 1024))


def test_creates_only_when_asked(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    units = SystemdUnits(client)
    with pytest.raises(NoSuchUnit) as info:
        units.apply(POD, VALUES, CgroupVersion.V2, "linear")
    assert info.value.unit == UNIT
    assert UNIT not in fake_systemd.units

    calls = units.apply(POD, VALUES, CgroupVersion.V2, "linear", create=True)
    assert calls == [PropertyCall("StartTransientUnit", UNIT, V2_PROPS)]
    start = fake_systemd.calls[-1]
    assert start.member == "StartTransientUnit"
    props = dict(start.args[2])
    assert props["Wants"] == ("as", ["kubepods-burstable.slice"])
    assert props["Description"] == ("s", "kube-cgroup-agent /kubepods/burstable/pod1234-ab")
    assert props["CPUQuotaPerSecUSec"] == ("t", 1240000)


def test_create_of_an_existing_slice_updates_it(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.units[UNIT] = {}
    calls = SystemdUnits(client).apply(POD, VALUES, CgroupVersion.V2, "linear", create=True)
    assert [c.method for c in calls] == ["StartTransientUnit", "SetUnitProperties"]
    assert fake_systemd.members() == ["StartTransientUnit", "SetUnitProperties"]
    assert fake_systemd.units[UNIT]["CPUWeight"] == ("t", 39)


def test_idempotent(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.units[UNIT] = {}
    units = SystemdUnits(client)
    first = units.apply(POD, VALUES, CgroupVersion.V2, "linear")
    state = dict(fake_systemd.units[UNIT])
    second = units.apply(POD, VALUES, CgroupVersion.V2, "linear")
    assert first == second
    assert fake_systemd.units[UNIT] == state
    assert fake_systemd.calls[0].args == fake_systemd.calls[1].args


def test_nothing_systemd_holds_makes_no_call(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    only_files = CgroupValues(hugetlb={2 << 20: 0})
    assert SystemdUnits(client).apply(POD, only_files, CgroupVersion.V2, "linear") == []
    assert fake_systemd.calls == []


def test_root_slice_is_never_created(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    with pytest.raises(NameError_):
        SystemdUnits(client).apply(CgroupName(()), VALUES, CgroupVersion.V2, "linear", create=True)
    assert fake_systemd.calls == []
