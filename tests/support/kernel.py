"""Real-kernel test support: a private, uniquely named cgroup root in the v1 hierarchies of this host.

`KernelRoot` creates `kcg-test-<random>` in the cpu and memory hierarchies (and in the unified one when
there is one), hands out a `CgroupFiles` confined to exactly those roots, and on `cleanup` stops the
processes it started (by PID, nothing else), then removes its cgroups depth-first. Nothing outside the
prefix is touched, except the unified root's cgroup.subtree_control by `enable_unified`, which records
what it enabled and undoes exactly that (under a lock, so concurrent test runs do not undo each other).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cgroupfs.errors import CgroupError, CgroupNotFound
from cgroupfs.files import CgroupFiles
from cgroupfs.layout import Hierarchy
from cgroupfs.mounts import HierarchyNotFound, detect_hierarchy

CGROUPFS: Final = Path("/sys/fs/cgroup")
PREFIX: Final = "kcg-test-"
LOCK: Final = Path("/tmp/kcg-test-unified-subtree.lock")

# A child that joins its cgroup before it allocates (so the memory is charged there), then reports.
_HOG: Final = """
import sys
sys.stdin.readline()
hog = b"\\x01" * (int(sys.argv[1]) << 20)
sys.stdout.write("ready\\n")
sys.stdout.flush()
sys.stdin.read()
"""


def skip_reason(cgroupfs: Path = CGROUPFS) -> str | None:
    """Why kernel tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "kernel tests need root (they create cgroups under /sys/fs/cgroup)"
    try:
        hierarchy = detect_hierarchy(cgroupfs)
    except (HierarchyNotFound, OSError, CgroupError) as err:
        return f"no cgroup hierarchy: {err}"
    missing = [c for c in ("cpu", "memory") if c not in hierarchy.v1]
    if missing:
        return f"kernel tests need the cgroup v1 {' and '.join(missing)} hierarchy (this host is {hierarchy.mode})"
    return None


@dataclass
class KernelRoot:
    """One test's private cgroups: `dirs` maps "cpu", "memory" (and "unified") to "<mount>/kcg-test-<hex>"."""

    cgroupfs: Path
    hierarchy: Hierarchy
    name: str
    dirs: dict[str, str]
    files: CgroupFiles
    _procs: list[subprocess.Popen[str]] = field(default_factory=list)
    _made: list[str] = field(default_factory=list)

    @classmethod
    def create(cls, cgroupfs: Path = CGROUPFS, controllers: tuple[str, ...] = ("cpu", "memory")) -> KernelRoot:
        """`controllers`: the v1 hierarchies to make the root in (co-mounted ones share a directory)."""
        hierarchy = detect_hierarchy(cgroupfs)
        name = PREFIX + secrets.token_hex(4)
        dirs = {c: f"{hierarchy.v1[c]}/{name}" for c in controllers}
        if hierarchy.unified:
            dirs["unified"] = f"{hierarchy.unified}/{name}"
        unique = tuple(dict.fromkeys(dirs.values()))
        root = cls(cgroupfs, hierarchy, name, dirs, CgroupFiles(cgroupfs, unique))
        try:
            for d in unique:
                if not root.files.mkdir(d):
                    raise RuntimeError(f"{d} already exists: refusing to adopt a cgroup this run did not make")
                root._made.append(d)
        except BaseException:
            root.cleanup()
            raise
        return root

    def path(self, hierarchy: str, *below: str) -> str:
        """A path below this root in one hierarchy: path("cpu", "pod", "cpu.shares")."""
        return "/".join((self.dirs[hierarchy], *below))

    def mkdirs(self, hierarchy: str, *below: str) -> str:
        """Create nested child cgroups below the root; returns the deepest directory."""
        current = self.dirs[hierarchy]
        for part in below:
            current = f"{current}/{part}"
            self.files.mkdir(current)
        return current

    def start_hog(self, reldir: str, mebibytes: int) -> subprocess.Popen[str]:
        """Start a child, move it into `reldir` (via its cgroup.procs), then let it touch `mebibytes` MiB."""
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOG, str(mebibytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._procs.append(proc)
        assert proc.stdin is not None and proc.stdout is not None
        self.files.write(f"{reldir}/cgroup.procs", str(proc.pid))
        proc.stdin.write("go\n")
        proc.stdin.flush()
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"memory hog {proc.pid} did not start")
        return proc

    def stop(self, proc: subprocess.Popen[str]) -> None:
        """Stop a process this root started, by its PID, and reap it."""
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    @contextmanager
    def unified_controller(self, controller: str) -> Iterator[bool]:
        """Make `controller` available in this root's unified cgroup; yields False when the kernel has no
        such controller there. Enables it in the unified root's subtree_control only if it was not already,
        and disables it again afterwards; a lock serialises concurrent test runs."""
        unified = self.hierarchy.unified
        if not unified or controller not in self.hierarchy.unified_controllers:
            yield False
            return
        top = CgroupFiles(self.cgroupfs, (unified,))
        subtree = f"{unified}/cgroup.subtree_control"
        LOCK.touch(exist_ok=True)
        with LOCK.open() as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            enabled_here = False
            try:
                if controller not in (top.read(subtree) or "").split():
                    top.write(subtree, f"+{controller}")
                    enabled_here = True
                yield True
            finally:
                if enabled_here:
                    top.write(subtree, f"-{controller}")

    def cleanup(self) -> list[str]:
        """Stop our processes, then remove our cgroups deepest first. Returns what could not be removed."""
        for proc in self._procs:
            self.stop(proc)
        self._procs.clear()
        left: list[str] = []
        for d in self._made:
            left.extend(self._remove_tree(d))
        self._made.clear()
        return left

    def _remove_tree(self, reldir: str) -> list[str]:
        try:
            children = self.files.children(reldir)
        except CgroupNotFound:
            return []
        left: list[str] = []
        for child in children:
            left.extend(self._remove_tree(f"{reldir}/{child}"))
        for attempt in range(50):  # a killed task leaves its cgroup a moment after it is reaped
            try:
                self.files.rmdir(reldir)
                return left
            except CgroupNotFound:
                return left
            except CgroupError:
                if attempt == 49:
                    return [*left, reldir]
                time.sleep(0.02)
        return [*left, reldir]
