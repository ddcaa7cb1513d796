"""The shell that reads the kernel: every tick, one read pass over the node's containers (their cpu,
cpuacct and memory files, or the unified ones), turned into samples by `counters`. Read-only: the reader
it builds is confined to the kubepods subtrees and the sampler never writes.

Why the files stay open: a path read walks and re-checks every directory component, which at a thousand
containers a second was most of the agent's sampling cost; each container's counter files are opened once
through that same confinement (`cgroupfs.pinned`) and read with pread until the container goes. A tick
reads only what its samples need, and keeps a plain tuple per container rather than objects; memory.stat
(the inactive file pages a working set leaves out) every `stat_every` ticks, the usage every tick; the
OOM-kill counter, which only counts up, every `oom_every` ticks per container (both spread over the ticks):
a kill is seen a few seconds later, never missed, and its sample's memory is the peak the kernel kept.

A pod that sets pod-level resources is one more target, named POD, read from its pod cgroup the same way
(the usage of all its containers: what its pod-level values must hold). An OOM kill of any of its
containers is an OOM of the pod: on v2 the pod cgroup's memory.events counts the kills below it; on v1
memory.oom_control counts only the cgroup's own (no process lives in the pod cgroup itself), so the pod's
OOM sample follows a kill the tick sees in one of its containers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.core.compute.aggregate import pod_level_resources_set
from agent.core.compute.pod import pod_cgroup_name
from agent.core.compute.qos import compute_qos
from agent.core.model import POD, PodView
from agent.recommender.counters import (
    V1_EACH_TICK,
    V1_FILES,
    V1_OOM,
    V1_PEAK,
    V1_STAT,
    V1_THROTTLING,
    V2_EACH_TICK,
    V2_FILES,
    V2_OOM,
    V2_PEAK,
    V2_STAT,
    Reading,
    cpu_value,
    inactive_v1,
    inactive_v2,
    int_bytes,
    oom_kills,
    rates,
    values_v1,
    values_v2,
    working_set,
)
from agent.recommender.trace import Sample
from cgroupfs.files import CgroupFiles
from cgroupfs.layout import Hierarchy
from cgroupfs.naming import cgroup_dir, container_dir
from cgroupfs.pinned import Group, PinnedFiles, pinned_reader
from cgroupfs.types import CgroupName, DriverKind

OOM_EVERY = 10  # ticks between reads of a container's OOM-kill counter
STAT_EVERY = 5  # ticks between reads of a container's memory.stat (its inactive file pages)


@dataclass(frozen=True, slots=True)
class Target:
    pod: str  # namespace/name
    container: str  # POD for the pod cgroup of a pod that sets pod-level resources
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


def _pod_dirs(h: Hierarchy, name: CgroupName, driver: DriverKind) -> tuple[tuple[str, str], ...] | None:
    """The pod cgroup's counter files: a container's, but on v1 without memory.oom_control (it counts only
    kills of the cgroup's own processes; the pod's OOMs are its containers')."""
    pod_dir = cgroup_dir(name, driver)
    if "cpu" in h.v1 and "memory" in h.v1:
        out: list[tuple[str, str]] = []
        for controller, names in V1_FILES.items():
            mount = h.v1.get(controller) or h.v1["cpu"]  # cpuacct co-mounted with cpu
            out.extend((n, f"{mount}/{pod_dir}/{n}") for n in names if n != V1_OOM)
        return tuple(out)
    if h.unified is not None:
        prefix = f"{h.unified}/" if h.unified else ""
        return tuple((n, f"{prefix}{pod_dir}/{n}") for n in V2_FILES)
    return None


def targets(pods: Sequence[PodView], cgroup_root: CgroupName, driver: DriverKind, hierarchy: Hierarchy) -> list[Target]:
    """The running containers of the pods, each pod that sets pod-level resources followed by its POD target."""
    out: list[Target] = []
    v2 = not ("cpu" in hierarchy.v1 and "memory" in hierarchy.v1)
    for pod in pods:
        if pod.phase in ("Succeeded", "Failed"):
            continue
        name = pod_cgroup_name(cgroup_root, compute_qos(pod).qos, pod.uid)
        running = False
        for c in (*pod.init_containers, *pod.containers):
            st = pod.status_of(c.name)
            if st is None or st.container_id is None or not st.running:
                continue
            files = _dirs(hierarchy, name, st.container_id, driver, st.runtime or "containerd")
            if files is None:
                continue
            limit = c.limits.cpu_milli / 1000 if c.limits.cpu_milli else None
            out.append(Target(pod.key, c.name, st.container_id, files, v2, limit, c.requests.memory))
            running = True
        if running and pod_level_resources_set(pod) and (files := _pod_dirs(hierarchy, name, driver)) is not None:
            limits, requests = pod.pod_limits, pod.pod_requests
            limit = limits.cpu_milli / 1000 if limits is not None and limits.cpu_milli else None
            out.append(Target(pod.key, POD, "", files, v2, limit, requests.memory if requests is not None else None))
    return out


def reader_for(cgroupfs: Path, cgroup_root: CgroupName, driver: DriverKind, hierarchy: Hierarchy) -> CgroupFiles:
    """A reader confined to the kubepods subtree of every hierarchy the sampler reads."""
    kubepods = cgroup_dir(cgroup_root.child("kubepods"), driver)
    mounts = {hierarchy.v1[c] for c in ("cpu", "cpuacct", "memory") if c in hierarchy.v1}
    if hierarchy.unified is not None:
        mounts.add(hierarchy.unified)
    roots = [f"{m}/{kubepods}" if m else kubepods for m in sorted(mounts)]
    return CgroupFiles(cgroupfs, roots)


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one target's tick reads: the files kept open, where each counter file sits among them (None
    when all are there, in order), memory.stat and the OOM-kill counter's file (kept open, each read every
    few ticks) and the peak file, read by path only on an OOM."""

    each_tick: Group
    slots: tuple[int | None, ...] | None
    stat: Group | None
    oom: Group | None
    peak: str | None
    v2: bool


def _plan(t: Target, starvation: bool) -> _Plan:
    paths = dict(t.files)
    if t.v2:
        names: tuple[str, ...] = V2_EACH_TICK
        stat, oom, peak = V2_STAT, V2_OOM, V2_PEAK
    else:
        names = (*V1_EACH_TICK, V1_THROTTLING) if starvation else V1_EACH_TICK
        stat, oom, peak = V1_STAT, V1_OOM, V1_PEAK
    present = tuple(paths[n] for n in names if n in paths)
    slots = None
    if len(present) < len(names):  # a hierarchy without the controller: those counters are None
        index = {p: i for i, p in enumerate(present)}
        slots = tuple(index[paths[n]] if n in paths else None for n in names)
    return _Plan(
        present,
        slots,
        (paths[stat],) if stat in paths else None,
        (paths[oom],) if oom in paths else None,
        paths.get(peak),
        t.v2,
    )


def _warn(message: str) -> None:
    from agent.infra.logging import (
        get_logger,  # here: the CLI imports this module and must not load structlog
    )

    get_logger("agent.recommender").warning("recommender.descriptors", message=message)


@dataclass(slots=True)
class _Track:
    """One container between ticks: what it reads, its last reading, the tick that last saw it. Kept by
    the container's files (their paths hold the pod UID and the container ID) and updated in place."""

    plan: _Plan
    seen: int
    oom_due: int  # the tick that reads the OOM-kill counter next
    stat_due: int  # the tick that reads memory.stat next
    at: float = 0.0
    reading: Reading | None = None


