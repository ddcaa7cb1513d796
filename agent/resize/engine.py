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

The parts: the pods and their records (`book`), the node at its allocated values and a pass's read
(`tally`), the records on disk (`persist`), one pod's actuation (`actuate`), the node-wide pass
(`nodewide`); the engine holds them and runs a pass through them in that order.

RestartContainer on a bare node (no kubelet): the engine stops the container through CRI and waits for
it to come back with a new container ID; nothing restarts it, so the resize stays InProgress with reason
WaitingForRestart until something starts the container again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from functools import partial

from agent.config.settings import Settings
from agent.core.compute import NodeComputation
from agent.core.diff import NodeDiff
from agent.core.model import PodUID, PodView, Problem
from agent.core.plan import Plan, RestartStep
from agent.pipeline import Environment
from agent.pipeline.execute import (
    CgroupStepRunner,
    ContainerUpdater,
    Execution,
    StepOutcome,
    execute,
    file_runner,
)
from agent.resize import state as sm
from agent.resize.actuate import Run, drive
from agent.resize.admission import Admit, NodeCapacity, admit, admit_after_kubelet
from agent.resize.book import PodBook
from agent.resize.nodewide import converge, node_wide
from agent.resize.persist import Persister
from agent.resize.report import PassReport
from agent.resize.snapshot import Reader, Simulated, Snapshot, merged
from agent.resize.store import PodStore
from agent.resize.tally import NodeTally, ToRead
from agent.resize.types import ResizeStatus

DEFAULT_TIMING = sm.Timing()

