"""The first `Reconciler`: the existing pipeline (compute -> diff -> plan) and executor, one pod at a time.

Why per pod: the daemon reconciles the pod an event is about, not the whole node; the QoS tiers are
their own work item, since they depend on every pod. A pod pass computes that pod alone, diffs its pod
and container cgroups, keeps only the differences the agent owns and is not holding back for drift,
plans, and runs the steps one at a time so that a stopping daemon ends after the current step; the
plan's order keeps every intermediate state valid, so the next start finishes from wherever it stopped.

Resize state: a pass is a resize when the pod's computed values differ from those it last converged to,
when it carried an unfinished resize (also from the checkpoint, after a restart), or when a pod seen
for the first time needs container updates. Only resizes are reported (Events and the condition).

Tiers follow the kubelet's QoS manager: the memory limits qos-reserved asks for are written as they
are, letting the kernel reclaim; when the kernel refuses (usage above the new limit), the limit is set
to the current usage instead (the kubelet's retrySetMemoryReserve) and tried again on the next pass.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent import pipeline
from agent.apply import ensure_tiers
from agent.compute import NodeComputation, PodComputation
from agent.compute.node import TERMINAL_PHASES
from agent.compute.tiers import NO_SUMS, RunningTierSums, TierSums, compute_tiers_from_sums, tier_contribution
from agent.daemon import checkpoint
from agent.daemon.drift import DriftTracker
from agent.daemon.gate import Gate, Gated, written
from agent.daemon.ownership import Ownership
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
from agent.diff import DesiredFile, NodeDiff, desired_files, diff, not_yet_created
from agent.diff import Owner as FileOwner
from agent.execute import CgroupStepRunner, ContainerUpdater, Shortfall, execute, file_runner
from agent.model import PodUID, PodView
from agent.plan import CgroupStep, ContainerStep, Plan, build_plan, usage_paths
from agent.queue import Backoff
from agent.settings import Settings
from cgroupfs import layout
from cgroupfs.types import DriverKind

RunnerFactory = Callable[[NodeComputation], CgroupStepRunner]
"""How a pass's cgroup steps reach the kernel: plain file writes, or (systemd driver) unit properties
first, which need the pass's desired values."""

ACTIVE = frozenset({ResizeState.PROPOSED, ResizeState.IN_PROGRESS, ResizeState.DEFERRED, ResizeState.ERROR})
_USAGE_FILES = frozenset({layout.MEMORY_USAGE_V1, layout.MEMORY_CURRENT})
_LINGER_S = 2.0
_BENIGN = frozenset({"CgroupNotFound", "ContainerNotFound"})


def signature(comp: PodComputation) -> str:
    """The pod's computed values (not container IDs): a change is a resize."""
    values = (comp.values, tuple((c.container.name, c.values) for c in comp.containers))
    return hashlib.sha256(repr(values).encode()).hexdigest()[:16]


@dataclass(slots=True)
class _PodRecord:
    key: str
    signature: str | None = None  # the values last converged to
    status: ResizeStatus | None = None
    invalid: str | None = None  # the last compute error reported
    # the view and values of the last pass that left the pod converged (a resync compares the files)
    view: PodView | None = None
    wanted: tuple[DesiredFile, ...] = ()  # its pod and container files, as that pass computed them
    passed: tuple[DesiredFile, ...] = ()  # those of the pass now running


@dataclass(slots=True)
class _Run:
    writes: int = 0
    changed: tuple[str, ...] = ()
    failed: tuple[str, str] | None = None  # (error class, message)
    interrupted: bool = False
    shortfalls: tuple[Shortfall, ...] = ()


