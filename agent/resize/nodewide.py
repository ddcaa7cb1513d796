"""The node-wide pass: once the admitted pods were driven on their own, everything else converges in one
plan (drift anywhere, the tiers, pods whose resize is pending at their old allocation).

Why its own narrowing: what must not move here is frozen at its current values, not dropped, so the
invariant check still sees the whole tree — the pods driven in this pass (their read-back is already in
the snapshot), those whose record could not be saved, those backing off after a failure, and containers
stopped for RestartContainer that have not come back. The tiers' memory does not grow while an admitted
allocation is still being actuated, and a tier limit already set at usage in this pass is not set again.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from agent.core.diff import NodeDiff
from agent.core.model import Problem
from agent.core.plan import build_plan, without_tier_memory_growth
from agent.pipeline.execute import describe
from agent.resize import state as sm
from agent.resize.actuate import Run
from agent.resize.book import PodBook
from agent.resize.report import PassReport, PodPass
from agent.resize.scope import restrict
from agent.resize.snapshot import Snapshot
from agent.resize.types import ResizeState


def node_wide(
    node: NodeDiff,
    book: PodBook,
    now: float,
    skip: Collection[str],
    *,
    clamped: Collection[str] = (),
    node_filter: Callable[[NodeDiff], NodeDiff] | None = None,
) -> NodeDiff:
    """The node's diff narrowed to what the node-wide pass may change: not the pods in `skip` (keys)
    nor those backing off, not containers waiting for their restart, not the `clamped` tier files;
    `node_filter` is what of it may be written now (the daemon's drift backoff)."""
    skipped = set(skip)
    frozen: set[tuple[str, str]] = set()
    actuating = False  # an admitted allocation of a pod still here is not in its cgroups yet
    for uid in book.active:  # the others were never resized: neither backing off nor restarting
        rec = book.state.records[uid]
        if sm.backing_off(rec, now):
            skipped.add(rec.pod)
        if rec.restarted:
            frozen |= {(rec.pod, c) for c in book.waiting_restarts(rec)}
        if rec.state in (ResizeState.IN_PROGRESS, ResizeState.ERROR) and rec.uid in book.pods:
            actuating = True
    out = restrict(node, None, exclude=skipped, frozen_containers=frozen)
    if actuating:
        out = without_tier_memory_growth(out)
    if node_filter is not None:
        out = node_filter(out)
    if clamped:
        files = tuple(replace(f, differs=False) if f.setting.path in clamped else f for f in out.files)
        out = replace(out, files=files)
    return out


def converge(
    node: NodeDiff,
    snap: Snapshot,
    run: Run,
    report: PassReport,
    *,
    include_containers: bool,
    reclaim_step_down: bool,
) -> None:
    """Plan and run the node-wide pass over `node` (from `node_wide`); its plan, execution and a
    failed step go to `report`."""
    plan = build_plan(
        node, snap.extra, include_containers=include_containers, reclaim_step_down=reclaim_step_down
    )
    if not (plan.steps or plan.errors):
        return
    execution = run(plan, node)
    report.passes.append(PodPass(None, plan, execution))
    failed = execution.failed
    if failed is not None:
        report.errors.append(Problem(getattr(failed.step, "pod", None), f"{describe(failed.step)}: {failed.error}"))
