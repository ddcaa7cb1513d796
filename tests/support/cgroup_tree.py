"""A strict fake cgroup filesystem on a tmp dir: v1, v2 or hybrid, cgroupfs or systemd naming.

Creating a cgroup seeds exactly the files the kernel shows in a fresh cgroup for each controller, with
the values captured from this project's development kernel (6.18, v1 + hybrid unified, 2 MB and 1 GB
huge pages). Nothing else exists, and cgroupfs.files never creates files, so writing a file the kernel
would not have (a typo, a v2 file on v1, hugetlb where it is not enabled) fails as it would on a node.
This is the runc `writeFileContents` idea without runc's `TestMode` O_CREAT escape hatch.

Not emulated: kernel validation of values (anything is accepted and read back verbatim), read-only
files (the tests run as root, which bypasses file modes), and rmdir of a cgroup that still holds its
control files (a plain directory is not empty; use `remove`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Final, Literal

from cgroupfs.convert import V1_UNLIMITED_READBACK, hugepage_size_name
from cgroupfs.layout import Hierarchy
from cgroupfs.naming import cgroup_dir
from cgroupfs.types import CgroupName, DriverKind

Mode = Literal["v1", "v2", "hybrid"]

UNLIMITED_TEXT: Final = str(V1_UNLIMITED_READBACK)
DEFAULT_HUGEPAGE_SIZES: Final = (2 << 20, 1 << 30)

# v1: what a fresh child cgroup holds, per controller (captured with `mkdir` + `cat` on kernel 6.18;
# statistics files other than the usage counters are left out, as the agent never reads them).
V1_COMMON: Final = {"cgroup.procs": "", "tasks": "", "cgroup.clone_children": "0", "notify_on_release": "0"}
V1_SEEDS: Final[Mapping[str, Mapping[str, str]]] = {
    "cpu": {
        "cpu.shares": "1024",
        "cpu.cfs_quota_us": "-1",
        "cpu.cfs_period_us": "100000",
        "cpu.cfs_burst_us": "0",
        "cpu.idle": "0",
    },
    "cpuacct": {"cpuacct.usage": "0"},
    "memory": {
        "memory.limit_in_bytes": UNLIMITED_TEXT,
        "memory.soft_limit_in_bytes": UNLIMITED_TEXT,
        "memory.memsw.limit_in_bytes": UNLIMITED_TEXT,
        "memory.usage_in_bytes": "0",
        "memory.memsw.usage_in_bytes": "0",
        "memory.max_usage_in_bytes": "0",
        "memory.use_hierarchy": "1",
        "memory.swappiness": "60",
    },
    "cpuset": {"cpuset.cpus": "", "cpuset.mems": "", "cpuset.effective_cpus": "", "cpuset.effective_mems": ""},
    "pids": {"pids.max": "max", "pids.current": "0"},
    "hugetlb": {},  # per page size, see _hugetlb_v1
    "systemd": {},  # the name=systemd hierarchy: only the common files
}
V1_DIRS: Final = ("cpu", "cpuacct", "cpuset", "memory", "hugetlb", "pids", "systemd")

# v2: the files of a fresh child per controller enabled in its parent's cgroup.subtree_control.
V2_COMMON: Final = {"cgroup.procs": "", "cgroup.type": "domain", "cgroup.events": "populated 0\nfrozen 0"}
V2_SEEDS: Final[Mapping[str, Mapping[str, str]]] = {
    "cpu": {"cpu.weight": "100", "cpu.max": "max 100000", "cpu.max.burst": "0", "cpu.idle": "0"},
    "memory": {
        "memory.max": "max",
        "memory.low": "0",
        "memory.min": "0",
        "memory.high": "max",
        "memory.current": "0",
        "memory.swap.max": "max",
        "memory.swap.current": "0",
    },
    "cpuset": {"cpuset.cpus": "", "cpuset.mems": "", "cpuset.cpus.effective": "", "cpuset.mems.effective": ""},
    "pids": {"pids.max": "max", "pids.current": "0"},
    "hugetlb": {},  # per page size, see _hugetlb_v2
}
V2_CONTROLLERS: Final = ("cpuset", "cpu", "memory", "hugetlb", "pids")  # kernel order of cgroup.controllers


def _hugetlb_v1(sizes: Iterable[int]) -> dict[str, str]:
    out: dict[str, str] = {}
    for size in sizes:
        name = hugepage_size_name(size)
        out[f"hugetlb.{name}.limit_in_bytes"] = UNLIMITED_TEXT
        out[f"hugetlb.{name}.rsvd.limit_in_bytes"] = UNLIMITED_TEXT
        out[f"hugetlb.{name}.usage_in_bytes"] = "0"
    return out


def _hugetlb_v2(sizes: Iterable[int]) -> dict[str, str]:
    # A fresh v2 cgroup shows the unlimited value as a number, not "max", for huge page sizes whose page
    # count does not divide PAGE_COUNTER_MAX (captured on 6.18 for 2 MB and 1 GB); "max" after a write.
    out: dict[str, str] = {}
    for size in sizes:
        name = hugepage_size_name(size)
        out[f"hugetlb.{name}.max"] = UNLIMITED_TEXT
        out[f"hugetlb.{name}.rsvd.max"] = UNLIMITED_TEXT
        out[f"hugetlb.{name}.current"] = "0"
    return out


class FakeCgroupTree:
    """A --cgroupfs directory laid out like a real node. `hierarchy` is what detection should find."""

    def __init__(
        self,
        root: Path,
        mode: Mode = "hybrid",
        driver: DriverKind = DriverKind.CGROUPFS,
        hugepage_sizes: tuple[int, ...] = DEFAULT_HUGEPAGE_SIZES,
        co_mounted: bool = False,
        v2_controllers: tuple[str, ...] | None = None,
    ) -> None:
        if mode not in ("v1", "v2", "hybrid"):
            raise ValueError(f"unknown mode {mode!r}")
        self.root = root
        self.mode = mode
        self.driver = driver
        self.hugepage_sizes = hugepage_sizes
        root.mkdir(parents=True, exist_ok=False)
        v1_dirs = [d for d in V1_DIRS if not (mode == "hybrid" and d == "hugetlb")] if mode != "v2" else []
        if co_mounted:
            v1_dirs = ["cpu,cpuacct" if d == "cpu" else d for d in v1_dirs if d != "cpuacct"]
        # mount directory -> the v1 controllers (or named hierarchy) it holds
        self.v1_mounts: dict[str, tuple[str, ...]] = {d: tuple(d.split(",")) for d in v1_dirs}
        if mode == "v2":
            self.unified: str | None = ""
            available = v2_controllers if v2_controllers is not None else V2_CONTROLLERS
        elif mode == "hybrid":
            self.unified = "unified"
            available = v2_controllers if v2_controllers is not None else ("hugetlb",)
        else:
            self.unified = None
            available = ()
        self.unified_controllers = tuple(available)
        for mount, controllers in self.v1_mounts.items():
            (root / mount).mkdir()
            self._seed_v1(mount, controllers)
        if self.unified is not None:
            top = root / self.unified
            top.mkdir(exist_ok=True)
            listed = " ".join(self.unified_controllers)
            self._write_new(top / "cgroup.controllers", listed)
            self._write_new(top / "cgroup.subtree_control", listed)
            self._write_new(top / "cgroup.procs", "")

    @property
    def hierarchy(self) -> Hierarchy:
        v1 = {c: mount for mount, cs in self.v1_mounts.items() for c in cs if c != "systemd"}
        unified_controllers = frozenset(self.unified_controllers) if self.unified is not None else frozenset()
        return Hierarchy(v1=dict(sorted(v1.items())), unified=self.unified, unified_controllers=unified_controllers)

    # ----- building

    @staticmethod
    def _write_new(path: Path, text: str) -> None:
        with path.open("x", encoding="utf-8") as f:
            f.write(text + "\n" if text else "")

    def _seed_v1(self, reldir: str, controllers: Iterable[str]) -> None:
        files = dict(V1_COMMON)
        for c in controllers:
            files.update(V1_SEEDS.get(c, {}))
            if c == "hugetlb":
                files.update(_hugetlb_v1(self.hugepage_sizes))
        for name, text in files.items():
            self._write_new(self.root / reldir / name, text)

    def _seed_v2(self, reldir: str, controllers: Iterable[str]) -> None:
        enabled = tuple(controllers)
        files = dict(V2_COMMON)
        files["cgroup.controllers"] = " ".join(enabled)
        files["cgroup.subtree_control"] = " ".join(enabled)  # as the kubelet and systemd enable them
        for c in enabled:
            files.update(V2_SEEDS.get(c, {}))
            if c == "hugetlb":
                files.update(_hugetlb_v2(self.hugepage_sizes))
        for name, text in files.items():
            self._write_new(self.root / reldir / name, text)

    def directory(self, name: CgroupName | str) -> str:
        """The cgroup's directory below each mount: a CgroupName per the tree's driver, or a raw path."""
        return cgroup_dir(name, self.driver) if isinstance(name, CgroupName) else name.strip("/")

    def create(self, name: CgroupName | str, controllers: Iterable[str] | None = None) -> tuple[str, ...]:
        """Create a cgroup and any missing ancestors in every hierarchy (or only those holding
        `controllers`), seeding each new directory. Returns the leaf directories, relative to the root."""
        below = self.directory(name)
        wanted = set(controllers) if controllers is not None else None
        out: list[str] = []
        for mount, held in self.v1_mounts.items():
            if wanted is not None and not wanted & set(held):
                continue
            out.append(self._mkdirs(mount, below, partial(self._seed_v1, controllers=held)))
        if self.unified is not None and (wanted is None or wanted & set(self.unified_controllers)):
            enabled = self.unified_controllers
            out.append(self._mkdirs(self.unified, below, partial(self._seed_v2, controllers=enabled)))
        return tuple(out)

    def _mkdirs(self, mount: str, below: str, seed: Callable[[str], None]) -> str:
        current = mount
        for part in [p for p in below.split("/") if p]:
            current = f"{current}/{part}" if current else part
            path = self.root / current
            if not path.exists():
                path.mkdir()
                seed(current)
        return current

    def remove(self, reldir: str) -> None:
        """Remove a cgroup directory and everything below it (what rmdir does on a real, empty cgroup)."""
        shutil.rmtree(self.root / reldir)

    # ----- inspecting

    def path(self, relpath: str) -> Path:
        return self.root / relpath

    def read(self, relpath: str) -> str:
        return self.path(relpath).read_text(encoding="utf-8").strip()

    def set(self, relpath: str, value: str) -> None:
        """Set a seeded file directly (usage counters, a kubelet-made value); refuses unseeded files."""
        with self.path(relpath).open("r+", encoding="utf-8") as f:
            f.truncate()
            f.write(value + "\n")

    def files(self, reldir: str) -> tuple[str, ...]:
        return tuple(sorted(p.name for p in self.path(reldir).iterdir() if p.is_file()))
