"""The systemd driver's backends: a cgroup v2 tree run by systemd, with slices made as the kubelet makes
them and unit properties read back — from a fake systemd on a private bus, which writes the cgroup files
from the properties and re-applies them on `daemon_reload` as systemd does (`FakeSystemdBackend`), or
from the `make e2e-v2` guest's real systemd (`GuestSystemdBackend`) — and their registry for the
`systemd_backend` fixture."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import pytest

from cgroupfs.convert import hugepage_size_name
from cgroupfs.naming import to_systemd, to_systemd_unit
from cgroupfs.types import CgroupName, DriverKind
from tests.backends.host import guest_skip_reason, node_hugepage_sizes
from tests.support.cgroup_tree import UNLIMITED_TEXT, FakeCgroupTree


class SystemdBackend(Protocol):
    """A cgroup v2 tree run by systemd, for the systemd driver. Names are relative to the cgroup root."""

    @property
    def id(self) -> str: ...
    @property
    def real(self) -> bool: ...
    @property
    def cgroupfs(self) -> Path: ...
    @property
    def cgroup_root(self) -> str:
        """A slice: "kcg<hex>.slice"."""
    @property
    def hugepage_sizes(self) -> tuple[int, ...]: ...

    def start_slice(self, name: CgroupName, properties: Iterable[tuple[str, str, Any]] = ()) -> None:
        """A transient slice, as the kubelet starts pod and QoS slices (StartTransientUnit)."""

    def enable_hugetlb(self, name: CgroupName) -> None:
        """+hugetlb along the path to `name`, as the kubelet's libcontainer does (systemd does not)."""

    def unit(self, name: CgroupName) -> str: ...

    def path(self, name: CgroupName, filename: str) -> Path: ...

    def read(self, name: CgroupName, filename: str) -> str: ...

    def unit_property(self, name: CgroupName, prop: str) -> int:
        """A numeric unit property as systemd holds it (CPUWeight, CPUQuotaPerSecUSec, MemoryMax...)."""

    def write_directly(self, name: CgroupName, filename: str, value: str) -> None:
        """What a driver that bypasses systemd would do."""

    def daemon_reload(self) -> None:
        """systemd re-applies every unit's properties to its cgroup files."""

    def cleanup(self) -> list[str]: ...


UINT64_MAX: Final = 2**64 - 1
DEFAULT_PERIOD: Final = 100_000
# systemd's defaults for a unit without the property: what daemon-reload writes back
SYSTEMD_DEFAULTS: Final = {"cpu.weight": "100", "cpu.max": f"max {DEFAULT_PERIOD}", "memory.max": "max"}