__all__ = ["ResizeEngine", "dry_run"]


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
        to_read: ToRead | None = None,
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
        self.persist = Persister(store or PodStore(settings.state_dir))
        self.cgroup = cgroup or file_runner(env.files)
        self.clock = clock
        self.timing = timing
        self.capacity = NodeCapacity(settings.allocatable, settings.cpu_manager_policy)
        self.book = PodBook()
        self.tally = NodeTally(settings.compute_config(env.hugepage_sizes))
        self._dirty: set[PodUID] = set()  # to converge in the next pass (changed, or not converged yet)

    # ---- pods in ----

    def start(self, pods: Sequence[PodView], *, persist: bool = True) -> list[Problem]:
        """Load the checkpoint (or rebuild it from the kernel), admit every existing pod at its allocated
        values, and only then queue the pods' pending resizes. Returns the warnings for the log.
        With `persist` off (dry runs) nothing is written, not even a rebuilt checkpoint."""
        records, problems = self.persist.load(self.settings, self.env, pods, persist=persist)
        self.book.restore(records)
        self.tally.stale.update(self.tally.comps)
        self.observe(pods)
        if persist:
            self.persist.save(self.book, full=True)
        return problems

    def observe(self, pods: Sequence[PodView]) -> None:
        """The node's full pod list (a resync): departed pods leave, the others arrive in list order.
        A pod whose view is the very object already held is unchanged and costs nothing more."""
        for uid in self.book.departed({p.uid for p in pods}):
            self.remove(uid)
        for pod in pods:
            if self.book.pods.get(pod.uid) is not pod:
                self.update(pod)

    def update(self, pod: PodView) -> None:
        """One pod update (a watch event), in arrival order."""
        if self.book.update(pod):
            self.tally.stale.add(pod.uid)
            self._dirty.add(pod.uid)

    def remove(self, uid: PodUID) -> None:
        self.book.remove(uid)
        self.tally.forget(uid)
        self._dirty.discard(uid)

    # ---- state out ----

    def status(self, uid: PodUID) -> ResizeStatus | None:
        return self.book.status(uid)

    def statuses(self) -> tuple[ResizeStatus, ...]:
        return self.book.statuses()

    def effective_pods(self) -> tuple[PodView, ...]:
        """The node's pods at their allocated values: what every cgroup value is computed from."""
        return self.book.effective_pods()

    @property
    def lingering(self) -> int:
        """Terminal pods still counted in the tiers and admission (their pod cgroup is not gone yet)."""
        return len(self.tally.lingering)

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
        book = self.book
        saved_state, dirty = book.state, set(self._dirty)
        active, touched = set(book.active), set(book.touched)
        sim = Simulated(self.env.files)
        try:
            return self._pass(sim, sim.run, include_containers=True, save=False, full=True)
        finally:
            book.state, self._dirty = saved_state, dirty
            book.active, book.touched = active, touched
            self.tally.stale.update(book.pods)  # allocations may have moved during the dry run

    def _pass(self, reader: Reader, run: Run, *, include_containers: bool, save: bool, full: bool = True) -> PassReport:
        report = PassReport()
        now = self.clock()
        book, tally = self.book, self.tally
        tally.find_lingering(book, reader, self.env)
        tally.refresh(book)
        queued = [r.uid for r in book.queue()]  # admission changes queued records only
        state, accepted = sm.admit_pending(
            book.state,
            book.pods,
            self.capacity,
            now,
            self.timing,
            used=tally.used,
            decide=self.admit,
            queued=queued,
        )
        book.change(state, queued)
        report.accepted = accepted
        tally.stale.update(accepted)
        unsaved: frozenset[str] = frozenset()
        if (accepted or self.persist.unsaved) and save:
            # allocated state on disk before any step that depends on it (retried if it failed); a pod
            # whose record could not be written waits, the others go on
            unsaved = self.persist.save_or_report(book, report, full=full)
        scope: set[PodUID] | None = None
        if not full:
            scope = {u for u in self._dirty if u in book.pods}
            scope.update(r.uid for r in book.queue() if r.uid in book.pods)
        snap = self.snapshot(reader, scope)
        report.warnings.extend(snap.node.warnings)
        report.errors.extend(snap.node.errors)
        handled: set[str] = set()
        for rec in book.queue():
            if not sm.due(rec, now) or rec.uid not in book.pods or rec.uid in unsaved:
                continue
            handled.add(rec.pod)
            attempt = drive(
                rec,
                book.pods[rec.uid],
                snap,
                book.waiting_restarts(rec),
                partial(self.snapshot, reader, {rec.uid}),
                run,
                report,
                include_containers=include_containers,
                reclaim_step_down=self.settings.memory_reclaim_step_down,
            )
            self._outcome(rec.uid, attempt.outcome)
            if attempt.wrote:  # the pod's read-back serves the rest of the pass
                snap = merged(snap, attempt.after or self.snapshot(reader, {rec.uid}), rec.pod)
        skip = set(handled) | {r.pod for u in unsaved if (r := book.state.records.get(PodUID(u))) is not None}
        clamped = {sf.path for sf in report.shortfalls}  # set at usage in this pass: once is enough
        node = node_wide(
            snap.node, book, now, skip, clamped=clamped, node_filter=self.node_filter if save else None
        )
        converge(
            node,
            snap,
            run,
            report,
            include_containers=include_containers,
            reclaim_step_down=self.settings.memory_reclaim_step_down,
        )
        if save:
            self.persist.save_or_report(book, report, full=full)
            if full:
                self.persist.flush_or_report(report)
        # what the next event's pass must look at again: pods still waiting for their cgroup, or all
        # of this pass's pods when a step failed (the rest of the queue is in every pass anyway)
        failed_any = any(not o.ok for p in report.passes for o in p.execution.outcomes)
        if not failed_any:
            waiting = set(snap.waiting)
            self._dirty = {u for u in self._dirty if u in book.pods and book.pods[u].key in waiting}
        report.statuses = book.statuses()
        return report

    def snapshot(self, reader: Reader, scope: Collection[PodUID] | None = None) -> Snapshot:
        """The tree read and diffed against the pods at their allocated values: every pod, or only
        those in `scope` (the tiers always, from the running totals)."""
        return self.tally.snapshot(self.book, reader, self.env, scope, to_read=self.to_read, owned=self.owned)

    def _outcome(self, uid: PodUID, outcome: sm.Outcome) -> None:
        self.book.change(sm.actuated(self.book.state, uid, outcome, self.clock(), self.timing), (uid,))

    def _on_step(self, outcome: StepOutcome) -> None:
        step = outcome.step
        if outcome.ok and isinstance(step, RestartStep):
            self.book.change(sm.mark_restarted(self.book.state, step.pod_uid, step.container, step.container_id), (step.pod_uid,))
            self.persist.save(self.book)  # so a restart never repeats for the same allocation

    def flush(self) -> None:
        """Write the completed resizes' records the store holds back (see `agent.resize.store`): the
        node-wide pass does, and the daemon at shutdown."""
        self.persist.flush()


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