@dataclass(slots=True)
class Sampler:
    """Reads each target's counters through descriptors kept open between ticks (`PinnedFiles`, closed
    as soon as the target is gone); `close` releases them all."""

    reader: CgroupFiles
    starvation: bool = False
    throttle_threshold: float = 0.2
    oom_every: int = OOM_EVERY
    stat_every: int = STAT_EVERY
    _tracks: dict[tuple[tuple[str, str], ...], _Track] = field(default_factory=dict)
    _ticks: int = 0
    _pinned: PinnedFiles | None = None

    def tick(self, now: float, wanted: Sequence[Target]) -> tuple[list[Sample], list[Target]]:
        """One read pass; returns the samples and the targets whose OOM-kill counter moved (a POD target: a
        kill in the pod)."""
        pinned = self._pinned
        if pinned is None:
            pinned = self._pinned = pinned_reader(self.reader, _warn)
        self._ticks += 1
        tick, tracks = self._ticks, self._tracks
        starvation, threshold, every, stat_every = self.starvation, self.throttle_threshold, self.oom_every, self.stat_every
        read = pinned.read
        samples: list[Sample] = []
        oomed: list[Target] = []
        killed: set[str] = set()  # pods with a container killed in this tick
        v1_pods: list[tuple[Target, _Plan, int | None]] = []  # v1 pod cgroups: OOMs only through their containers
        seen = 0
        for t in wanted:
            track = tracks.get(t.files)
            if track is None:  # its counter read now, then at a place of its own among the ticks
                track = tracks[t.files] = _Track(_plan(t, starvation), 0, tick, tick)
            if track.seen != tick:
                seen += 1
            plan = track.plan
            data = read(plan.each_tick)
            if plan.slots is not None:
                data = [None if i is None else data[i] for i in plan.slots]
            previous = track.reading
            if tick >= track.oom_due:
                track.oom_due = tick + (every if previous is not None else 1 + len(tracks) % every)
                total = oom_kills(read(plan.oom)[0]) if plan.oom is not None else None
            else:
                total = previous[6] if previous is not None else None
            due = tick >= track.stat_due
            inactive = previous[4] if previous is not None and not due else None
            current = values_v2(data, inactive, total) if t.v2 else values_v1(data, inactive, total)
            usage = current[3]
            if due or (inactive is not None and usage is not None and inactive > usage):  # read, or no longer true
                track.stat_due = tick + (stat_every if previous is not None else 1 + len(tracks) % stat_every)
                stat = read(plan.stat)[0] if plan.stat is not None else None
                current = (*current[:4], inactive_v2(stat) if plan.v2 else inactive_v1(stat), *current[5:])
            cores, throttled, kills = rates(previous, current, now - track.at)
            track.seen, track.at, track.reading = tick, now, current
            ws = working_set(current)
            cpu = cpu_value(cores, throttled, t.cpu_limit_cores, starvation, threshold)
            if cpu is not None or ws is not None:
                samples.append(Sample(now, t.pod, t.container, cpu, ws))
            if kills:
                used = max(self._peak(plan) or 0, ws or 0)
                samples.append(Sample(now, t.pod, t.container, memory=float(used), oom=True))
                oomed.append(t)
                killed.add(t.pod)
            elif plan.oom is None and t.container == POD:  # a v1 pod cgroup: its containers' kills are its
                v1_pods.append((t, plan, ws))
        for t, plan, ws in v1_pods:
            if t.pod in killed:
                used = max(self._peak(plan) or 0, ws or 0)
                samples.append(Sample(now, t.pod, POD, memory=float(used), oom=True))
                oomed.append(t)
        if seen != len(tracks):
            for files in [f for f, tr in tracks.items() if tr.seen != tick]:  # gone: close its files now
                plan = tracks.pop(files).plan
                pinned.forget(plan.each_tick)
                for group in (plan.stat, plan.oom):
                    if group is not None:
                        pinned.forget(group)
        return samples, oomed

    def _peak(self, plan: _Plan) -> int | None:
        """The peak memory at an OOM, read then by path (a file no other tick needs)."""
        text = self.reader.read(plan.peak) if plan.peak is not None else None
        return int_bytes(text.encode() if text is not None else None)

    def close(self) -> None:
        """Close the counter files kept open."""
        if self._pinned is not None:
            self._pinned.close()
