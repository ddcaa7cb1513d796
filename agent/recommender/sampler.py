"""The shell that reads the kernel: every tick, one read pass over the node's containers (their cpu,
cpuacct and memory files, or the unified ones), turned into samples by `counters`. Read-only: the reader
it builds is confined to the kubepods subtrees and the sampler never writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.compute.pod import pod_cgroup_name
from agent.compute.qos import compute_qos
from agent.model import PodView
from agent.recommender.counters import V1_FILES, V2_FILES, Counters, cpu_sample, observe, parse_v1, parse_v2
from agent.recommender.trace import Sample
from cgroupfs.files import CgroupFiles
from cgroupfs.layout import Hierarchy
from cgroupfs.naming import cgroup_dir, container_dir
from cgroupfs.types import CgroupName, DriverKind


@dataclass(frozen=True, slots=True)
class Target:
    pod: str  # namespace/name
    container: str
    container_id: str
    files: tuple[tuple[str, str], ...]  # (file name, path below --cgroupfs)
    v2: bool
    cpu_limit_cores: float | None
    memory_request: int | None


def _dirs(h: Hierarchy, name: CgroupName, cid: str, driver: DriverKind, runtime: str) -> tuple[tuple[str, str], ...] | None:
    pod_dir = cgroup_dir(name, driver)
    if "cpu" in h.v1 and "memory" in h.v1:
        out: list[tuple[str, str]] = []
        for controller, names in V1_FILES.items():
            mount = h.v1.get(controller) or h.v1.get("cpu")
            if mount is None:
                continue
            base = container_dir(f"{mount}/{pod_dir}", cid, driver, runtime)
            out.extend((n, f"{base}/{n}") for n in names)
        return tuple(out)
    if h.unified is not None:
        prefix = f"{h.unified}/" if h.unified else ""
        base = container_dir(f"{prefix}{pod_dir}", cid, driver, runtime)
        return tuple((n, f"{base}/{n}") for n in V2_FILES)
    return None


def targets(pods: Sequence[PodView], cgroup_root: CgroupName, driver: DriverKind, hierarchy: Hierarchy) -> list[Target]:
    out: list[Target] = []
    v2 = not ("cpu" in hierarchy.v1 and "memory" in hierarchy.v1)
    for pod in pods:
        if pod.phase in ("Succeeded", "Failed"):
            continue
        name = pod_cgroup_name(cgroup_root, compute_qos(pod).qos, pod.uid)
        for c in (*pod.init_containers, *pod.containers):
            st = pod.status_of(c.name)
            if st is None or st.container_id is None or not st.running:
                continue
            files = _dirs(hierarchy, name, st.container_id, driver, st.runtime or "containerd")
            if files is None:
                continue
            limit = c.limits.cpu_milli / 1000 if c.limits.cpu_milli else None
            out.append(Target(pod.key, c.name, st.container_id, files, v2, limit, c.requests.memory))
    return out


def reader_for(cgroupfs: Path, cgroup_root: CgroupName, driver: DriverKind, hierarchy: Hierarchy) -> CgroupFiles:
    """A reader confined to the kubepods subtree of every hierarchy the sampler reads."""
    kubepods = cgroup_dir(cgroup_root.child("kubepods"), driver)
    mounts = {hierarchy.v1[c] for c in ("cpu", "cpuacct", "memory") if c in hierarchy.v1}
    if hierarchy.unified is not None:
        mounts.add(hierarchy.unified)
    roots = [f"{m}/{kubepods}" if m else kubepods for m in sorted(mounts)]
    return CgroupFiles(cgroupfs, roots)


@dataclass(slots=True)
class Sampler:
    reader: CgroupFiles
    starvation: bool = False
    throttle_threshold: float = 0.2
    _previous: dict[tuple[str, str, str], tuple[float, Counters]] = field(default_factory=dict)

    def tick(self, now: float, wanted: Sequence[Target]) -> tuple[list[Sample], list[Target]]:
        """One read pass; returns the samples and the targets whose OOM-kill counter moved."""
        texts, _ = self.reader.read_many([p for t in wanted for _, p in t.files])
        samples: list[Sample] = []
        oomed: list[Target] = []
        seen: set[tuple[str, str, str]] = set()
        for t in wanted:
            files = {n: texts.get(p) for n, p in t.files}
            current = parse_v2(files) if t.v2 else parse_v1(files)
            key = (t.pod, t.container, t.container_id)
            seen.add(key)
            prev = self._previous.get(key)
            obs = observe(prev[1] if prev else None, current, now - prev[0] if prev else 0.0)
            self._previous[key] = (now, current)
            cpu = cpu_sample(obs, t.cpu_limit_cores, self.starvation, self.throttle_threshold)
            if cpu is not None or obs.working_set is not None:
                samples.append(Sample(now, t.pod, t.container, cpu=cpu, memory=obs.working_set))
            if obs.new_oom_kills:
                used = max(current.memory_peak or 0, obs.working_set or 0)
                samples.append(Sample(now, t.pod, t.container, memory=float(used), oom=True))
                oomed.append(t)
        for gone in set(self._previous) - seen:
            del self._previous[gone]
        return samples, oomed
