"""An in-memory node for the compute-only figures: generated pods, a converged cgroup tree held in a dict
(no system call on any path), and a runtime stand-in that mirrors container updates into that tree.

Why in memory: figure 2 asks for the agent's own work per event with I/O taken out; the reconcilers take
their files through `Environment.files`, so a dict behind the same methods removes the I/O and nothing
else.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from agent.config.settings import Settings
from agent.config.values import parse_allocatable
from agent.core.compute import ComputeConfig, compute_node, compute_pod
from agent.core.diff import Owner, desired_files
from agent.core.model import UNLIMITED, ContainerID, ContainerValues, PodUID, PodView
from agent.pipeline import Environment
from agent.pods.parse import parse_pod
from agent.resize.state import PodRecord
from agent.resize.store import Loaded, PodStore
from bench.gen import HIERARCHY, make_pod, settings_for
from cgroupfs import layout
from cgroupfs.convert import V1_UNLIMITED_READBACK
from cgroupfs.files import CgroupFiles
from cgroupfs.layout import RenderOptions

UNLIMITED_TEXT = str(V1_UNLIMITED_READBACK)


class MemFiles:
    """The subset of `CgroupFiles` the reconcilers call, over a dict. `writes` counts writes."""

    def __init__(self, files: dict[str, str], dirs: set[str]) -> None:
        self.files = files
        self.dirs = dirs
        self.writes = 0

    def read(self, relpath: str) -> str | None:
        return self.files.get(relpath)

    def read_many(self, relpaths: Iterable[str]) -> tuple[dict[str, str | None], dict[str, bool]]:
        texts: dict[str, str | None] = {}
        dirs: dict[str, bool] = {}
        for p in relpaths:
            texts[p] = self.files.get(p)
            d = p.rpartition("/")[0]
            dirs[d] = d in self.dirs
        return texts, dirs

    def exists(self, reldir: str) -> bool:
        return reldir in self.dirs

    def children(self, reldir: str) -> tuple[str, ...]:
        prefix = reldir + "/"
        return tuple(sorted({d[len(prefix) :].split("/")[0] for d in self.dirs if d.startswith(prefix)}))

    def mkdir(self, reldir: str) -> bool:
        if reldir in self.dirs:
            return False
        self.dirs.add(reldir)
        return True

    def write(self, relpath: str, value: str) -> None:
        self.files[relpath] = value
        self.writes += 1

    def copy(self) -> MemFiles:
        return MemFiles(dict(self.files), set(self.dirs))


class MemRuntime:
    """A runtime that applies UpdateContainerResources to the in-memory tree at once, as runc would."""

    def __init__(self, files: MemFiles, paths: dict[str, dict[str, str]]) -> None:
        self.files = files
        self.paths = paths  # container ID -> {cgroup file name: path}
        self.calls = 0

    def update_container_resources(self, container_id: ContainerID, values: ContainerValues) -> None:
        self.calls += 1
        texts = {
            layout.CPU_SHARES: str(values.cpu_shares),
            layout.CPU_QUOTA: str(values.cpu_quota),
            layout.CPU_PERIOD: str(values.cpu_period),
            layout.MEMORY_LIMIT: UNLIMITED_TEXT if values.memory_limit == UNLIMITED else str(values.memory_limit),
        }
        for name, path in self.paths.get(container_id, {}).items():
            if name in texts:
                self.files.files[path] = texts[name]

    def stop_container(self, container_id: ContainerID, timeout_s: int) -> None:
        self.calls += 1


class MemCheckpoints(PodStore):
    """The per-pod state store kept in memory (its disk writes are I/O, timed apart in figure 2)."""

    def __init__(self) -> None:
        super().__init__(Path(tempfile.gettempdir()) / "kcg-bench-unused")
        self.records: dict[str, PodRecord] = {}

    def exists(self) -> bool:
        return bool(self.records)

    def load(self, persist: bool = True) -> Loaded:
        return Loaded(list(self.records.values()), found=bool(self.records))

    def save(self, records: Iterable[PodRecord]) -> None:
        self.records = {r.uid: r for r in records}

    def save_changed(self, records: Mapping[PodUID, PodRecord], uids: Collection[PodUID]) -> None:
        for uid in uids:
            r = records.get(uid)
            if r is None:
                self.records.pop(uid, None)
            else:
                self.records[uid] = r


@dataclass
class MemNode:
    settings: Settings
    raws: list[dict[str, Any]]
    pods: list[PodView]
    files: MemFiles
    container_paths: dict[str, dict[str, str]]

    def environment(self, files: MemFiles) -> Environment:
        sizes = self.settings.hugepage_sizes or ()
        return Environment(self.settings, HIERARCHY, sizes, cast(CgroupFiles, files))


def allocatable_for(pods: Iterable[PodView]) -> dict[str, str]:
    """Allocatable of a node these pods fit on twice over (at least 64 CPUs, 256 GiB): the generated pods
    request far more than one fixed node offers at 1,000 pods, and resize admission (rightly) defers every
    resize on an overcommitted node."""
    comps = [compute_pod(p, ComputeConfig()) for p in pods]
    cpu = sum(c.requests.cpu_milli or 0 for c in comps)
    memory = sum(c.requests.memory or 0 for c in comps)
    return {"cpu": f"{max(64_000, 2 * cpu)}m", "memory": str(max(256 << 30, 2 * memory)), "hugepages-2Mi": "4Gi"}


def sized_settings(cgroupfs: Path, pods_file: Path, pods: Iterable[PodView]) -> Settings:
    """`bench.gen.settings_for` with the allocatable of `allocatable_for`."""
    return replace(settings_for(cgroupfs, pods_file), allocatable=parse_allocatable(allocatable_for(pods)))


def mem_node(n_pods: int, state_dir: Path, seed: int = 1) -> MemNode:
    """`n_pods` generated pods and the tree the kubelet (and the agent) would have converged them to."""
    rng = random.Random(seed)
    raws = [make_pod(i, rng) for i in range(n_pods)]
    pods = [parse_pod(r) for r in raws]
    settings = sized_settings(state_dir / "cgroupfs", state_dir / "pods.json", pods)
    settings = replace(settings, state_dir=state_dir)
    comp = compute_node(pods, settings.compute_config(settings.hugepage_sizes or ()))
    wanted = desired_files(comp, HIERARCHY, RenderOptions(), RenderOptions(weight_formula="quadratic"))
    files: dict[str, str] = {}
    dirs: set[str] = set()
    paths: dict[str, dict[str, str]] = {}
    for f in wanted:
        s = f.setting
        files[s.path] = s.value
        if s.directory not in dirs:
            dirs.add(s.directory)
            if s.controller.value == "memory":
                files[f"{s.directory}/{layout.MEMORY_USAGE_V1}"] = "1048576"
                files[f"{s.directory}/{layout.MEMORY_MEMSW}"] = UNLIMITED_TEXT
        if f.owner is Owner.CONTAINER and f.container_id is not None:
            paths.setdefault(f.container_id, {})[s.filename] = s.path
    return MemNode(settings, raws, pods, MemFiles(files, dirs), paths)
