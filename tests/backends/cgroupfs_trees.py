"""The cgroupfs driver's backends: `FakeBackend` (tests/support/cgroup_tree.py, v1 / v2 / hybrid;
everywhere), `HostKernelBackend` (this host's real v1 cpu and memory hierarchies, hugetlb in the unified
one when it has it: the hybrid layout of the development machines, below a private kcg-test-<hex> root;
root only), `GuestV2Backend` (the real cgroup v2 kernel of the `make e2e-v2` guest, below /kcg-v2-<hex>,
with cpu, memory, hugetlb enabled along the path; only inside the guest), and their registry for the
`backend` fixture."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import pytest

from cgroupfs.naming import to_cgroupfs
from cgroupfs.types import CgroupName
from tests.backends.host import guest_skip_reason, host_kernel_skip_reason, node_hugepage_sizes
from tests.support.cgroup_tree import FakeCgroupTree, Mode

MiB: Final = 1 << 20
FAKE_HUGEPAGE_SIZES: Final = (2 << 20, 1 << 30)


def controller_of(filename: str) -> str:
    """cpu.max -> cpu, memory.low -> memory, hugetlb.2MB.max -> hugetlb."""
    return filename.split(".", 1)[0]



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
    _root: Any = None  # tests.support.kernel.KernelRoot

    @classmethod
    def create_root(cls) -> HostKernelBackend:
        from tests.support.kernel import KernelRoot

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

