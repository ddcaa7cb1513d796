"""One suite, several backends: the same `apply` tests run on the strict fake tree and on real kernels.

A `Backend` is a cgroup tree the agent is pointed at (`cgroupfs`, `cgroup_root`), which a test fills the
way the kubelet would (`create`) and reads back (`read`). Implementations:

- `FakeBackend`: tests/fakes/cgroup_tree.py, v1 / v2 / hybrid; everywhere.
- `HostKernelBackend`: this host's real v1 cpu and memory hierarchies (hugetlb in the unified one when it
  has it: the hybrid layout of the development machines), below a private kcg-test-<hex> root; root only.
- `GuestV2Backend`: the real cgroup v2 kernel of the `make e2e-v2` guest, below /kcg-v2-<hex>, with cpu,
  memory, hugetlb enabled along the path; only inside the guest.

`SystemdBackend` is the same idea for the systemd driver: slices made as the kubelet makes them and unit
properties read back, from a fake systemd on a private bus (which writes the cgroup files from the
properties and re-applies them on `daemon_reload`, as systemd does) or from the guest's real systemd.

Tests take the `backend` / `systemd_backend` fixtures (tests/conftest.py) parametrized with `BACKENDS` /
`SYSTEMD_BACKENDS`; a real backend skips with the reason where it cannot run. Paths are resolved here
independently of cgroupfs.layout (the code under test), from each backend's own knowledge of its mounts.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import pytest

from cgroupfs.convert import hugepage_size_name
from cgroupfs.naming import to_cgroupfs, to_systemd, to_systemd_unit
from cgroupfs.types import CgroupName, DriverKind
from tests.fakes.cgroup_tree import UNLIMITED_TEXT, FakeCgroupTree, Mode

MiB: Final = 1 << 20
HUGEPAGES: Final = Path("/sys/kernel/mm/hugepages")
FAKE_HUGEPAGE_SIZES: Final = (2 << 20, 1 << 30)


def controller_of(filename: str) -> str:
    """cpu.max -> cpu, memory.low -> memory, hugetlb.2MB.max -> hugetlb."""
    return filename.split(".", 1)[0]


def node_hugepage_sizes(directory: Path = HUGEPAGES) -> tuple[int, ...]:
    """The huge page sizes of this kernel, from /sys/kernel/mm/hugepages/hugepages-<n>kB."""
    if not directory.is_dir():
        return ()
    sizes = [int(p.name.removeprefix("hugepages-").removesuffix("kB")) * 1024 for p in directory.iterdir()]
    return tuple(sorted(sizes))


class MemoryHolder(Protocol):
    """Something using memory in a cgroup (a real process, or a usage counter on the fake)."""

    def alive(self) -> bool: ...


class Backend(Protocol):
    """A cgroup tree for the cgroupfs driver. Names are relative to the agent's cgroup root."""

    @property
    def id(self) -> str: ...
    @property
    def mode(self) -> Mode: ...
    @property
    def real(self) -> bool: ...
    @property
    def cgroupfs(self) -> Path: ...
    @property
    def cgroup_root(self) -> str: ...
    @property
    def hugepage_sizes(self) -> tuple[int, ...]: ...

    def create(self, name: CgroupName) -> None:
        """Make a cgroup and its missing ancestors in every hierarchy, controllers enabled (the kubelet)."""

    def path(self, name: CgroupName, filename: str) -> Path:
        """The file of cgroup `name` in the hierarchy holding its controller."""

    def read(self, name: CgroupName, filename: str) -> str: ...

    def hold_memory(self, name: CgroupName, mebibytes: int) -> MemoryHolder:
        """Make `mebibytes` MiB of memory be in use in cgroup `name`."""

    def cleanup(self) -> list[str]:
        """Stop what was started, remove what was made; returns what could not be removed."""


# ------------------------------------------------------------------------------------------ fake tree
@dataclass
class _Counter:
    """The fake's "process": its usage counter stays where it was set."""

    path: Path
    value: str

    def alive(self) -> bool:
        return self.path.read_text().strip() == self.value


