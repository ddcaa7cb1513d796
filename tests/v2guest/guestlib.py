"""Helpers for tests that run inside the cgroup v2 + systemd guest (make e2e-v2).

`from tests.v2guest import guestlib`. Nothing here runs at import time, so the host can collect (and
skip) the guest tests.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cgroupfs.layout import Hierarchy
from cgroupfs.naming import expand_slice

CGROUP_MOUNT: Final = Path("/sys/fs/cgroup")
GUEST_MARKER: Final = Path("/etc/kube-cgroup-agent-v2guest")
ANY_HOST_ENV: Final = "KCA_V2GUEST_ANY_HOST"
TREE_CONTROLLERS: Final = ("cpu", "memory", "hugetlb", "pids")


# ------------------------------------------------------------------------------------------ where we are
def pid1_comm() -> str:
    try:
        return Path("/proc/1/comm").read_text().strip()
    except OSError:
        return ""


def cgroup_mount_type(mount: Path = CGROUP_MOUNT) -> str:
    """The file system type mounted at `mount` (the last mount there wins), "" when none."""
    fstype = ""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[1] == str(mount):
            fstype = parts[2]
    return fstype


def guest_skip_reason() -> str | None:
    """None inside the disposable v2 guest; otherwise why the `v2guest` tests must not run here."""
    comm = pid1_comm()
    fstype = cgroup_mount_type()
    if comm != "systemd" or fstype != "cgroup2":
        return (
            "v2guest: needs the cgroup v2 + systemd guest (make e2e-v2); here PID 1 is "
            f"{comm or '?'!r} and /sys/fs/cgroup is {fstype or 'not mounted'!r}"
        )
    if os.geteuid() != 0:
        return "v2guest: needs root inside the guest"
    if not GUEST_MARKER.exists() and os.environ.get(ANY_HOST_ENV) != "1":
        return (
            f"v2guest: this is a real systemd + cgroup v2 host, not the disposable guest ({GUEST_MARKER} "
            f"is missing); these tests reload systemd and OOM-kill processes: set {ANY_HOST_ENV}=1 to run "
            "them here anyway"
        )
    return None



def v2_hierarchy(mount: Path = CGROUP_MOUNT) -> Hierarchy:
    """What mode detection must produce on this guest: a pure v2 host."""
    return Hierarchy(unified="", unified_controllers=frozenset(read_text(mount / "cgroup.controllers").split()))


# ------------------------------------------------------------------------------------------ small tools
def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} -> {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return proc


def read_text(path: Path) -> str:
    return path.read_text().strip()


def write_text(path: Path, value: str) -> None:
    """One write(2) of the exact string, as the agent's file driver does (no trailing newline)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def keyed(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file (memory.events, cpu.stat) as a dict."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        out[key] = int(value)
    return out


# -------------------------------------------------------------------------------- processes in cgroups
@dataclass
class Child:
    """A helper python process started outside, then moved into a cgroup before it does its work."""

    proc: subprocess.Popen[str]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def go(self) -> None:
        """Let it start its work (it waits for a line on stdin)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def wait_ready(self, timeout: float = 60.0) -> str:
        """The first line it prints after `go`; AssertionError when none comes in time."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise AssertionError(f"child {self.pid} printed nothing in {timeout} s")
        return self.proc.stdout.readline().strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def start_child(code: str) -> Child:
    """`code` runs after a line arrives on stdin; it should print one line when its work is done."""
    script = f"import sys\nsys.stdin.readline()\n{code}\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return Child(proc)


