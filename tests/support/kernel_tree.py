"""The surface of `FakeCgroupTree` that tests/resize/harness.py uses, over this host's real cgroup v1
cpu and memory hierarchies below a private `KernelRoot`: so the resize harness (fake CRI, journal,
child-within-parent check after every write) runs on kernel files, where the kernel itself refuses a
child's CFS quota above its parent's and a memory limit below usage.

Paths are relative to /sys/fs/cgroup ("cpu/kcg-test-<hex>/kubepods/..."); the agent is pointed at
/sys/fs/cgroup with `cgroupRoot: /kcg-test-<hex>`, so every cgroup it touches is below the test root.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from cgroupfs.layout import Hierarchy
from tests.support.kernel import KernelRoot

CONTROLLERS = ("cpu", "memory")


class KernelTree:
    def __init__(self, root: KernelRoot) -> None:
        self.kernel = root
        self.root: Path = root.cgroupfs
        self.cgroup_root = f"/{root.name}"
        self.mode = "v1"

    @property
    def hierarchy(self) -> Hierarchy:
        """Only cpu and memory: the agent is given nothing else to touch."""
        return Hierarchy(v1={c: self.kernel.hierarchy.v1[c] for c in CONTROLLERS})

    def create(self, name: str, controllers: Iterable[str] | None = None) -> tuple[str, ...]:
        """mkdir `name` (which starts with the root's name) and its missing ancestors below the root."""
        below = name.strip("/").split("/")
        if below[0] != self.kernel.name:
            raise ValueError(f"{name!r} is not below the test root {self.kernel.name}")
        wanted = set(controllers) if controllers is not None else set(CONTROLLERS)
        out = []
        for c in CONTROLLERS:
            if c in wanted:
                out.append(self.kernel.mkdirs(c, *below[1:]))
        return tuple(out)

    def remove(self, reldir: str) -> None:
        """rmdir, as runc removes an exited container's (empty) cgroup."""
        self.kernel.files.rmdir(reldir)

    def path(self, relpath: str) -> Path:
        return self.root / relpath

    def read(self, relpath: str) -> str:
        return self.path(relpath).read_text(encoding="utf-8").strip()

    def set(self, relpath: str, value: str) -> None:
        """One write(2) to a kernel file (as runc does); the kernel's refusal is an OSError."""
        fd = os.open(self.path(relpath), os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