@dataclass
class FakeBackend:
    """The strict fake tree (v1 mounts per controller, v2 at the top, hybrid: hugetlb in unified/)."""

    tree: FakeCgroupTree
    id: str
    real: bool = False
    cgroup_root: str = "/"
    hugepage_sizes: tuple[int, ...] = FAKE_HUGEPAGE_SIZES

    @property
    def mode(self) -> Mode:
        return self.tree.mode

    @property
    def cgroupfs(self) -> Path:
        return self.tree.root

    def create(self, name: CgroupName) -> None:
        self.tree.create(name)

    def _mount(self, controller: str) -> str:
        if self.mode == "v2":
            return ""
        if self.mode == "hybrid" and controller == "hugetlb":
            return "unified"
        return controller

    def relpath(self, name: CgroupName, filename: str) -> str:
        parts = (self._mount(controller_of(filename)), to_cgroupfs(name), filename)
        return "/".join(p for p in parts if p)

    def path(self, name: CgroupName, filename: str) -> Path:
        return self.tree.path(self.relpath(name, filename))

    def read(self, name: CgroupName, filename: str) -> str:
        return self.tree.read(self.relpath(name, filename))

    def hold_memory(self, name: CgroupName, mebibytes: int) -> MemoryHolder:
        usage = "memory.current" if self.mode == "v2" else "memory.usage_in_bytes"
        value = str(mebibytes * MiB)
        self.tree.set(self.relpath(name, usage), value)
        return _Counter(self.path(name, usage), value)

    def cleanup(self) -> list[str]:
        return []


# ---------------------------------------------------------------------------- this host's real kernel
@dataclass
class _Process:
    proc: subprocess.Popen[str]

    def alive(self) -> bool:
        return self.proc.poll() is None


@dataclass
class HostKernelBackend:
    """This host's v1 cpu and memory hierarchies (and hugetlb in its unified one, if it has it)."""

    id: str = "kernel-host"
    real: bool = True
    cgroupfs: Path = Path("/sys/fs/cgroup")
    cgroup_root: str = ""
    hugepage_sizes: tuple[int, ...] = ()
    mode: Mode = "v1"
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _root: Any = None  # tests.fakes.kernel.KernelRoot

    @classmethod
    def create_root(cls) -> HostKernelBackend:
        from tests.fakes.kernel import KernelRoot

        root = KernelRoot.create()
        backend = cls(cgroup_root=f"/{root.name}", _root=root)
        backend.mode = "hybrid" if root.hierarchy.unified is not None else "v1"
        try:
            hugetlb = backend._stack.enter_context(root.unified_controller("hugetlb"))
        except BaseException:
            root.cleanup()
            raise
        if hugetlb:
            backend.hugepage_sizes = node_hugepage_sizes()
            root.files.write(f"{root.dirs['unified']}/cgroup.subtree_control", "+hugetlb")
        return backend

    def _dir(self, controller: str) -> str:
        return self._root.dirs["unified" if controller == "hugetlb" else controller]  # type: ignore[no-any-return]

    def create(self, name: CgroupName) -> None:
        for hierarchy in ("cpu", "memory", "unified"):
            if hierarchy not in self._root.dirs:
                continue
            current = self._root.dirs[hierarchy]
            for part in name.parts:
                current = f"{current}/{part}"
                self._root.files.mkdir(current)
                if hierarchy == "unified" and self.hugepage_sizes:
                    self._root.files.write(f"{current}/cgroup.subtree_control", "+hugetlb")

    def path(self, name: CgroupName, filename: str) -> Path:
        below = "/".join((self._dir(controller_of(filename)), *name.parts, filename))
        return self.cgroupfs / below

    def read(self, name: CgroupName, filename: str) -> str:
        return self.path(name, filename).read_text().strip()

    def hold_memory(self, name: CgroupName, mebibytes: int) -> MemoryHolder:
        reldir = "/".join((self._root.dirs["memory"], *name.parts))
        return _Process(self._root.start_hog(reldir, mebibytes))

    def cleanup(self) -> list[str]:
        left: list[str] = self._root.cleanup()
        self._stack.close()
        return left