def systemd_files(props: Mapping[str, tuple[str, Any]]) -> dict[str, str]:
    """The cgroup v2 files systemd 252 writes for a slice's properties (src/core/cgroup.c), defaults
    for those it has no property for. Written out here on purpose, not taken from cgroupfs.systemd."""
    out = dict(SYSTEMD_DEFAULTS)
    if "CPUWeight" in props:
        out["cpu.weight"] = str(props["CPUWeight"][1])
    if "CPUQuotaPerSecUSec" in props:
        per_sec = props["CPUQuotaPerSecUSec"][1]
        period = props.get("CPUQuotaPeriodUSec", ("t", DEFAULT_PERIOD))[1]
        if per_sec == UINT64_MAX:
            out["cpu.max"] = f"max {DEFAULT_PERIOD}"
        else:
            out["cpu.max"] = f"{max(per_sec * period // 1_000_000, 1000)} {period}"
    if "MemoryMax" in props:
        limit = props["MemoryMax"][1]
        out["memory.max"] = "max" if limit == UINT64_MAX else str(limit // 4096 * 4096)
    if "MemoryLow" in props:
        low = props["MemoryLow"][1]
        out["memory.low"] = "max" if low == UINT64_MAX else str(low // 4096 * 4096)
    return out


@dataclass
class FakeSystemdBackend:
    """The strict fake tree (v2, systemd naming) and the recording fake systemd on a private bus.

    The fake systemd here also does what systemd does with the properties: writes the cgroup files of a
    unit when its properties are set, and again on `daemon_reload` (reverting direct writes)."""

    tree: FakeCgroupTree
    fake: Any  # tests.systemd.fakesystemd.FakeSystemd
    bus: Any  # tests.systemd.fakesystemd.PrivateBus
    id: str = "fake-systemd"
    real: bool = False
    cgroup_root: str = "kcgfake.slice"
    hugepage_sizes: tuple[int, ...] = (2 << 20,)

    @classmethod
    def start(cls, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSystemdBackend:
        from tests.systemd.fakesystemd import FakeSystemd, PrivateBus

        bus = PrivateBus()
        bus.start()
        try:
            tree = FakeCgroupTree(
                tmp / "cgroupfs-systemd",
                "v2",
                driver=DriverKind.SYSTEMD,
                hugepage_sizes=(2 << 20,),
                v2_controllers=("cpuset", "cpu", "memory", "pids"),  # what systemd enables in slices
            )
            tree.set("cgroup.controllers", "cpuset cpu memory hugetlb pids")  # what the kernel offers
            fake = FakeSystemd(bus.address)
            backend = cls(tree, fake, bus)
            fake.on_properties = backend._write_unit_files
            fake.start()
        except BaseException:
            bus.cleanup()
            raise
        monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address)
        return backend

    @property
    def cgroupfs(self) -> Path:
        return self.tree.root

    def full(self, name: CgroupName) -> CgroupName:
        return CgroupName((self.cgroup_root.removesuffix(".slice"), *name.parts))

    def unit(self, name: CgroupName) -> str:
        return to_systemd_unit(self.full(name))

    def start_slice(self, name: CgroupName, properties: Iterable[tuple[str, str, Any]] = ()) -> None:
        full = self.full(name)
        for depth in range(1, len(full.parts) + 1):  # systemd makes the parent slices of a dashed name
            part = CgroupName(full.parts[:depth])
            self.tree.create(part, ("cpu", "memory", "pids"))
            self.fake.units.setdefault(to_systemd_unit(part), {})
        unit = to_systemd_unit(full)
        self.fake.units[unit].update({n: (sig, v) for n, sig, v in properties})
        self._write_unit_files(unit)

    def enable_hugetlb(self, name: CgroupName) -> None:
        """The fake tree seeds hugetlb files only where the controller is enabled: remake the leaf with it."""
        d = to_systemd(self.full(name))
        for filename, text in {
            f"hugetlb.{hugepage_size_name(s)}.{kind}": value
            for s in self.hugepage_sizes
            for kind, value in (("max", UNLIMITED_TEXT), ("rsvd.max", UNLIMITED_TEXT), ("current", "0"))
        }.items():
            with (self.tree.path(d) / filename).open("x") as f:
                f.write(text + "\n")

    def path(self, name: CgroupName, filename: str) -> Path:
        return self.tree.path(to_systemd(self.full(name))) / filename

    def read(self, name: CgroupName, filename: str) -> str:
        return self.path(name, filename).read_text().strip()

    def unit_property(self, name: CgroupName, prop: str) -> int:
        return int(self.fake.units[self.unit(name)][prop][1])

    def write_directly(self, name: CgroupName, filename: str, value: str) -> None:
        self.tree.set(str(self.path(name, filename).relative_to(self.tree.root)), value)

    def _write_unit_files(self, unit: str) -> None:
        from cgroupfs.naming import expand_slice

        directory = self.tree.path(expand_slice(unit))
        if not directory.is_dir():
            return
        for filename, text in systemd_files(self.fake.units.get(unit, {})).items():
            if (directory / filename).exists():
                self.tree.set(str((directory / filename).relative_to(self.tree.root)), text)

    def daemon_reload(self) -> None:
        for unit in list(self.fake.units):
            self._write_unit_files(unit)

    def cleanup(self) -> list[str]:
        self.fake.stop()
        self.bus.cleanup()
        return []


@dataclass
class GuestSystemdBackend:
    """The guest's real systemd (PID 1) and cgroup v2 tree, below a private slice kcg<hex>.slice."""

    slices: Any  # guestlib.SliceFactory
    id: str = "systemd-v2"
    real: bool = True
    cgroupfs: Path = Path("/sys/fs/cgroup")
    cgroup_root: str = field(default_factory=lambda: f"kcg{secrets.token_hex(4)}.slice")
    hugepage_sizes: tuple[int, ...] = field(default_factory=node_hugepage_sizes)

    @classmethod
    def start(cls) -> GuestSystemdBackend:
        from tests.v2guest.guestlib import SliceFactory

        return cls(SliceFactory())

    def full(self, name: CgroupName) -> CgroupName:
        return CgroupName((self.cgroup_root.removesuffix(".slice"), *name.parts))

    def unit(self, name: CgroupName) -> str:
        return to_systemd_unit(self.full(name))

    def start_slice(self, name: CgroupName, properties: Iterable[tuple[str, str, Any]] = ()) -> None:
        self.slices(self.unit(name), list(properties))

    def enable_hugetlb(self, name: CgroupName) -> None:
        from tests.v2guest.guestlib import enable_controllers

        current = self.cgroupfs
        for part in to_systemd(self.full(name)).split("/"):
            enable_controllers(current, ["hugetlb"])
            current = current / part

    def path(self, name: CgroupName, filename: str) -> Path:
        return self.cgroupfs / to_systemd(self.full(name)) / filename

    def read(self, name: CgroupName, filename: str) -> str:
        return self.path(name, filename).read_text().strip()

    def unit_property(self, name: CgroupName, prop: str) -> int:
        from tests.v2guest.guestlib import slice_property

        return slice_property(self.unit(name), prop)

    def write_directly(self, name: CgroupName, filename: str, value: str) -> None:
        from tests.v2guest.guestlib import write_text

        write_text(self.path(name, filename), value)

    def daemon_reload(self) -> None:
        from tests.v2guest.guestlib import systemctl

        systemctl("daemon-reload")

    def cleanup(self) -> list[str]:
        from tests.v2guest.guestlib import systemctl

        self.slices.stop_all()
        systemctl("stop", self.cgroup_root, check=False)  # the parent slices systemd made implicitly
        top = self.cgroupfs / self.cgroup_root
        return [str(top)] if top.exists() else []


SystemdFactory = Callable[[Path, pytest.MonkeyPatch], SystemdBackend]


def _fake_systemd(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> SystemdBackend:
    import shutil

    if shutil.which("dbus-daemon") is None:
        pytest.skip("dbus-daemon is not installed (Debian package dbus-daemon): the fake systemd needs a bus")
    return FakeSystemdBackend.start(tmp, monkeypatch)


SYSTEMD_FACTORIES: Final[Mapping[str, SystemdFactory]] = {
    "fake-systemd": _fake_systemd,
    "systemd-v2": lambda _tmp, _mp: GuestSystemdBackend.start(),
}
SYSTEMD_SKIP_REASONS: Final[Mapping[str, Callable[[], str | None]]] = {"systemd-v2": guest_skip_reason}
SYSTEMD_MARKS: Final[Mapping[str, tuple[pytest.MarkDecorator, ...]]] = {"systemd-v2": (pytest.mark.v2guest,)}
SYSTEMD_BACKENDS: Final = [
    pytest.param(i, id=i, marks=SYSTEMD_MARKS.get(i, ())) for i in SYSTEMD_FACTORIES
]
