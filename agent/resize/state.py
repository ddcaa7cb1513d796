"""The resize state machine (pure): arrivals, the queue, admission decisions, actuation outcomes.

Every function takes an `EngineState` (immutable) and returns a new one; the engine shell owns the only
mutable reference and does all I/O. Ordering rules:

* Pending resizes are admitted one at a time in the order their pod updates arrived (`arrival`). A newer
  desired state for a pod whose resize is still queued replaces it and keeps its place; for a pod being
  actuated it is admitted next and actuation is driven toward it.
* Deferred resizes are looked at again when capacity frees (a pod leaves, an accepted resize lowers its
  requests) or when their periodic retry is due; Infeasible ones only when their desired state changes.
* A failed actuation backs off exponentially (capped); the next attempt is not made before `not_before`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from agent.core.compute.aggregate import pod_requests
from agent.core.compute.node import TERMINAL_PHASES
from agent.core.model import PodUID, PodView
from agent.resize.admission import Admit, NodeCapacity, Verdict, admit
from agent.resize.allocation import allocation_of, with_allocation
from agent.resize.types import PodAllocation, ResizeState, ResizeStatus


@dataclass(frozen=True, slots=True)
class Timing:
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 60.0
    deferred_retry_s: float = 30.0  # the kubelet's first pending-resize retry delay


@dataclass(frozen=True, slots=True)
class PodRecord:
    uid: PodUID
    pod: str  # namespace/name
    desired: PodAllocation
    allocated: PodAllocation
    state: ResizeState | None = None  # None: never resized since the agent knew it
    reason: str = ""
    message: str = ""
    arrival: int | None = None  # place in the queue while a resize is pending or being actuated
    attempts: int = 0
    not_before: float = 0.0  # Error: backoff; Deferred: the next periodic retry
    restarted: Mapping[str, str] = field(default_factory=dict)  # container -> ID stopped (this allocation)

    @property
    def pending(self) -> bool:
        """A desired state that differs from the allocated one (not admitted yet)."""
        return self.desired != self.allocated

    def status(self) -> ResizeStatus | None:
        if self.state is None:
            return None
        return ResizeStatus(
            self.uid,
            self.pod,
            self.state,
            self.reason,
            self.message,
            self.desired,
            self.allocated,
            self.attempts,
            dict(self.restarted),
        )


@dataclass(frozen=True, slots=True)
class EngineState:
    records: Mapping[PodUID, PodRecord] = field(default_factory=dict)
    seq: int = 0
    capacity_freed: bool = False


def backoff_s(attempts: int, timing: Timing) -> float:
    """1, 2, 4 … seconds, capped: the delay after the `attempts`-th failure in a row."""
    if attempts <= 0:
        return 0.0
    return float(min(timing.backoff_cap_s, timing.backoff_base_s * 2 ** min(attempts - 1, 30)))


def restore(records: Iterable[PodRecord]) -> EngineState:
    """State after a restart: each checkpointed pod at its allocated values. A pod whose resize was
    queued or being actuated when the agent stopped is in progress again, in its old order."""
    out = {
        r.uid: replace(
            r, desired=r.allocated, state=ResizeState.IN_PROGRESS if r.arrival is not None else None
        )
        for r in records
    }
    seq = max((r.arrival or 0 for r in out.values()), default=0)
    return EngineState(out, seq)


def observe_pod(state: EngineState, pod: PodView) -> EngineState:
    """A pod update arrived. A pod the agent never saw is admitted at its own values (the kubelet
    admitted it); a changed desired state joins (or keeps its place in) the queue."""
    desired = allocation_of(pod)
    rec = state.records.get(pod.uid)
    if rec is None:
        rec = PodRecord(pod.uid, pod.key, desired, desired)
        return replace(state, records={**state.records, pod.uid: rec})
    if desired == rec.desired:
        return state if rec.pod == pod.key else _put(state, replace(rec, pod=pod.key))
    seq = state.seq
    if desired == rec.allocated:
        # back to what is admitted: nothing to admit; actuation finishes (or already has) the job
        new = replace(rec, desired=desired, state=ResizeState.IN_PROGRESS, reason="", message="")
    else:
        arrival = rec.arrival
        if arrival is None:
            seq += 1
            arrival = seq
        new = replace(
            rec, desired=desired, state=ResizeState.PROPOSED, reason="", message="", arrival=arrival
        )
    return replace(_put(state, new), seq=seq)


def _put(state: EngineState, rec: PodRecord) -> EngineState:
    return replace(state, records={**state.records, rec.uid: rec})


def remove_pod(state: EngineState, uid: PodUID) -> EngineState:
    if uid not in state.records:
        return state
    records = dict(state.records)
    del records[uid]
    return replace(state, records=records, capacity_freed=True)


def observe(state: EngineState, pods: Sequence[PodView]) -> EngineState:
    """A full list of the node's pods: departed pods leave (freeing capacity), the rest arrive in order."""
    present = {p.uid for p in pods}
    for uid in [u for u in state.records if u not in present]:
        state = remove_pod(state, uid)
    for pod in pods:
        state = observe_pod(state, pod)
    return state


def queue(state: EngineState, among: Collection[PodUID] | None = None) -> list[PodRecord]:
    """Records with a resize pending or being actuated, in arrival order. `among`: the pods that may
    be queued, when the caller keeps them (a node's queue is short; its records are many)."""
    records = state.records
    found = records.values() if among is None else (records[u] for u in among if u in records)
    return sorted((r for r in found if r.arrival is not None), key=lambda r: r.arrival or 0)


