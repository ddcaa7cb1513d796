"""The CPU starvation reaction's shell (the rule: agent.vpa.react): every second, the CFS counters (`cpu.stat`:
`nr_periods`, `nr_throttled`) and the CPU time used (v1 `cpuacct.usage`, v2 `cpu.stat` `usage_usec`) of the running containers with a CPU limit whose pod a VPA acts on here, one
read pass; each reading stepped through the rule; a floor that moved goes to the VPA source and its pod is
decided at once. Read-only, confined to the kubepods subtrees; a node with no such container reads nothing.
Each container's two files stay open between passes and are read with pread (`cgroupfs.pinned`, as the
recommender's sampler reads): walking and checking their paths again each second was most of the cost.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Final

from agent.core.model import ContainerView, PodView, Resources
from agent.daemon.components import DaemonContext
from agent.infra.logging import get_logger
from agent.recommender.counters import field_bytes, int_bytes
from agent.recommender.sampler import Target, reader_for, targets
from agent.vpa.floors import caps
from agent.vpa.model import ContainerPolicy
from agent.vpa.react import CpuState, Reading, step_cpu
from agent.vpa.source import VPASource
from cgroupfs.pinned import Group, PinnedFiles, pinned_reader

log = get_logger("agent.daemon.vpa")

READ_EVERY_S: Final = 1.0
PERIODS: Final = b"\nnr_periods "
THROTTLED: Final = b"\nnr_throttled "
USAGE_USEC: Final = b"\nusage_usec "


def cfs_reading(data: bytes | None, cpuacct: bytes | None, at: float) -> Reading | None:
    """`cpu.stat` (v1 and v2 name the CFS counters alike) and, on v1, `cpuacct.usage` as a reading; None
    without the CFS counters (no limit ever set, a cgroup gone)."""
    if data is None:
        return None
    periods, throttled = field_bytes(data, PERIODS), field_bytes(data, THROTTLED)
    if periods is None or throttled is None:
        return None
    if cpuacct is not None:
        usage = int_bytes(cpuacct)
    else:
        usec = field_bytes(data, USAGE_USEC)
        usage = None if usec is None else usec * 1000
    return Reading(at, periods, throttled, usage)


class StarvationLoop:
    """The per-container states between readings, kept by (pod UID, container) while the container runs."""

    def __init__(self, ctx: DaemonContext, source: VPASource, free: Callable[[], Resources | None]) -> None:
        self.ctx = ctx
        self.source = source
        self.free = free
        env = ctx.env
        self.root, self.driver, self.hierarchy = env.settings.cgroup_root_name, env.settings.cgroup_driver, env.hierarchy
        self.reader = reader_for(ctx.settings.cgroupfs, self.root, self.driver, self.hierarchy)
        self.pinned: PinnedFiles | None = None
        self.states: dict[tuple[str, str], CpuState] = {}
        self.groups: dict[tuple[tuple[str, str], ...], Group] = {}  # a container's files (its ID in them) -> open
        self._made: dict[tuple[str, tuple[str | None, ...]], list[Target]] = {}

    def tick(self, now: float) -> list[str]:
        """One read pass; the UIDs of the pods whose floors moved (decided again by the caller)."""
        acted = {p.uid: (p, vpa) for p in self.ctx.pods() if (vpa := self.source.acting_vpa(p)) is not None}
        pods: dict[str, PodView] = {p.key: p for p, _ in acted.values()}
        wanted = [t for p in pods.values() for t in self._targets(p) if t.cpu_limit_cores]
        if self.pinned is None:
            self.pinned = pinned_reader(self.reader, lambda message: log.warning("vpa.react_descriptors", message=message))
        moved: list[str] = []
        seen: set[tuple[str, str]] = set()
        opened: set[tuple[tuple[str, str], ...]] = set()
        for t in wanted:
            pod, name = pods[t.pod], t.container
            group = self.groups.get(t.files)
            if group is None:
                paths = dict(t.files)
                group = self.groups[t.files] = tuple(p for n in ("cpu.stat", "cpuacct.usage") if (p := paths.get(n)))
            opened.add(t.files)
            texts = self.pinned.read(group)
            reading = cfs_reading(texts[0] if texts else None, texts[1] if len(texts) > 1 else None, now)
            container = next((c for c in pod.containers if c.name == name), None)
            if reading is None or container is None:
                continue  # an init container, or a cgroup gone since the pass began
            seen.add((pod.uid, name))
            vpa = acted[pod.uid][1]
            state = self.states.get((pod.uid, name))
            if state is None:  # a floor kept across a restart decays as one set now would
                kept = self.source.floors_of(pod.uid).get(name)
                if kept is not None and kept.cpu_milli is not None:
                    state = CpuState(floor=kept.cpu_milli, limit_before=kept.cpu_limit_before, changed_at=now)
                else:
                    state = CpuState()
            cap = functools.partial(self._cap, container, vpa.policy_for(name))
            state, reaction = step_cpu(state, reading, container.requests.cpu_milli, container.limits.cpu_milli, cap, name)
            self.states[(pod.uid, name)] = state
            if reaction is not None:
                self.source.react_cpu(pod, reaction)
                moved.append(pod.uid)
        self.states = {k: v for k, v in self.states.items() if k in seen}
        for gone in [k for k in self.groups if k not in opened]:
            self.pinned.forget(self.groups.pop(gone))
        if len(self._made) > 2 * len(pods) + 16:  # pods gone, containers restarted: keep what is current
            live = {p.uid for p in pods.values()}
            self._made = {k: v for k, v in self._made.items() if k[0] in live}
        return moved

    def _cap(self, container: ContainerView, policy: ContainerPolicy | None) -> int | None:
        return caps(container, policy, self.free()).cpu_milli

    def _targets(self, pod: PodView) -> list[Target]:
        """The pod's running containers' files, made again only when its containers changed."""
        key = (pod.uid, tuple(s.container_id for s in pod.statuses if s.running))
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = targets([pod], self.root, self.driver, self.hierarchy)
        return found

    def close(self) -> None:
        if self.pinned is not None:
            self.pinned.close()

    def run(self, stop: threading.Event) -> None:
        try:
            self._run(stop)
        finally:
            self.close()

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(READ_EVERY_S):
            try:
                moved = self.tick(time.time())
            except Exception as err:  # one bad pass must not end the reactions: log, go on
                log.warning("vpa.react_failed", error=f"{type(err).__name__}: {err}")
                continue
            if moved:
                self.ctx.refresh(sorted(set(moved)))
