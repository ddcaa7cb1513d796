"""The reactions' state beside the VPA source (agent.vpa.source): the floors in force per pod, OOM kills
turned into memory floors as the pod status tells of them, and which pods must be decided now.

An OOM kill is read from the pod status the source already has (a container's `state` or `lastState`
terminated with reason OOMKilled, at its `finishedAt`): the kubelet's own report on every node kind, with
nothing else turned on; the node's recommender, when it runs, tells of a kill it saw in the kernel sooner
(`oom_seen`), and the rule counts the two as one kill. A CPU floor comes from the reaction loop that reads
the CFS counters (agent.daemon.vpa_react) through `set_cpu`.

A floor changed → the pod is decided at once and for URGENT_S after, whatever the updater's conditions
(its lifetime, its minimum change): the reaction is the reason. A raise and its decay are both such changes.
The floors outlive a restart (agent.vpa.applied keeps them with the applied targets); a pod gone loses them.
Not thread-safe by itself: the source calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from agent.core.model import PodView, Resources
from agent.infra.durations import parse_timestamp
from agent.vpa.floors import Floor, caps, with_floors
from agent.vpa.model import VPA
from agent.vpa.policy import ContainerTarget
from agent.vpa.react import Kind, OomState, Reaction, step_oom

URGENT_S: Final = 120.0
OOM_REASON: Final = "OOMKilled"


def oom_kills(raw: Mapping[str, Any]) -> dict[str, float]:
    """Each container's latest OOM kill the pod status tells of (container -> finishedAt, UNIX seconds)."""
    status = raw.get("status")
    out: dict[str, float] = {}
    for cs in (status.get("containerStatuses") or []) if isinstance(status, Mapping) else []:
        if not isinstance(cs, Mapping):
            continue
        for key in ("state", "lastState"):
            where = cs.get(key)
            term = where.get("terminated") if isinstance(where, Mapping) else None
            if isinstance(term, Mapping) and term.get("reason") == OOM_REASON:
                at = parse_timestamp(term.get("finishedAt"))
                if at is not None:
                    out[str(cs.get("name"))] = max(at, out.get(str(cs.get("name")), at))
    return out


def running_memory(pod: PodView, applied: Iterable[ContainerTarget]) -> dict[str, int | None]:
    """Each container's memory request as it runs now, what a kill is measured against: what the agent
    applied (a bare node), else what the kubelet admitted (allocatedResources), else the spec's."""
    running = {c.name: c.requests.memory for c in pod.containers}
    for st in pod.statuses:
        if st.allocated is not None and st.allocated.memory is not None:
            running[st.name] = st.allocated.memory
    for t in applied:
        running[t.container] = t.requests.memory
    return running


@dataclass
class Reactor:
    oom: bool = False  # vpa.react.oom
    free: Callable[[], Resources | None] = lambda: None  # the node's allocatable left (None: unknown)
    floors: dict[str, dict[str, Floor]] = field(default_factory=dict)  # pod uid -> container -> floor
    reacted: dict[str, tuple[float, str]] = field(default_factory=dict)  # pod uid -> (when, why)
    on_reaction: Callable[[str, str, Reaction], None] | None = None  # (pod key, uid, reaction)
    on_floors: Callable[[], None] | None = None  # the floors changed: persist them
    _said: set[tuple[str, str, Kind]] = field(default_factory=set)  # (uid, container, OOM_AT_CAP) said once

    def overlay(
        self, pod: PodView, raw: Mapping[str, Any], vpa: VPA, now: float, peaks: Mapping[str, int] | None,
        running: Mapping[str, int | None],
    ) -> tuple[VPA, str | None]:
        """(the VPA with the pod's floors laid under its recommendation, why the pod is decided now or None).
        `running`: each container's memory request as it runs now (what a kill is measured against)."""
        if self.oom:
            for container, at in oom_kills(raw).items():
                self.oom_seen(pod, vpa, container, at, (peaks or {}).get(container), running.get(container))
        floors = self.floors.get(pod.uid)
        if floors:
            vpa = with_floors(vpa, pod.containers, floors)
        when = self.reacted.get(pod.uid)
        return vpa, when[1] if when is not None and now - when[0] < URGENT_S else None

    def oom_seen(
        self, pod: PodView, vpa: VPA, container: str, at: float, peak: int | None, request: int | None
    ) -> None:
        """A kill of `container` at `at`, running with `request` bytes requested: VPA's OOM bump as its
        memory floor, within its caps."""
        c = next((c for c in pod.containers if c.name == container), None)
        if c is None:
            return
        kept = self.floors.get(pod.uid, {}).get(container, Floor())
        state = OomState(kept.memory, kept.oom_at if kept.oom_at is not None else float("-inf"),
                         (pod.uid, container, Kind.OOM_AT_CAP) in self._said)
        cap = caps(c, vpa.policy_for(container), self.free()).memory
        state, reaction = step_oom(state, at, request, peak, cap, container)
        self._set(pod, container, replace(kept, memory=state.floor, oom_at=state.last_kill), reaction, at)

    def set_cpu(self, pod: PodView, reaction: Reaction, now: float) -> None:
        kept = self.floors.get(pod.uid, {}).get(reaction.container, Floor())
        before = reaction.limit_before if reaction.floor is not None else None
        self._set(pod, reaction.container, replace(kept, cpu_milli=reaction.floor, cpu_limit_before=before), reaction, now)

    def _set(self, pod: PodView, container: str, floor: Floor, reaction: Reaction | None, now: float) -> None:
        floors = self.floors.setdefault(pod.uid, {})
        if floors.get(container, Floor()) != floor:
            floors[container] = floor
            if self.on_floors is not None:
                self.on_floors()
        if reaction is None:
            return
        if reaction.kind is Kind.OOM_AT_CAP:
            self._said.add((pod.uid, container, reaction.kind))
        elif reaction.kind is not Kind.CPU_AT_CAP:  # a floor moved: the pod is decided now
            self.reacted[pod.uid] = (now, f"{container}: {reaction.why}")
        if self.on_reaction is not None:
            self.on_reaction(pod.key, pod.uid, reaction)

    def prune(self, uids: set[str] | frozenset[str]) -> bool:
        """Forget pods no longer on the node; whether kept floors went."""
        gone = [u for u in self.floors if u not in uids]
        for uid in gone:
            del self.floors[uid]
        self.reacted = {u: w for u, w in self.reacted.items() if u in uids}
        self._said = {s for s in self._said if s[0] in uids}
        return bool(gone)