def _eligible(rec: PodRecord, now: float, capacity_freed: bool) -> bool:
    if not rec.pending:
        return False
    if rec.state is ResizeState.DEFERRED:
        return capacity_freed or now >= rec.not_before
    return rec.state is not ResizeState.INFEASIBLE


def admit_pending(
    state: EngineState,
    pods: Sequence[PodView] | Mapping[PodUID, PodView],
    node: NodeCapacity,
    now: float,
    timing: Timing,
    used: tuple[int, int] | None = None,
    decide: Admit = admit,
    queued: Collection[PodUID] | None = None,
) -> tuple[EngineState, list[PodUID]]:
    """Admit queued resizes in arrival order; returns the new state and the UIDs accepted (whose
    allocations the caller must checkpoint before actuating anything). `used`: the summed allocated
    (CPU milli, memory) requests of every non-terminal pod with a record, when the caller keeps them as
    running totals; the other pods are then never walked (O(queue), not O(node)). `queued`: the pods
    that may be queued, when the caller keeps them (admission changes no other record)."""
    by_uid = pods if isinstance(pods, Mapping) else {p.uid: p for p in pods}
    accepted: list[PodUID] = []
    capacity_freed = state.capacity_freed
    changed = True
    while changed:
        changed = False
        for rec in queue(state, queued):
            if not _eligible(rec, now, capacity_freed):
                continue
            pod = by_uid.get(rec.uid)
            if pod is None:
                continue
            before = pod_requests(with_allocation(pod, rec.allocated))
            others_used = None
            if used is not None:
                own = (0, 0) if pod.phase in TERMINAL_PHASES else (before.cpu_milli or 0, before.memory or 0)
                others_used = (used[0] - own[0], used[1] - own[1])
            others = (
                []
                if used is not None
                else [
                    with_allocation(p, state.records[p.uid].allocated)
                    for p in by_uid.values()
                    if p.uid != rec.uid and p.uid in state.records and p.phase not in TERMINAL_PHASES
                ]
            )
            decision = decide(pod, rec.allocated, rec.desired, others, node, others_used)
            if decision.verdict is Verdict.ACCEPTED:
                after = pod_requests(with_allocation(pod, rec.desired))
                if used is not None and pod.phase not in TERMINAL_PHASES:
                    used = (
                        used[0] + (after.cpu_milli or 0) - (before.cpu_milli or 0),
                        used[1] + (after.memory or 0) - (before.memory or 0),
                    )
                if (after.cpu_milli or 0) < (before.cpu_milli or 0) or (after.memory or 0) < (
                    before.memory or 0
                ):
                    capacity_freed = changed = True
                new = replace(
                    rec,
                    allocated=rec.desired,
                    state=ResizeState.IN_PROGRESS,
                    reason="",
                    message="",
                    attempts=0,
                    not_before=0.0,
                    restarted={},
                )
                accepted.append(rec.uid)
            elif decision.verdict is Verdict.DEFERRED:
                new = replace(
                    rec,
                    state=ResizeState.DEFERRED,
                    reason=decision.reason,
                    message=decision.message,
                    not_before=now + (0.0 if decision.on_next_update else timing.deferred_retry_s),
                )
            else:
                new = replace(
                    rec, state=ResizeState.INFEASIBLE, reason=decision.reason, message=decision.message
                )
            state = _put(state, new)
    return replace(state, capacity_freed=False), accepted


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one actuation attempt of a pod found: `done` (actual == allocated), `failed` (a step
    failed or the plan was refused: back off), or neither (held back: memory usage, a restart)."""

    done: bool = False
    failed: bool = False
    reason: str = ""
    message: str = ""


def due(rec: PodRecord, now: float) -> bool:
    """Whether the engine drives this pod's actuation on its own now (admitted, not backing off).
    Pods with a pending (Proposed, Deferred, Infeasible) resize converge to their allocated values in
    the node-wide pass instead."""
    if rec.arrival is None:
        return False
    if rec.state is ResizeState.ERROR:
        return now >= rec.not_before
    return rec.state is ResizeState.IN_PROGRESS


def backing_off(rec: PodRecord, now: float) -> bool:
    return rec.state is ResizeState.ERROR and now < rec.not_before


def actuated(state: EngineState, uid: PodUID, outcome: Outcome, now: float, timing: Timing) -> EngineState:
    rec = state.records.get(uid)
    if rec is None:
        return state
    pending_state = rec.state in (ResizeState.DEFERRED, ResizeState.INFEASIBLE, ResizeState.PROPOSED)
    if outcome.failed:
        attempts = rec.attempts + 1
        new = replace(
            rec,
            state=rec.state if pending_state else ResizeState.ERROR,
            reason=rec.reason if pending_state else outcome.reason,
            message=rec.message if pending_state else outcome.message,
            attempts=attempts,
            not_before=now + backoff_s(attempts, timing),
        )
    elif outcome.done:
        if pending_state:
            new = replace(rec, attempts=0)  # the old allocation is in place; the pending one still waits
        else:
            new = replace(rec, state=ResizeState.DONE, reason="", message="", arrival=None, attempts=0)
    else:
        new = replace(
            rec,
            state=rec.state if pending_state else ResizeState.IN_PROGRESS,
            reason=rec.reason if pending_state else outcome.reason,
            message=rec.message if pending_state else outcome.message,
        )
    return _put(state, new)


def mark_restarted(state: EngineState, uid: PodUID, container: str, container_id: str) -> EngineState:
    rec = state.records.get(uid)
    if rec is None:
        return state
    return _put(state, replace(rec, restarted={**rec.restarted, container: container_id}))
