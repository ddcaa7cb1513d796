"""The resize engine (agent.resize) behind the daemon's `Reconciler` protocol.

Why an adapter: the engine takes pod updates in arrival order and runs node-wide passes (admission,
the allocated state checkpointed before any write, each admitted pod actuated with every other pod
frozen, then the rest of the node); the daemon thinks in work items. So a pod item hands the engine that
pod's update and runs a pass; the tiers item hands it the whole pod list and runs a pass. The engine is
not thread-safe: one lock serialises every call, so several workers behave as one. The engine saves its
checkpoint after every pass, and a stopping daemon lets the current pass finish (the executor stops only
at a failed step), so nothing is ever half-ordered. In observe-only mode passes are dry runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from agent.core.diff import NodeDiff
from agent.core.model import PodUID, PodView
from agent.core.plan import CgroupStep, ContainerStep
from agent.daemon.gate import Gate, Gated, written
from agent.daemon.reconciler import (
    Outcome,
    PodEventNote,
    Report,
    ResizeState,
    ResizeStatus,
    StopRequested,
    compute_or_note,
    event_for,
)
from agent.infra.logging import get_logger
from agent.pipeline.execute import describe
from agent.resize.checkpoint import CheckpointError
from agent.resize.engine import ResizeEngine
from agent.resize.report import PassReport
from agent.resize.store import NodeRecords

log = get_logger("agent.daemon.reconciler")
DRIFT_RECORDS = "drift"


@dataclass(slots=True)
class EngineReconciler:
    engine: ResizeEngine
    observe_only: bool = False
    gate: Gate | None = None  # drift backoff and yielding for the node-wide pass (a pod's resize is not held)
    _gated: list[Gated] = field(default_factory=list)  # what the gate said during the current pass
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last: dict[str, ResizeStatus] = field(default_factory=dict)
    _invalid: dict[str, str] = field(default_factory=dict)  # uid -> the compute error last reported
    clock: Callable[[], float] = time.monotonic
    _last_full: float | None = None  # when the last node-wide pass ran
    _resync_due: bool = False  # a resync asked for the node-wide pass
    _drift_store: NodeRecords | None = None  # the contested drift records, across restarts

    def __post_init__(self) -> None:
        if self.gate is not None:
            self.engine.node_filter = self._filter
            self.engine.owned = self._owned
            self.engine.to_read = self.gate.to_read

    def _owned(self, node: NodeDiff) -> NodeDiff:
        assert self.gate is not None
        gated = self.gate.owned(node)
        if gated.notes:
            self._gated.append(gated)
        return gated.node

    def _filter(self, node: NodeDiff) -> NodeDiff:
        assert self.gate is not None
        gated = self.gate.filter(node, now=self.clock())
        self._gated.append(gated)
        return gated.node

    def start(self, pods: Sequence[PodView]) -> list[str]:
        with self._lock:
            problems = [p.message for p in self.engine.start(pods, persist=not self.observe_only)]
            self._last = {s.uid: s for s in self.engine.statuses()}
            if self.gate is not None:
                self._drift_store = NodeRecords(self.engine.settings.state_dir, DRIFT_RECORDS)
                records, warning = self._drift_store.load()
                self.gate.drift.restore(records)
                if warning:
                    problems.append(warning)
            # what the previous run left in the state directory and this start took up again (an
            # upgrade or a restart shows here that nothing was started from scratch)
            log.info("state.resumed", state_dir=str(self.engine.settings.state_dir),
                     pod_records=self.engine.persist.resumed,
                     drift_records=len(records) if self.gate is not None else None)
        return problems

    def view_behind(self, reason: str | None) -> None:
        if self.gate is not None:
            with self._lock:
                self.gate.behind = reason

    def reconcile_pod(self, pod: PodView, stop: StopRequested) -> Report:
        invalid = compute_or_note(pod, self.engine.settings.compute_config(self.engine.env.hugepage_sizes))
        if isinstance(invalid, tuple):  # bad input: an Event once per message; the engine never sees it
            reason, message = invalid
            with self._lock:
                events = (
                    () if self._invalid.get(pod.uid) == message else (PodEventNote(reason, message, True),)
                )
                self._invalid[pod.uid] = message
            return Report("pod", Outcome.INVALID, errors=((reason, message),), events=events)
        with self._lock:
            self._invalid.pop(pod.uid, None)
            self.engine.update(pod)
            return self._pass("pod", full=self._last_full is None)

    def reconcile_tiers(self, pods: Sequence[PodView], stop: StopRequested) -> Report:
        """A node-wide pass at most once per resync period (drift anywhere); in between, the tiers item
        every pod event enqueues costs what changed, not the node."""
        with self._lock:
            self.engine.observe(pods)
            now = self.clock()
            full = (
                self._resync_due
                or self._last_full is None
                or now - self._last_full >= self.engine.settings.resync_period_s
            )
            self._resync_due = False
            return self._pass("tiers", full=full)

    def stale(self, pods: Sequence[PodView]) -> set[str]:
        """No pod items: the tiers item's node-wide pass reads and converges the whole node at once."""
        with self._lock:
            self._resync_due = True
        return set()

    def forget_pod(self, uid: PodUID) -> None:
        with self._lock:
            self.engine.remove(uid)
            self._last.pop(uid, None)

    def status(self, uid: PodUID) -> ResizeStatus | None:
        with self._lock:
            return self.engine.status(uid)

    def states(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self._lock:
            for s in self.engine.statuses():
                counts[s.state.value] = counts.get(s.state.value, 0) + 1
        return counts

    def flush(self) -> None:
        """At shutdown: the records the engine holds back (completed resizes, written by its node-wide
        pass otherwise) and the contested drift records."""
        with self._lock:
            if not self.observe_only:
                self.engine.flush()
        self._flush_drift()

    def _flush_drift(self) -> None:
        """The contested drift records (few), after each pass and at shutdown, when they changed."""
        if self.gate is not None and self._drift_store is not None and not self.observe_only:
            with self.gate.lock:
                contested = self.gate.drift.contested()
            self._drift_store.save(contested)

    def _pass(self, scope: str, full: bool) -> Report:
        """One pass. What the gate said is dropped before returning: a node-wide pass's gated diff
        holds every file of the node, and freeing it is that pass's cost, not the next pod event's."""
        self._gated.clear()
        try:
            return self._gated_pass(scope, full)
        finally:
            self._gated.clear()

    def _gated_pass(self, scope: str, full: bool) -> Report:
        if self.observe_only:
            result = self.engine.dry_run()
        else:
            try:
                result = self.engine.reconcile(full=full)
            except CheckpointError as err:  # nothing is actuated on a state that is not on disk
                return Report(scope, Outcome.FAILED, errors=(("CheckpointError", err.user_message()),), retry_after_s=2.0)
            if full:
                self._last_full = self.clock()
            if self.gate is not None:  # what reached the file: a tier set at usage holds the usage
                clamped = {sf.path: str(sf.set_to) for sf in result.shortfalls}
                pairs = [(p, clamped.get(p, v)) for o in result.steps if o.ok for p, v in written(o.step)]
                self.gate.wrote(pairs, self.clock())
        report = self._report(scope, result)
        self._flush_drift()
        if self._gated:  # a held value is looked at again in the next node-wide pass (each resync)
            report = replace(
                report,
                drift=tuple(n for g in self._gated for n in g.notes),
                warnings=(*report.warnings, *(w for g in self._gated for w in g.warnings)),
            )
        return report

    def _report(self, scope: str, result: PassReport) -> Report:
        changed: list[str] = []
        for done in result.steps:
            step = done.step
            if not done.ok:
                continue
            if isinstance(step, CgroupStep):
                changed.append(step.path)
            elif isinstance(step, ContainerStep):
                changed.extend(c.setting.path for c in step.changes)
        failed = [o for o in result.steps if not o.ok]
        errors = tuple((o.error_type or "Error", o.error or "failed") for o in failed)
        errors += tuple(("Blocked", p.message) for p in result.errors if not failed)
        statuses: list[ResizeStatus] = []
        events: list[PodEventNote] = []
        for status in result.statuses:
            previous = self._last.get(status.uid)
            if previous is not None and (previous.state, previous.reason, previous.message) == (
                status.state,
                status.reason,
                status.message,
            ):
                continue
            self._last[status.uid] = status
            statuses.append(status)
            admitted = previous is None or previous.allocated != status.allocated
            skipped_in_progress = previous is None or previous.state is not ResizeState.IN_PROGRESS
            if admitted and skipped_in_progress and status.state in (ResizeState.DONE, ResizeState.ERROR):
                # admitted and actuated in one pass: the engine never showed InProgress in between
                events.append(
                    PodEventNote("ResizeAccepted", "the new resources are admitted", uid=status.uid)
                )
            note = event_for(status, previous)
            if note is not None:
                events.append(note)
        if self.observe_only:
            observed = Outcome.DEFERRED if result.steps else Outcome.CONVERGED
            drift = tuple(f"observe-only: would {describe(s.step)}" for s in result.steps)
            return Report(scope, observed, warnings=drift, statuses=tuple(statuses), events=tuple(events))
        return Report(
            scope,
            Outcome.FAILED if failed else (Outcome.APPLIED if result.writes else Outcome.CONVERGED),
            writes=result.writes,
            changed=tuple(changed),
            errors=errors,
            warnings=tuple(w.message for w in result.warnings),
            statuses=tuple(statuses),
            events=tuple(events),
            retry_after_s=_retry(failed != [], result.statuses, self.engine.lingering > 0),
            shortfalls=tuple(result.shortfalls),
        )


def _retry(failed: bool, statuses: Sequence[ResizeStatus], lingering: bool = False) -> float | None:
    """When to look again: the engine keeps its own backoff (an early pass is a no-op for a pod that is
    not due), so these only bound how long a pending resize waits for the next pass. A terminal pod's
    cgroup goes away without an event: while one is still counted, look again soon."""
    if failed or lingering:
        return 2.0
    if any(s.state in (ResizeState.IN_PROGRESS, ResizeState.ERROR) for s in statuses):
        return 5.0
    return None
