"""The jeepney client against a real private dbus-daemon and a recording stand-in for systemd."""

from __future__ import annotations

from pathlib import Path

import pytest

from cgroupfs.systemd.bus import (
    DEFAULT_SYSTEM_BUS_ADDRESS,
    Backoff,
    BusUnavailable,
    NoSuchUnit,
    SystemdBus,
    SystemdError,
    system_bus_address,
)
from cgroupfs.systemd.properties import UINT64_MAX, Property
from tests.systemd.fakesystemd import MANAGER, ROOT, FakeSystemd, PrivateBus

POD = "kubepods-burstable-pod1234_ab.slice"
PROPS = (
    Property("MemoryMax", "t", 536870912),
    Property("CPUWeight", "t", 39),
    Property("CPUQuotaPeriodUSec", "t", 100000),
    Property("CPUQuotaPerSecUSec", "t", UINT64_MAX),
)
WIRE = [
    ("MemoryMax", ("t", 536870912)),
    ("CPUWeight", ("t", 39)),
    ("CPUQuotaPeriodUSec", ("t", 100000)),
    ("CPUQuotaPerSecUSec", ("t", UINT64_MAX)),
]


def test_set_unit_properties_sends_exact_call(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.units[POD] = {}
    client.set_unit_properties(POD, PROPS)
    (call,) = fake_systemd.calls
    assert (call.member, call.interface, call.path) == ("SetUnitProperties", MANAGER, ROOT)
    assert call.args == (POD, True, WIRE)
    assert fake_systemd.units[POD]["MemoryMax"] == ("t", 536870912)


def test_runtime_flag_is_passed(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.units[POD] = {}
    client.set_unit_properties(POD, PROPS[:1], runtime=False)
    assert fake_systemd.calls[0].args == (POD, False, WIRE[:1])


def test_missing_unit_is_no_such_unit(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    with pytest.raises(NoSuchUnit) as info:
        client.set_unit_properties(POD, PROPS)
    assert info.value.unit == POD
    assert info.value.dbus_error == "org.freedesktop.systemd1.NoSuchUnit"
    assert fake_systemd.members() == ["SetUnitProperties"]  # not retried


def test_rejected_property_is_named(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.units[POD] = {}
    fake_systemd.errors.append(
        (
            "SetUnitProperties",
            "org.freedesktop.DBus.Error.PropertyReadOnly",
            "Cannot set property CPUQuotaPeriodUSec, or unknown property.",
        )
    )
    with pytest.raises(SystemdError) as info:
        client.set_unit_properties(POD, PROPS)
    assert not isinstance(info.value, NoSuchUnit)
    assert info.value.property_name == "CPUQuotaPeriodUSec"
    assert info.value.dbus_error == "org.freedesktop.DBus.Error.PropertyReadOnly"
    assert "CPUQuotaPeriodUSec" in str(info.value) and POD in str(info.value)
    assert fake_systemd.members() == ["SetUnitProperties"]


def test_start_transient_slice_as_the_kubelet_does(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    created = client.start_transient_slice(
        POD, PROPS, description="pod 1234-ab", parent="kubepods-burstable.slice"
    )
    assert created is True
    (call,) = fake_systemd.calls
    assert call.member == "StartTransientUnit"
    assert call.args == (
        POD,
        "replace",
        [
            ("Description", ("s", "pod 1234-ab")),
            ("Wants", ("as", ["kubepods-burstable.slice"])),
            ("DefaultDependencies", ("b", False)),
            ("CPUAccounting", ("b", True)),
            ("MemoryAccounting", ("b", True)),
            *WIRE,
        ],
        [],
    )
    assert POD in fake_systemd.units


def test_job_removed_before_the_reply_is_not_lost(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.signal_before_reply = True
    assert client.start_transient_slice(POD, PROPS) is True


def test_existing_unit_gets_the_properties_instead(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.units[POD] = {}
    assert client.start_transient_slice(POD, PROPS) is False
    assert fake_systemd.members() == ["StartTransientUnit", "SetUnitProperties"]
    assert fake_systemd.calls[1].args == (POD, True, WIRE)


def test_failed_job_is_an_error_and_reset(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    fake_systemd.job_result = "failed"
    with pytest.raises(SystemdError, match="failed") as info:
        client.start_transient_slice(POD, PROPS)
    assert info.value.unit == POD
    assert fake_systemd.members() == ["StartTransientUnit", "ResetFailedUnit"]
    assert fake_systemd.calls[1].args == (POD,)


def test_transient_error_is_retried_with_backoff(
    client: SystemdBus, fake_systemd: FakeSystemd, sleeps: list[float]
) -> None:
    fake_systemd.units[POD] = {}
    fake_systemd.errors.append(("SetUnitProperties", "org.freedesktop.DBus.Error.NoReply", "no reply"))
    client.set_unit_properties(POD, PROPS)
    assert fake_systemd.members() == ["SetUnitProperties", "SetUnitProperties"]
    assert len(sleeps) == 1
    assert fake_systemd.units[POD]["CPUWeight"] == ("t", 39)


def test_retries_are_bounded_and_grow(
    client: SystemdBus, fake_systemd: FakeSystemd, sleeps: list[float]
) -> None:
    fake_systemd.units[POD] = {}
    for _ in range(4):
        fake_systemd.errors.append(("SetUnitProperties", "org.freedesktop.DBus.Error.LimitsExceeded", "busy"))
    with pytest.raises(BusUnavailable, match="LimitsExceeded") as info:
        client.set_unit_properties(POD, PROPS)
    assert info.value.unit == POD
    assert fake_systemd.members() == ["SetUnitProperties"] * 4
    assert len(sleeps) == 3
    assert sleeps == sorted(sleeps) and len(set(sleeps)) == 3
    assert all(s <= Backoff().maximum * (1 + Backoff().jitter) for s in sleeps)


def test_reconnects_after_the_bus_restarts(
    client: SystemdBus, private_bus: PrivateBus, fake_systemd: FakeSystemd
) -> None:
    fake_systemd.units[POD] = {}
    client.set_unit_properties(POD, PROPS[:1])
    fake_systemd.stop()
    private_bus.stop()
    private_bus.start()
    second = FakeSystemd(private_bus.address, units={POD: {}}).start()
    try:
        client.set_unit_properties(POD, PROPS[1:2])
        assert [c.args for c in second.calls] == [(POD, True, WIRE[1:2])]
    finally:
        second.stop()
    assert [c.args for c in fake_systemd.calls] == [(POD, True, WIRE[:1])]
    assert client.reconnects == 1


def test_no_bus_is_bus_unavailable(tmp_path: Path) -> None:
    sleeps: list[float] = []
    address = f"unix:path={tmp_path}/absent"
    bus = SystemdBus(address, backoff=Backoff(attempts=3), sleep=sleeps.append)
    with pytest.raises(BusUnavailable, match="after 3 attempts") as info:
        bus.set_unit_properties(POD, PROPS)
    assert address in str(info.value)
    assert len(sleeps) == 2


def test_unusable_address_fails_at_once() -> None:
    sleeps: list[float] = []
    bus = SystemdBus("tcp:host=localhost,port=1", sleep=sleeps.append)
    with pytest.raises(BusUnavailable, match="tcp:host=localhost"):
        bus.set_unit_properties(POD, PROPS)
    assert sleeps == []


def test_get_unit_property_and_version(client: SystemdBus, fake_systemd: FakeSystemd) -> None:
    client.start_transient_slice(POD, PROPS)
    assert client.get_unit_property(POD, "org.freedesktop.systemd1.Slice", "MemoryMax") == ("t", 536870912)
    assert client.manager_version() == fake_systemd.version
    with pytest.raises(NoSuchUnit):
        client.get_unit_property(
            "kubepods-besteffort-pod9.slice", "org.freedesktop.systemd1.Slice", "MemoryMax"
        )


def test_system_bus_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DBUS_SYSTEM_BUS_ADDRESS", raising=False)
    assert system_bus_address() == DEFAULT_SYSTEM_BUS_ADDRESS == "unix:path=/run/dbus/system_bus_socket"
    assert SystemdBus().address == DEFAULT_SYSTEM_BUS_ADDRESS
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/host/run/dbus/system_bus_socket")
    assert SystemdBus().address == "unix:path=/host/run/dbus/system_bus_socket"
    assert SystemdBus("unix:path=/x").address == "unix:path=/x"
