"""Actuating one admitted pod: its plan, its run, its read-back, and what the attempt found.

Why one pod at a time: the pod's pod and container cgroups change together with the QoS tiers, every
other pod frozen at its current values so the invariant check still sees the whole tree; and the pod is
done only when the kernel shows its allocated values, so the tree is read back after its writes. The
tiers shrink before this pod's values grow; they grow back only in the node-wide pass, once no admitted
change is still being actuated.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from agent.core.diff import NodeDiff
from agent.core.model import PodView, Problem
from agent.core.plan import Plan, build_plan, without_tier_memory_growth
from agent.pipeline.execute import Execution, describe
from agent.resize import state as sm
from agent.resize.outcome import read_back_outcome, waiting_outcome
from agent.resize.report import PassReport, PodPass
from agent.resize.scope import restarts_for, restrict
from agent.resize.snapshot import Snapshot

Run = Callable[[Plan, NodeDiff], Execution]
"""How a pass runs a plan: the real executor, or a dry run's simulation."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one actuation attempt of a pod did and found."""

    outcome: sm.Outcome
    wrote: bool = False
    after: Snapshot | None = None  # the pod read back after its writes (None when not read back)


WAITING_FOR_CGROUP = sm.Outcome(reason="WaitingForPodCgroup", message="the pod's cgroup does not exist yet")


def drive(
    rec: sm.PodRecord,
    pod: PodView,
    snap: Snapshot,
    waiting: Collection[str],
    read_back: Callable[[], Snapshot],
    run: Run,
    report: PassReport,
    *,
    include_containers: bool,
    reclaim_step_down: bool,
) -> Attempt:
    """Actuate one admitted pod from `snap`; `waiting` are its containers stopped for RestartContainer
    that have not come back yet, `read_back` reads the pod's files again. The pod's plan and execution
    (and a failed step) go to `report`."""
    if rec.pod in snap.waiting:
        return Attempt(WAITING_FOR_CGROUP)
    frozen = {(rec.pod, c) for c in waiting}
    node = without_tier_memory_growth(restrict(snap.node, {rec.pod}, frozen_containers=frozen))
    restarts = restarts_for(node, pod, rec.restarted) if include_containers else set()
    plan = build_plan(
        node,
        snap.extra,
        include_containers=include_containers,
        restarts=restarts,
        reclaim_step_down=reclaim_step_down,
    )
    execution = run(plan, node) if plan.steps else Execution()
    report.passes.append(PodPass(rec.pod, plan, execution))
    if plan.refused is not None:
        if waiting:
            return Attempt(waiting_outcome(waiting))
        return Attempt(sm.Outcome(failed=True, reason="PlanRefused", message=plan.refused))
    failed = execution.failed
    if failed is not None:
        message = f"{describe(failed.step)}: {failed.error}"
        report.errors.append(Problem(rec.pod, message))
        return Attempt(sm.Outcome(failed=True, reason="StepFailed", message=message), execution.writes > 0)
    after = read_back() if execution.writes else snap
    rest = restrict(after.node, {rec.pod}, tiers=False, frozen_containers=frozen)
    remaining = [f for f in rest.changes if f.desired.pod == rec.pod]
    restarting = {*waiting, *(c for _, c in restarts)}
    outcome = read_back_outcome(plan, remaining, restarting, include_containers)
    return Attempt(outcome, execution.writes > 0, after if execution.writes else None)