# --------------------------------------------------------------------------- the guest's cgroup v2
@dataclass
class GuestV2Backend:
    """The guest's real cgroup v2 tree below /kcg-v2-<hex> (tests/v2guest/guestlib.CgroupTree)."""

    tree: Any  # guestlib.CgroupTree
    id: str = "kernel-v2"
    real: bool = True
    mode: Mode = "v2"
    cgroupfs: Path = Path("/sys/fs/cgroup")
    hugepage_sizes: tuple[int, ...] = field(default_factory=node_hugepage_sizes)

    @classmethod
    def create_root(cls) -> GuestV2Backend:
        from tests.v2guest.guestlib import CgroupTree

        tree = CgroupTree(f"kcg-v2-{secrets.token_hex(4)}")
        tree.create()
        return cls(tree)

    @property
    def cgroup_root(self) -> str:
        return f"/{self.tree.name}"

    def create(self, name: CgroupName) -> None:
        self.tree.mkdir(to_cgroupfs(name))

    def path(self, name: CgroupName, filename: str) -> Path:
        return self.tree.path(to_cgroupfs(name)) / filename  # type: ignore[no-any-return]

    def read(self, name: CgroupName, filename: str) -> str:
        return self.path(name, filename).read_text().strip()

    def hold_memory(self, name: CgroupName, mebibytes: int) -> MemoryHolder:
        code = (
            "import sys, time\n"
            f"hog = b'\\x01' * ({mebibytes} << 20)\n"
            "print('ready', flush=True)\n"
            "time.sleep(3600)\n"
        )
        child = self.tree.spawn(to_cgroupfs(name), code)
        if child.wait_ready() != "ready":
            raise RuntimeError(f"memory holder {child.pid} did not start")
        return _Process(child.proc)

    def cleanup(self) -> list[str]:
        self.tree.destroy()
        return [str(self.tree.root)] if self.tree.root.exists() else []


# ------------------------------------------------------------------------------------- the registry
def guest_skip_reason() -> str | None:
    from tests.v2guest.guestlib import guest_skip_reason as reason

    return reason()


def host_kernel_skip_reason() -> str | None:
    from tests.fakes.kernel import skip_reason

    return skip_reason()


BackendFactory = Callable[[Path], Backend]

FACTORIES: Final[Mapping[str, BackendFactory]] = {
    "fake-v1": lambda tmp: FakeBackend(FakeCgroupTree(tmp / "cgroupfs-v1", "v1"), "fake-v1"),
    "fake-v2": lambda tmp: FakeBackend(FakeCgroupTree(tmp / "cgroupfs-v2", "v2"), "fake-v2"),
    "fake-hybrid": lambda tmp: FakeBackend(FakeCgroupTree(tmp / "cgroupfs-hybrid", "hybrid"), "fake-hybrid"),
    "kernel-host": lambda _tmp: HostKernelBackend.create_root(),
    "kernel-v2": lambda _tmp: GuestV2Backend.create_root(),
}
SKIP_REASONS: Final[Mapping[str, Callable[[], str | None]]] = {
    "kernel-host": host_kernel_skip_reason,
    "kernel-v2": guest_skip_reason,
}
MARKS: Final[Mapping[str, tuple[pytest.MarkDecorator, ...]]] = {
    "kernel-host": (pytest.mark.kernel,),
    "kernel-v2": (pytest.mark.v2guest,),
}


def params(ids: Iterable[str]) -> list[Any]:
    """`pytest.param`s for `@pytest.mark.parametrize("backend", params([...]), indirect=True)`."""
    return [pytest.param(i, id=i, marks=MARKS.get(i, ())) for i in ids]


BACKENDS: Final = params(FACTORIES)
"""Every backend: the fakes of each layout, this host's kernel, the guest's v2 kernel."""


# -------------------------------------------------------------------------------------- systemd
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
