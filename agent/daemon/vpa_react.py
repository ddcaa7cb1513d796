"""The CPU starvation reaction's shell (the rule: agent.vpa.react): every second, the CFS counters (`cpu.stat`:
`nr_periods`, `nr_throttled`) and the CPU time used (v1 `cpuacct.usage`, v2 `cpu.stat` `usage_usec`) of the running containers with a CPU limit whose pod a VPA acts on here, one
read pass; each reading stepped through the rule; a floor that moved goes to the VPA source and its pod is
decided at once. Read-only, confined to the kubepods subtrees; a node with no such container reads nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from agent.core.model import PodView, Resources
from agent.daemon.components import DaemonContext
from agent.infra.logging import get_logger
from agent.recommender.counters import field_bytes, int_bytes
from agent.recommender.sampler import reader_for, targets
from agent.vpa.floors import caps
from agent.vpa.react import CpuState, Reading, step_cpu
from agent.vpa.source import VPASource

log = get_logger("agent.daemon.vpa")

READ_EVERY_S: Final = 1.0
PERIODS: Final = b"\nnr_periods "
THROTTLED: Final = b"\nnr_throttled "
USAGE_USEC: Final = b"\nusage_usec "


def cfs_reading(stat: str | None, cpuacct: str | None, at: float) -> Reading | None:
    """`cpu.stat` (v1 and v2 name the CFS counters alike) and, on v1, `cpuacct.usage` as a reading; None
    without the CFS counters (no limit ever set, a cgroup gone)."""
    if stat is None:
        return None
    data = stat.encode()
    periods, throttled = field_bytes(data, PERIODS), field_bytes(data, THROTTLED)
    if periods is None or throttled is None:
        return None
    if cpuacct is not None:
        usage = int_bytes(cpuacct.encode())
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
        self.states: dict[tuple[str, str], CpuState] = {}

    def tick(self, now: float) -> list[str]:
        """One read pass; the UIDs of the pods whose floors moved (decided again by the caller)."""
        acted = {p.uid: (p, vpa) for p in self.ctx.pods() if (vpa := self.source.acting_vpa(p)) is not None}
        pods: dict[str, PodView] = {p.key: p for p, _ in acted.values()}
        wanted = [t for t in targets(list(pods.values()), self.root, self.driver, self.hierarchy) if t.cpu_limit_cores]
        files = {(t.pod, t.container): (dict(t.files).get("cpu.stat"), dict(t.files).get("cpuacct.usage")) for t in wanted}
        texts, _ = self.reader.read_many([p for pair in files.values() for p in pair if p is not None])
        free = self.free() if wanted else None
        moved: list[str] = []
        seen: set[tuple[str, str]] = set()
        for (key, name), (stat, cpuacct) in files.items():
            pod = pods[key]
            reading = cfs_reading(texts.get(stat) if stat else None, texts.get(cpuacct) if cpuacct else None, now)
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
            cap = caps(container, vpa.policy_for(name), free).cpu_milli
            state, reaction = step_cpu(state, reading, container.requests.cpu_milli, container.limits.cpu_milli, cap, name)
            self.states[(pod.uid, name)] = state
            if reaction is not None:
                self.source.react_cpu(pod, reaction)
                moved.append(pod.uid)
        self.states = {k: v for k, v in self.states.items() if k in seen}
        return moved

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(READ_EVERY_S):
            try:
                moved = self.tick(time.time())
            except Exception as err:  # one bad pass must not end the reactions: log, go on
                log.warning("vpa.react_failed", error=f"{type(err).__name__}: {err}")
                continue
            if moved:
                self.ctx.refresh(sorted(set(moved)))