# ------------------------------------------------------------------------------ private cgroup v2 tree
@dataclass
class CgroupTree:
    """A private cgroup v2 subtree directly below the mount, with cpu, memory, hugetlb, pids enabled.

    `name` is the top directory ("kca-v2test-<hex>"); `path(rel)` is a directory in the tree.
    """

    name: str
    mount: Path = CGROUP_MOUNT
    children: list[Child] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.mount / self.name

    def path(self, rel: str = "") -> Path:
        return self.root / rel if rel else self.root

    def create(self) -> None:
        enable_controllers(self.mount, TREE_CONTROLLERS)
        self.root.mkdir()
        enable_controllers(self.root, TREE_CONTROLLERS)

    def mkdir(self, rel: str) -> Path:
        """A cgroup below the tree's top (parents made as needed, each with the controllers enabled)."""
        current = self.root
        for part in Path(rel).parts:
            enable_controllers(current, TREE_CONTROLLERS)
            current = current / part
            if not current.exists():
                current.mkdir()
        return current

    def spawn(self, rel: str, code: str) -> Child:
        """Start a child, move it into cgroup `rel`, then let it run `code`."""
        child = start_child(code)
        self.children.append(child)
        write_text(self.path(rel) / "cgroup.procs", str(child.pid))
        child.go()
        return child

    def destroy(self) -> None:
        for child in self.children:
            child.stop()
        if not self.root.exists():
            return
        dirs = sorted(
            (p for p in self.root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        )
        for d in [*dirs, self.root]:
            kill_file = d / "cgroup.kill"
            if kill_file.exists():
                write_text(kill_file, "1")
            wait_for(_unpopulated(d), timeout=10)
            d.rmdir()


def _unpopulated(cgroup: Path) -> Callable[[], bool]:
    return lambda: "populated 0" in (cgroup / "cgroup.events").read_text()


def enable_controllers(cgroup: Path, controllers: Sequence[str]) -> None:
    """Enable `controllers` for `cgroup`'s children (those it offers), one write each."""
    available = set(read_text(cgroup / "cgroup.controllers").split())
    enabled = set(read_text(cgroup / "cgroup.subtree_control").split())
    for c in controllers:
        if c in available and c not in enabled:
            write_text(cgroup / "cgroup.subtree_control", f"+{c}")


# ------------------------------------------------------------------------------------ systemd (D-Bus)
SYSTEMD_DEST: Final = (
    "org.freedesktop.systemd1",
    "/org/freedesktop/systemd1",
    "org.freedesktop.systemd1.Manager",
)

Prop = tuple[str, str, "str | int | bool"]
"""A unit property for D-Bus: (name, D-Bus signature, value); e.g. ("CPUWeight", "t", 200)."""


def _prop_args(props: Sequence[Prop]) -> list[str]:
    args = [str(len(props))]
    for name, sig, value in props:
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        args += [name, sig, text]
    return args


def manager_call(method: str, signature: str, *args: str) -> str:
    """busctl call on systemd's Manager object; returns busctl's reply text."""
    return run(["busctl", "call", *SYSTEMD_DEST, method, signature, *args]).stdout.strip()


def start_transient_slice(unit: str, props: Sequence[Prop]) -> None:
    """StartTransientUnit(unit, "replace", props, no aux units), as the kubelet creates pod slices."""
    manager_call("StartTransientUnit", "ssa(sv)a(sa(sv))", unit, "replace", *_prop_args(props), "0")


def set_unit_properties(unit: str, props: Sequence[Prop], runtime: bool = True) -> None:
    """SetUnitProperties over D-Bus (what a systemd driver does)."""
    manager_call("SetUnitProperties", "sba(sv)", unit, "true" if runtime else "false", *_prop_args(props))


def systemctl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["systemctl", *args], check=check)


def unit_property(unit: str, name: str) -> str:
    return systemctl("show", "-P", name, unit).stdout.strip()


def slice_property(unit: str, name: str) -> int:
    """A numeric property of a slice unit as systemd holds it (D-Bus, unformatted: "t 340000" -> 340000)."""
    reply = manager_call("GetUnit", "s", unit)  # 'o "/org/freedesktop/systemd1/unit/..."'
    path = reply.split(" ", 1)[1].strip('"')
    out = run(["busctl", "get-property", SYSTEMD_DEST[0], path, "org.freedesktop.systemd1.Slice", name])
    return int(out.stdout.split()[1])


def slice_dir(unit: str, mount: Path = CGROUP_MOUNT) -> Path:
    return mount / expand_slice(unit)


@dataclass
class SliceFactory:
    """Creates transient slices through systemd and stops them all at the end of the test."""

    started: list[str] = field(default_factory=list)

    def __call__(self, unit: str, props: Sequence[Prop] = ()) -> Path:
        base: list[Prop] = [("Description", "s", f"v2guest test {unit}"), ("DefaultDependencies", "b", False)]
        start_transient_slice(unit, [*base, *props])
        self.started.append(unit)
        path = slice_dir(unit)
        if not wait_for(path.is_dir, timeout=15):
            raise AssertionError(f"{unit}: no cgroup at {path} ({unit_property(unit, 'ActiveState')})")
        return path

    def stop_all(self) -> None:
        for unit in reversed(self.started):
            systemctl("stop", unit, check=False)
            systemctl("reset-failed", unit, check=False)
