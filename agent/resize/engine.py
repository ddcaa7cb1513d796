"""The resize engine: the imperative shell around the pure resize core.

    engine = ResizeEngine(settings, env, cri)      # env: pipeline.Environment; cri: CRIClient or None
    engine.start(pods)                             # checkpoint (or rebuild from the kernel), then pods
    engine.observe(pods) / update(pod) / remove(uid)   # pod updates, in the order they arrive
    report = engine.reconcile()                    # admit, checkpoint, actuate (one pod at a time)
    engine.status(uid) -> ResizeStatus | None      # for the daemon's status reporting
    engine.dry_run() -> PassReport                 # what reconcile would do, nothing written

One pass: queued resizes are admitted in arrival order and every accepted allocation is checkpointed
*before* anything is written; then each admitted pod is actuated on its own — its pod and container
cgroups plus the QoS tiers, every other pod frozen at its current values so the invariant check still
sees it — and the tree is read back after each pod; last, a node-wide pass converges everything else
(drift, pods whose resize is pending at their old allocation). Actual values are always what the
kernel shows, never the runtime's ContainerStatus (containerd echoes its stored spec).

RestartContainer on a bare node (no kubelet): the engine stops the container through CRI and waits for
it to come back with a new container ID; nothing restarts it, so the resize stays InProgress with reason
WaitingForRestart until something starts the container again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from agent.config.settings import Settings
from agent.core.compute import NodeComputation, PodComputation, PodComputeError, compute_pod
from agent.core.compute.node import TERMINAL_PHASES
from agent.core.compute.tiers import NO_SUMS, RunningTierSums, compute_tiers_from_sums, tier_contribution
from agent.core.diff import (
    DesiredFile,
    FilesCache,
    NodeDiff,
    Observation,
    desired_files,
    diff,
    not_yet_created,
    paths_to_read,
)
from agent.core.model import PodUID, PodView, Problem
from agent.core.plan import (
    Plan,
    RestartStep,
    build_plan,
    usage_paths,
    without_tier_memory_growth,
)
from agent.pipeline import Environment
from agent.pipeline.execute import (
    CgroupStepRunner,
    ContainerUpdater,
    Execution,
    StepOutcome,
    describe,
    execute,
    file_runner,
)
from agent.resize import state as sm
from agent.resize.admission import Admit, NodeCapacity, admit, admit_after_kubelet
from agent.resize.allocation import with_allocation
from agent.resize.checkpoint import CheckpointError
from agent.resize.outcome import read_back_outcome, waiting_outcome
from agent.resize.readback import rebuild_records
from agent.resize.report import PassReport, PodPass
from agent.resize.scope import restarts_for, restrict
from agent.resize.snapshot import Computed, Reader, Simulated, Snapshot, compute_allocated, merged
from agent.resize.store import PodStore, RecordsNotSaved
from agent.resize.types import ResizeState, ResizeStatus

DEFAULT_TIMING = sm.Timing()


__all__ = ["PassReport", "ResizeEngine", "dry_run", "is_settled"]

class ResizeEngine:
    def __init__(
        self,
        settings: Settings,
        env: Environment,
        runtime: ContainerUpdater | None,
        *,
        store: PodStore | None = None,
        cgroup: CgroupStepRunner | None = None,
        clock: Callable[[], float] = time.monotonic,
        timing: sm.Timing = DEFAULT_TIMING,
        node_filter: Callable[[NodeDiff], NodeDiff] | None = None,
        owned: Callable[[NodeDiff], NodeDiff] | None = None,
        runner_for: Callable[[NodeComputation], CgroupStepRunner] | None = None,
        kubelet_admits: bool = False,
        to_read: Callable[[Sequence[DesiredFile], NodeComputation], list[DesiredFile]] | None = None,
    ) -> None:
        # `node_filter`: what of the node-wide pass may be written now (the daemon's drift backoff); a
        # pod's own resize is never held back by it. `owned`: the differences the agent owns, applied to
        # every snapshot (a kubelet-owned value is observed, never written, in a pod's own resize too).
        self.node_filter = node_filter
        self.owned = owned
        # `runner_for`: a pass's cgroup steps through a runner that needs the pass's desired values (the
        # systemd driver sets unit properties first); otherwise `cgroup` for every pass
        self.runner_for = runner_for
        # `to_read`: the desired files worth reading and diffing (not what the kubelet owns)
        self.to_read = to_read
        # `kubelet_admits`: the kubelet resizes containers here; the agent follows its allocation
        self.admit: Admit = admit_after_kubelet if kubelet_admits else admit
        self.settings = settings
        self.env = env
        self.runtime = runtime
        self.store = store or PodStore(settings.state_dir)
        self.cgroup = cgroup or file_runner(env.files)
        self.clock = clock
        self.timing = timing
        self.capacity = NodeCapacity(settings.allocatable, settings.cpu_manager_policy)
        self._state = sm.EngineState()
        self._pods: dict[PodUID, PodView] = {}
        self._saved_records: object = None  # the records mapping last saved (immutable: identity = unchanged)
        self._unsaved = False  # a save failed: the next pass saves before any step
        # Kept between passes so a pass costs O(the pods it acts on): each pod's computation at its
        # allocated values, its share of the tier sums and of the allocated requests (admission).
        self._cfg = settings.compute_config(env.hugepage_sizes)
        self._comps: dict[PodUID, Computed] = {}
        self._sums = RunningTierSums()
        self._used = (0, 0)
        self._terminal: set[PodUID] = set()  # pods in a terminal phase (few): checked for their cgroup
        self._lingering: set[PodUID] = set()  # terminal pods whose cgroup is still there: they count
        self._stale: set[PodUID] = set()  # pod or allocation changed since computed
        self._dirty: set[PodUID] = set()  # to converge in the next pass (changed, or not converged yet)
        self._files: FilesCache = {}  # each pod's rendered files, while its computation is unchanged
        # Indexes that keep a pod event O(what changed): the pods whose record may differ from the one
        # last saved, the pods with a resize state or a restart (the few a pass looks at; every other
        # record is a pod never resized), and each pod's place in the node's order.
        self._touched: set[PodUID] = set()
        self._active: set[PodUID] = set()
        self._order: dict[PodUID, int] = {}
        self._next = 0

    # ---- pods in ----

    def start(self, pods: Sequence[PodView], *, persist: bool = True) -> list[Problem]:
        """Load the checkpoint (or rebuild it from the kernel), admit every existing pod at its allocated
        values, and only then queue the pods' pending resizes. Returns the warnings for the log.
        With `persist` off (dry runs) nothing is written, not even a rebuilt checkpoint."""
        problems: list[Problem] = []
        loaded = self.store.load(persist=persist)
        if loaded.migrated is not None:
            problems.append(Problem(None, f"the resize checkpoint was migrated to {self.store.path} (one record per pod); the old file is {loaded.migrated}"))
        damaged = {d.uid for d in loaded.damaged}
        for d in loaded.damaged:
            where = f"; moved to {d.moved_to}" if d.moved_to else ""
            problems.append(Problem(None, f"{d.reason}{where}; that pod's allocated state is rebuilt from the kernel"))
        if not loaded.found:
            if not loaded.damaged:
                problems.append(
                    Problem(None, f"no resize state at {self.store.path}: allocated state rebuilt from the kernel")
                )
            records = rebuild_records(self.settings, self.env, pods)
        else:
            records = [*loaded.records, *rebuild_records(self.settings, self.env, [p for p in pods if p.uid in damaged])]
        self._set(sm.restore(records))
        self._stale.update(self._comps)
        self._pods = {}
        self._order = {}
        self._terminal.clear()
        self.observe(pods)
        if persist:
            self._save(full=True)
        return problems

    def observe(self, pods: Sequence[PodView]) -> None:
        """The node's full pod list (a resync): departed pods leave, the others arrive in list order.
        A pod whose view is the very object already held is unchanged and costs nothing more."""
        present = {p.uid for p in pods}
        for uid in [u for u in (*self._pods, *self._state.records) if u not in present]:
            self.remove(uid)
        for pod in pods:
            if self._pods.get(pod.uid) is not pod:
                self.update(pod)

    def update(self, pod: PodView) -> None:
        """One pod update (a watch event), in arrival order."""
        if self._pods.get(pod.uid) is not pod:
            self._stale.add(pod.uid)
            self._dirty.add(pod.uid)
        if pod.uid not in self._order:
            self._order[pod.uid] = self._next
            self._next += 1
        self._pods[pod.uid] = pod
        if pod.phase in TERMINAL_PHASES:
            self._terminal.add(pod.uid)
        else:
            self._terminal.discard(pod.uid)
        self._set(sm.observe_pod(self._state, pod), (pod.uid,))

    def remove(self, uid: PodUID) -> None:
        self._pods.pop(uid, None)
        self._order.pop(uid, None)
        self._files.pop(uid, None)
        self._terminal.discard(uid)
        self._set(sm.remove_pod(self._state, uid), (uid,))
        self._stale.add(uid)
        self._dirty.discard(uid)

    # ---- state out ----

    def status(self, uid: PodUID) -> ResizeStatus | None:
        rec = self._state.records.get(uid)
        return rec.status() if rec is not None else None

    def statuses(self) -> tuple[ResizeStatus, ...]:
        records = self._state.records
        out = [records[u].status() for u in self._active]
        return tuple(sorted((s for s in out if s is not None), key=lambda s: s.pod))

    def _set(self, state: sm.EngineState, uids: Collection[PodUID] | None = None) -> None:
        """The one way the state changes: `uids` are the pods whose records may have changed (None:
        any), kept in the indexes."""
        self._state = state
        records = state.records
        if uids is None:
            self._active = {u for u, r in records.items() if r.state is not None or r.restarted}
            self._touched.update(records)
            return
        self._touched.update(uids)
        for uid in uids:
            rec = records.get(uid)
            if rec is not None and (rec.state is not None or rec.restarted):
                self._active.add(uid)
            else:
                self._active.discard(uid)

    def _queue(self) -> list[sm.PodRecord]:
        """`sm.queue` over the active pods only (a queued record always has a state)."""
        return sm.queue(self._state, self._active)

    def effective_pods(self) -> tuple[PodView, ...]:
        """The node's pods at their allocated values: what every cgroup value is computed from."""
        out = []
        for uid, pod in self._pods.items():
            rec = self._state.records.get(uid)
            out.append(with_allocation(pod, rec.allocated) if rec is not None else pod)
        return tuple(out)

    # ---- one pass ----

    def reconcile(self, *, full: bool = True) -> PassReport:
        """One pass. `full`: every pod of the node (a resync: drift anywhere); otherwise only the pods
        that changed, are not converged yet or have a resize queued, plus the tiers (a pod event)."""
        files = self.env.files

        def run(plan: Plan, node: NodeDiff) -> Execution:
            cgroup = self.runner_for(node.computation) if self.runner_for is not None else self.cgroup
            return execute(plan, cgroup, self.runtime, on_step=self._on_step)

        return self._pass(files, run, include_containers=self.runtime is not None, save=True, full=full)

    def dry_run(self) -> PassReport:
        """The steps `reconcile` would run now, in order, assuming each succeeds; nothing is written and
        the engine's state is left as it was. Container steps are shown even without a runtime."""
        saved_state, dirty = self._state, set(self._dirty)
        active, touched = set(self._active), set(self._touched)
        sim = Simulated(self.env.files)
        try:
            return self._pass(sim, sim.run, include_containers=True, save=False, full=True)
        finally:
            self._state, self._dirty = saved_state, dirty
            self._active, self._touched = active, touched
            self._stale.update(self._pods)  # allocations may have moved during the dry run

    def _pass(
        self,
        reader: Reader,
        run: Callable[[Plan, NodeDiff], Execution],
        *,
        include_containers: bool,
        save: bool,
        full: bool = True,
    ) -> PassReport:
        report = PassReport()
        now = self.clock()
        lingering = {u for u in self._terminal if self._present(reader, self._pods[u])}
        self._stale |= lingering ^ self._lingering
        self._lingering = lingering
        self._refresh()
        queued = [r.uid for r in self._queue()]  # admission changes queued records only
        state, accepted = sm.admit_pending(
            self._state,
            self._pods,
            self.capacity,
            now,
            self.timing,
            used=self._used,
            decide=self.admit,
            queued=queued,
        )
        self._set(state, queued)
        report.accepted = accepted
        self._stale.update(accepted)
        unsaved: frozenset[str] = frozenset()
        if (accepted or self._unsaved) and save:
            # allocated state on disk before any step that depends on it (retried if it failed); a pod
            # whose record could not be written waits, the others go on
            unsaved = self._save_or_report(report, full=full)
        scope: set[PodUID] | None = None
        if not full:
            scope = {u for u in self._dirty if u in self._pods}
            scope.update(r.uid for r in self._queue() if r.uid in self._pods)
        snap = self.snapshot(reader, scope)
        report.warnings.extend(snap.node.warnings)
        report.errors.extend(snap.node.errors)
        handled: set[str] = set()
        for rec in self._queue():
            if not sm.due(rec, now) or rec.uid not in self._pods or rec.uid in unsaved:
                continue
            handled.add(rec.pod)
            wrote, after = self._drive(rec.uid, snap, reader, run, report, include_containers, save)
            if wrote:  # the pod's read-back serves the rest of the pass
                snap = merged(snap, after or self.snapshot(reader, {rec.uid}), rec.pod)
        skip = set(handled) | {r.pod for u in unsaved if (r := self._state.records.get(PodUID(u))) is not None}
        frozen: set[tuple[str, str]] = set()
        actuating = False  # an admitted allocation of a pod still here is not in its cgroups yet
        for uid in self._active:  # the others were never resized: neither backing off nor restarting
            rec = self._state.records[uid]
            if sm.backing_off(rec, now):
                skip.add(rec.pod)
            if rec.restarted:
                frozen |= {(rec.pod, c) for c in self._waiting_restarts(rec)}
            if rec.state in (ResizeState.IN_PROGRESS, ResizeState.ERROR) and rec.uid in self._pods:
                actuating = True
        node = restrict(snap.node, None, exclude=skip, frozen_containers=frozen)
        if actuating:
            node = without_tier_memory_growth(node)
        if self.node_filter is not None and save:
            node = self.node_filter(node)
        clamped = {sf.path for sf in report.shortfalls}  # set at usage in this pass: once is enough
        if clamped:
            node = replace(
                node,
                files=tuple(
                    replace(f, differs=False) if f.setting.path in clamped else f for f in node.files
                ),
            )
        plan = build_plan(
            node,
            snap.extra,
            include_containers=include_containers,
            reclaim_step_down=self.settings.memory_reclaim_step_down,
        )
        if plan.steps or plan.errors:
            execution = run(plan, node)
            report.passes.append(PodPass(None, plan, execution))
            failed = execution.failed
            if failed is not None:
                report.errors.append(
                    Problem(getattr(failed.step, "pod", None), f"{describe(failed.step)}: {failed.error}")
                )
        if save:
            self._save_or_report(report, full=full)
            if full:
                self._flush_or_report(report)
        # what the next event's pass must look at again: pods still waiting for their cgroup, or all
        # of this pass's pods when a step failed (the rest of the queue is in every pass anyway)
        failed_any = any(not o.ok for p in report.passes for o in p.execution.outcomes)
        if not failed_any:
            waiting = set(snap.waiting)
            self._dirty = {u for u in self._dirty if u in self._pods and self._pods[u].key in waiting}
        report.statuses = self.statuses()
        return report

    def _refresh(self) -> None:
        """Recompute the pods whose view or allocation changed, and their shares of the running totals."""
        records = self._state.records
        for uid in self._stale:
            old = self._comps.pop(uid, None)
            if old is not None and old.active:
                self._used = (self._used[0] - old.requests[0], self._used[1] - old.requests[1])
            pod, rec = self._pods.get(uid), records.get(uid)
            if pod is None or rec is None:
                self._sums.drop(uid)
                continue
            computed = compute_allocated(pod, rec.allocated, self._cfg, lingering=uid in self._lingering)
            self._comps[uid] = computed
            self._sums.put(uid, None, tier_contribution(computed.comp) if computed.comp else NO_SUMS)
            if computed.active:
                self._used = (self._used[0] + computed.requests[0], self._used[1] + computed.requests[1])
        self._stale.clear()

    def snapshot(self, reader: Reader, scope: Collection[PodUID] | None = None) -> Snapshot:
        """The tree read and diffed against the pods at their allocated values: every pod, or only
        those in `scope` (the tiers always, from the running totals)."""
        self._refresh()
        uids: Collection[PodUID] = (
            self._pods
            if scope is None
            else sorted((u for u in scope if u in self._pods), key=self._order.__getitem__)
        )
        comps: list[PodComputation] = []
        warnings: list[Problem] = []
        errors: list[Problem] = []
        for uid in uids:
            c = self._comps.get(uid)
            if c is None:
                continue
            if c.error is not None:
                errors.append(c.error)
            if c.comp is not None and c.actuate:
                comps.append(c.comp)
                warnings.extend(Problem(c.comp.pod.key, w) for w in c.comp.warnings)
        tiers = compute_tiers_from_sums(self._sums.total, self._cfg)
        comp = NodeComputation(tuple(comps), tiers, tuple(warnings), tuple(errors))
        wanted = desired_files(
            comp,
            self.env.hierarchy,
            self.env.render_options,
            self.env.container_render_options,
            True,
            cache=self._files,
        )
        if self.to_read is not None:
            wanted = tuple(self.to_read(wanted, comp))
        paths = paths_to_read(wanted)
        texts, dirs = reader.read_many(paths)
        node, waiting = not_yet_created(diff(comp, wanted, Observation(texts, dirs)))
        if self.owned is not None:
            node = self.owned(node)
        # memory usage only where a memory value is about to change (the plan's guard): a converged
        # resync reads no usage file
        extra_paths = usage_paths(node)
        extra, _ = reader.read_many(extra_paths) if extra_paths else ({}, {})
        return Snapshot(node, extra, waiting)

    # ---- driving one pod ----

    def _waiting_restarts(self, rec: sm.PodRecord) -> set[str]:
        """Containers stopped for RestartContainer that have not come back yet (same container ID)."""
        pod = self._pods.get(rec.uid)
        if pod is None:
            return set()
        out = set()
        for name, cid in rec.restarted.items():
            st = pod.status_of(name)
            if st is not None and st.container_id == cid:
                out.add(name)
        return out

    def _drive(
        self,
        uid: PodUID,
        snap: Snapshot,
        reader: Reader,
        run: Callable[[Plan, NodeDiff], Execution],
        report: PassReport,
        include_containers: bool,
        save: bool,
    ) -> tuple[bool, Snapshot | None]:
        """Actuate one admitted pod; returns whether anything was written, and the pod's snapshot read
        back after the writes (None when it was not read back)."""
        rec = self._state.records[uid]
        pod = self._pods[uid]
        if rec.pod in snap.waiting:
            self._outcome(
                uid, sm.Outcome(reason="WaitingForPodCgroup", message="the pod's cgroup does not exist yet")
            )
            return False, None
        waiting = self._waiting_restarts(rec)
        frozen = {(rec.pod, c) for c in waiting}
        # the tiers shrink before this pod's values grow; they grow back only in the node-wide pass,
        # once no admitted change is still being actuated
        node = without_tier_memory_growth(restrict(snap.node, {rec.pod}, frozen_containers=frozen))
        restarts = restarts_for(node, pod, rec.restarted) if include_containers else set()
        plan = build_plan(
            node,
            snap.extra,
            include_containers=include_containers,
            restarts=restarts,
            reclaim_step_down=self.settings.memory_reclaim_step_down,
        )
        execution = run(plan, node) if plan.steps else Execution()
        report.passes.append(PodPass(rec.pod, plan, execution))
        if plan.refused is not None:
            if waiting:
                self._outcome(uid, waiting_outcome(waiting))
            else:
                self._outcome(uid, sm.Outcome(failed=True, reason="PlanRefused", message=plan.refused))
            return False, None
        failed = execution.failed
        if failed is not None:
            message = f"{describe(failed.step)}: {failed.error}"
            self._outcome(uid, sm.Outcome(failed=True, reason="StepFailed", message=message))
            report.errors.append(Problem(rec.pod, message))
            return execution.writes > 0, None
        # read back: the pod is done only when the kernel shows its allocated values
        after = self.snapshot(reader, {uid}) if execution.writes else snap
        rest = restrict(after.node, {rec.pod}, tiers=False, frozen_containers=frozen)
        remaining = [f for f in rest.changes if f.desired.pod == rec.pod]
        self._outcome(uid, read_back_outcome(plan, remaining, waiting | {c for _, c in restarts}, include_containers))
        return execution.writes > 0, after if execution.writes else None

    @property
    def lingering(self) -> int:
        """Terminal pods still counted in the tiers and admission (their pod cgroup is not gone yet)."""
        return len(self._lingering)

    def _present(self, reader: Reader, pod: PodView) -> bool:
        try:
            directory = self.env.cgroup_dir(compute_pod(pod, self._cfg).cgroup)
        except PodComputeError:
            return False
        return directory is not None and reader.exists(directory)

    def _outcome(self, uid: PodUID, outcome: sm.Outcome) -> None:
        self._set(sm.actuated(self._state, uid, outcome, self.clock(), self.timing), (uid,))

    def _on_step(self, outcome: StepOutcome) -> None:
        step = outcome.step
        if outcome.ok and isinstance(step, RestartStep):
            self._set(sm.mark_restarted(self._state, step.pod_uid, step.container, step.container_id), (step.pod_uid,))
            self._save()  # so a restart never repeats for the same allocation

    # ---- checkpoint ----

    def _save_or_report(self, report: PassReport, *, full: bool) -> frozenset[str]:
        """Save; the pods whose records could not be written are reported and returned (a failure of
        the directory itself raises: nothing may be actuated then)."""
        try:
            self._save(full=full)
        except RecordsNotSaved as err:
            report.errors.append(Problem(None, err.user_message()))
            return err.uids
        return frozenset()

    def flush(self) -> None:
        """Write the completed resizes' records the store holds back (see `agent.resize.store`): the
        node-wide pass does, and the daemon at shutdown."""
        self.store.flush()

    def _flush_or_report(self, report: PassReport) -> None:
        try:
            self.flush()
        except CheckpointError as err:  # the durable records still restart every pod correctly
            report.warnings.append(Problem(None, err.user_message()))

    def _save(self, *, full: bool = False) -> None:
        """Write the records that changed (the state is immutable: an unchanged pass keeps the very
        same mapping, so nothing is looked at); the store writes only the changed pods' records. A pod
        event hands the store the pods it touched; a resync (`full`) has every record looked at."""
        records = self._state.records
        if records is self._saved_records:
            return
        self._unsaved = True  # until it is on disk: no step may run on a state that is not
        touched, self._touched = self._touched, set()
        try:
            if full:
                self.store.save(records.values())
            else:
                self.store.save_changed(records, touched)
        except RecordsNotSaved as err:
            self._touched.update(PodUID(u) for u in err.uids)  # the others are on disk
            raise
        except BaseException:
            self._touched |= touched
            raise
        self._saved_records = records
        self._unsaved = False



def is_settled(status: ResizeStatus | None) -> bool:
    return status is None or status.state in (ResizeState.DONE, ResizeState.INFEASIBLE)


def dry_run(settings: Settings, env: Environment, pods: Sequence[PodView]) -> PassReport | None:
    """`plan` on a node whose resizes the agent manages (a checkpoint exists): what the engine would run
    now, from the checkpointed allocations; None when there is no checkpoint (the plain pipeline then
    shows the plan from the spec values)."""
    store = PodStore(settings.state_dir)
    if not store.exists():
        return None
    engine = ResizeEngine(settings, env, None, store=store)
    warnings = engine.start(pods, persist=False)
    report = engine.dry_run()
    report.warnings[:0] = warnings
    return report