class PipelineReconciler:
    def __init__(
        self,
        settings: Settings,
        env: pipeline.Environment,
        ownership: Ownership,
        cri: ContainerUpdater | None,
        runner_for: RunnerFactory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.env = env
        self.cfg = settings.compute_config(env.hugepage_sizes)
        self.ownership = ownership
        self.cri = cri
        files = env.files
        self.runner_for: RunnerFactory = runner_for or (lambda computation: file_runner(files))
        self.clock = clock
        self.drift = DriftTracker(settings.drift_max_reverts, settings.drift_backoff_s)
        self._lock = threading.RLock()
        self.gate = Gate(ownership, self.drift, settings.cgroup_driver is DriverKind.SYSTEMD, self._lock)
        self.backoff = Backoff(base=0.5, cap=60.0)
        self._pods: dict[str, _PodRecord] = {}
        self._sums = RunningTierSums()  # per-pod tier contributions, keyed by the PodView they came from
        self._tier_lock = threading.Lock()  # held by a pass from computing the tiers to its last step
        self.lingering = 0  # terminal pods still counted in the tiers (their cgroup is not gone yet)
        self.load_warning = self._restore()

    # -- checkpoint -------------------------------------------------------------------------------

    def _restore(self) -> str | None:
        payload, warning = checkpoint.load(self.settings.state_dir)
        pods = payload.get("pods", {})
        for uid, raw in pods.items() if isinstance(pods, dict) else ():
            try:
                status = None
                if raw.get("state"):
                    status = ResizeStatus(
                        PodUID(str(uid)),
                        str(raw["key"]),
                        ResizeState(raw["state"]),
                        str(raw["reason"]),
                        str(raw["message"]),
                    )
                self._pods[str(uid)] = _PodRecord(str(raw["key"]), raw.get("signature"), status)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
        drift = payload.get("drift", {})
        if isinstance(drift, dict):
            self.drift.restore(drift)
        return warning

    def flush(self) -> None:
        with self._lock:
            payload: dict[str, Any] = {
                "pods": {
                    uid: {
                        "key": r.key,
                        "signature": r.signature,
                        "state": r.status.state.value if r.status else None,
                        "reason": r.status.reason if r.status else None,
                        "message": r.status.message if r.status else None,
                    }
                    for uid, r in self._pods.items()
                },
                "drift": self.drift.snapshot(),
            }
        checkpoint.save(self.settings.state_dir, payload)

    # -- the protocol -------------------------------------------------------------------------------

    def status(self, uid: PodUID) -> ResizeStatus | None:
        with self._lock:
            rec = self._pods.get(uid)
            return rec.status if rec else None

    def states(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        with self._lock:
            for rec in self._pods.values():
                if rec.status is not None:
                    counts[rec.status.state.value] = counts.get(rec.status.state.value, 0) + 1
        return counts

    def start(self, pods: Sequence[PodView]) -> list[str]:
        return [self.load_warning] if self.load_warning else []

    def forget_pod(self, uid: PodUID) -> None:
        with self._lock:
            self._pods.pop(uid, None)
            self._sums.drop(uid)
            self.drift.forget_under(f"pod{uid}")
            self.drift.forget_under(f"pod{uid.replace('-', '_')}")
        self.backoff.forget(uid)

    def reconcile_pod(self, pod: PodView, stop: StopRequested) -> Report:
        with self._lock:
            rec = self._pods.setdefault(pod.uid, _PodRecord(pod.key))
        comp = compute_or_note(pod, self.cfg)
        part = self._share(comp)
        self._account(pod, part, settled=False)  # protective until the pod's values are in place
        if isinstance(comp, tuple):
            reason, message = comp
            events = () if rec.invalid == message else (PodEventNote(reason, message, True),)
            rec.invalid = message
            return Report("pod", Outcome.INVALID, errors=((reason, message),), events=events)
        rec.invalid = None
        with self._tier_lock:  # the tiers' one writer at a time, as the kubelet's QoS manager lock
            report = self._reconcile_pod(pod, comp, rec, stop, part)
        if report.outcome in (Outcome.APPLIED, Outcome.CONVERGED):
            self._account(pod, part, settled=True)
            with self._lock:
                rec.view, rec.wanted = pod, rec.passed
        else:
            with self._lock:
                rec.view, rec.wanted = None, ()
        return report

    def stale(self, pods: Sequence[PodView]) -> set[str]:
        """One read of the node's pod and container files instead of a pass per pod: only pods changed
        or unsettled since their last pass, or whose files differ now (drift), get a pass."""
        out: set[str] = set()
        wanted: list[DesiredFile] = []
        with self._lock:
            for pod in pods:
                if pod.phase in TERMINAL_PHASES:
                    continue
                rec = self._pods.get(pod.uid)
                if (
                    rec is None
                    or rec.view is not pod
                    or not rec.wanted
                    or (rec.status is not None and rec.status.state in ACTIVE)
                ):
                    out.add(pod.uid)
                else:
                    wanted.extend(rec.wanted)
        if wanted:
            empty = NodeComputation((), (), (), ())
            for f in diff(empty, wanted, pipeline.observe(self.env, tuple(wanted))).files:
                if (f.differs or not f.dir_exists) and f.desired.pod_uid is not None:
                    out.add(f.desired.pod_uid)
        return out

    def _reconcile_pod(
        self, pod: PodView, comp: PodComputation, rec: _PodRecord, stop: StopRequested, part: TierSums
    ) -> Report:
        """The pod's cgroups and containers, and the QoS tiers its change moves, in one plan: the tiers
        are computed with the pod's new share (the plan orders the tier steps around the pod's)."""
        sig = signature(comp)
        with self._lock:
            sums = self._sums.total - (self._sums.part(pod.uid) or NO_SUMS) + part
        node = NodeComputation((comp,), compute_tiers_from_sums(sums, self.cfg), (), ())
        env = self.env
        wanted = desired_files(node, env.hierarchy, env.render_options, env.container_render_options, True)
        rec.passed = tuple(f for f in wanted if f.owner is not FileOwner.TIER)
        full_diff = diff(node, wanted, pipeline.observe(env, wanted))
        # tiers not created yet are the tiers item's business (it reports them)
        present = tuple(f for f in full_diff.files if f.desired.owner is not FileOwner.TIER or f.dir_exists)
        node_diff, waiting = not_yet_created(replace(full_diff, files=present))
        if waiting:
            return Report("pod", Outcome.WAITING, retry_after_s=self.backoff.next(pod.uid))

        first_sight = rec.signature is None
        changed_values = rec.signature is not None and rec.signature != sig
        active = rec.status is not None and rec.status.state in ACTIVE
        infeasible = self._infeasible(comp) if (changed_values or active) else None
        if infeasible is not None:
            return self._transition(
                rec,
                pod.uid,
                Report("pod", Outcome.INVALID, errors=(("Infeasible", infeasible),)),
                ResizeState.INFEASIBLE,
                "ExceedsNodeAllocatable",
                infeasible,
            )

        filtered = self._filter(node_diff, pod_level_limits=pod.pod_limits is not None)
        extra = {p: env.files.read(p) for p in usage_paths(filtered.node)}
        plan = build_plan(filtered.node, extra, include_containers=self.cri is not None)
        runner = self.runner_for(node)
        container_steps = [s for s in plan.steps if isinstance(s, ContainerStep)]
        resize = changed_values or active or (first_sight and bool(container_steps))
        blocked = "; ".join(p.message for p in plan.errors)
        base = Report(
            "pod",
            Outcome.CONVERGED,
            warnings=(*filtered.warnings, *(p.message for p in plan.warnings)),
            drift=filtered.notes,
            errors=tuple(("MemoryBelowUsage", p.message) for p in plan.errors),
        )

        if not plan.steps:
            if blocked or filtered.hold_s is not None:
                retry = filtered.hold_s if not blocked else self.backoff.next(pod.uid)
                report = replace(base, outcome=Outcome.DEFERRED, retry_after_s=retry)
                if blocked and resize:
                    return self._transition(
                        rec, pod.uid, report, ResizeState.DEFERRED, "MemoryBelowUsage", blocked
                    )
                return report
            rec.signature = sig
            self.backoff.forget(pod.uid)
            if resize:
                return self._transition(
                    rec,
                    pod.uid,
                    base,
                    ResizeState.DONE,
                    "Applied",
                    "the pod's cgroups and containers hold the new values",
                )
            return base

        if resize and (rec.status is None or rec.status.state is not ResizeState.IN_PROGRESS):
            base = self._transition(rec, pod.uid, base, ResizeState.IN_PROGRESS, "Applying", _describe(plan))
            self.flush()  # a stop or crash from here on is completed by the next start
        run = self._run(plan, runner, stop)
        report = replace(base, writes=run.writes, changed=run.changed, shortfalls=run.shortfalls)
        if run.interrupted:
            return replace(report, outcome=Outcome.INTERRUPTED)
        if run.failed is not None:
            cls, message = run.failed
            report = replace(
                report,
                outcome=Outcome.FAILED,
                errors=(*report.errors, run.failed),
                retry_after_s=self.backoff.next(pod.uid),
            )
            if cls in _BENIGN or not resize:
                return report
            return self._transition(rec, pod.uid, report, ResizeState.ERROR, cls, message)
        if blocked:
            report = replace(report, outcome=Outcome.DEFERRED, retry_after_s=self.backoff.next(pod.uid))
            if resize:
                return self._transition(
                    rec, pod.uid, report, ResizeState.DEFERRED, "MemoryBelowUsage", blocked
                )
            return report
        rec.signature = sig
        self.backoff.forget(pod.uid)
        report = replace(report, outcome=Outcome.APPLIED)
        if filtered.hold_s is not None:
            report = replace(report, retry_after_s=filtered.hold_s)
        if resize:
            done = f"applied {len(plan.steps)} step(s): {_describe(plan)}"
            return self._transition(rec, pod.uid, report, ResizeState.DONE, "Applied", done)
        return report

    def reconcile_tiers(self, pods: Sequence[PodView], stop: StopRequested) -> Report:
        with self._tier_lock:
            return self._reconcile_tiers(pods, stop)

    def _reconcile_tiers(self, pods: Sequence[PodView], stop: StopRequested) -> Report:
        env = self.env
        if self.settings.create_qos_cgroups:
            ensure_tiers(env)
        node = NodeComputation((), compute_tiers_from_sums(self._tier_sums(pods), self.cfg), (), ())
        wanted = desired_files(node, env.hierarchy, env.render_options, env.container_render_options, False)
        node_diff = diff(node, wanted, pipeline.observe(env, wanted))
        missing = sorted({f.setting.directory for f in node_diff.files if not f.dir_exists})
        present = tuple(f for f in node_diff.files if f.dir_exists)
        node_diff = NodeDiff(present, node_diff.warnings, node_diff.errors, node_diff.computation)
        filtered = self._filter(node_diff, pod_level_limits=False)
        # no usage files: a tier's limit is written as asked and the kernel reclaims (or refuses: the
        # executor sets it at the usage); memory+swap still orders the v1 writes
        extra = {
            p: env.files.read(p)
            for p in usage_paths(filtered.node)
            if p.rsplit("/", 1)[-1] not in _USAGE_FILES
        }
        plan = build_plan(filtered.node, extra, include_containers=False)
        run = self._run(plan, self.runner_for(node), stop)
        warnings = (*filtered.warnings, *(p.message for p in plan.warnings))
        if missing:
            warnings += (f"QoS tier cgroup(s) {', '.join(missing)} do not exist (yet)",)
        report = Report(
            "tiers",
            Outcome.APPLIED if run.writes else Outcome.CONVERGED,
            run.writes,
            run.changed,
            errors=tuple(("PlanRefused", p.message) for p in plan.errors),
            warnings=warnings,
            drift=filtered.notes,
            retry_after_s=filtered.hold_s,
            shortfalls=run.shortfalls,
        )
        if run.interrupted:
            return replace(report, outcome=Outcome.INTERRUPTED)
        if run.failed is not None:
            return replace(
                report,
                outcome=Outcome.FAILED,
                errors=(*report.errors, run.failed),
                retry_after_s=self.backoff.next("tiers"),
            )
        if missing:
            return replace(report, outcome=Outcome.WAITING, retry_after_s=self.backoff.next("tiers"))
        self.backoff.forget("tiers")
        if self.lingering:  # a terminal pod's cgroup goes without an event: look again soon
            report = replace(report, retry_after_s=min(report.retry_after_s or _LINGER_S, _LINGER_S))
        return report

    # -- helpers ----------------------------------------------------------------------------------

    @staticmethod
    def _share(comp: PodComputation | tuple[str, str]) -> TierSums:
        """The pod's share of the tier sums (none when it cannot be computed)."""
        return NO_SUMS if isinstance(comp, tuple) else tier_contribution(comp)

    def _account(self, pod: PodView, part: TierSums, *, settled: bool) -> None:
        """Record the pod's share. Until its values are in place (`settled`), the share is the larger of
        the old and the new one: the lower tiers shrink for a growth at once, grow back after a shrink."""
        with self._lock:
            old = self._sums.part(pod.uid)
            self._sums.put(pod.uid, pod, part if settled or old is None else old.most(part))

    def _tier_sums(self, pods: Sequence[PodView]) -> TierSums:
        """The running totals, brought up to `pods`: only a pod whose PodView is not the one its share
        was computed from (a pod pass not run yet, or run concurrently) is computed again; pods not in
        the list leave the totals. An identity check per pod, no computation, for the rest.

        A pod in a terminal phase counts, as the kubelet counts it, until it is known to be gone: while
        its pod cgroup still exists (the kubelet removes it once the pod is torn down)."""
        with self._lock:
            sums = self._sums
            listed: list[str] = []
            self.lingering = 0
            for pod in pods:
                if pod.phase in TERMINAL_PHASES:
                    if sums.token(pod.uid) is None or not self._cgroup_exists(pod):
                        continue  # gone (or never counted): out of the totals
                    self.lingering += 1
                listed.append(pod.uid)
                if sums.token(pod.uid) is not pod and pod.phase not in TERMINAL_PHASES:
                    self._account(pod, self._share(compute_or_note(pod, self.cfg)), settled=False)
            if len(sums) > len(listed):
                sums.keep_only(listed)
            return sums.total

    def _cgroup_exists(self, pod: PodView) -> bool:
        comp = compute_or_note(pod, self.cfg)
        directory = None if isinstance(comp, tuple) else self.env.cgroup_dir(comp.cgroup)
        return directory is not None and self.env.files.exists(directory)

    def _transition(
        self, rec: _PodRecord, uid: PodUID, report: Report, state: ResizeState, reason: str, message: str
    ) -> Report:
        """Record a new resize state; the Event and the condition only when something changed."""
        status = ResizeStatus(uid, rec.key, state, reason, message)
        with self._lock:
            previous = rec.status
            rec.status = status
        if previous is not None and (previous.state, previous.reason, previous.message) == (
            state,
            reason,
            message,
        ):
            return report
        note = event_for(status, previous)
        events = (*report.events, note) if note is not None else report.events
        return replace(report, statuses=(*report.statuses, status), events=events)

    def _infeasible(self, comp: PodComputation) -> str | None:
        alloc = self.cfg.allocatable
        if alloc is None:
            return None
        req = comp.requests
        if alloc.cpu_milli is not None and (req.cpu_milli or 0) > alloc.cpu_milli:
            return (
                f"the pod requests {req.cpu_milli}m CPU, more than the node's allocatable {alloc.cpu_milli}m"
            )
        if alloc.memory is not None and (req.memory or 0) > alloc.memory:
            return f"the pod requests {req.memory} bytes of memory, more than the node's allocatable {alloc.memory}"
        return None

    def _filter(self, node: NodeDiff, pod_level_limits: bool) -> Gated:
        """Keep the differences the agent owns and is not holding back (drift backoff, yielded)."""
        return self.gate.filter(node, self.clock())

    def _run(self, plan: Plan, runner: CgroupStepRunner, stop: StopRequested) -> _Run:
        """The steps one at a time: stop after the current one when asked, stop at the first failure. A
        tier limit the kernel would not lower is set at the usage by the executor (a shortfall)."""
        run = _Run()
        changed: list[str] = []
        for step in plan.steps:
            if stop():
                run.interrupted = True
                break
            done = execute([step], runner, self.cri)
            run.writes += done.writes
            failed = done.failed
            if failed is not None:
                run.failed = (failed.error_type or "Error", failed.error or "failed")
                break
            clamped = {sf.path: str(sf.set_to) for sf in done.shortfalls}
            pairs = [(p, clamped.get(p, value)) for p, value in written(step)]
            run.shortfalls += tuple(done.shortfalls)
            self.gate.wrote(pairs, self.clock())
            changed.extend(p for p, _ in pairs)
        run.changed = tuple(changed)
        return run


def _describe(plan: Plan) -> str:
    containers = sorted({f"{s.container} {s.resource}" for s in plan.steps if isinstance(s, ContainerStep)})
    cgroups = sum(1 for s in plan.steps if isinstance(s, CgroupStep) and s.owner is not FileOwner.TIER)
    tiers = sum(1 for s in plan.steps if isinstance(s, CgroupStep) and s.owner is FileOwner.TIER)
    parts = []
    if containers:
        parts.append("containers " + ", ".join(containers))
    if cgroups:
        parts.append(f"{cgroups} pod cgroup write(s)")
    if tiers:
        parts.append(f"{tiers} QoS tier write(s)")
    return "; ".join(parts) or "no changes"
