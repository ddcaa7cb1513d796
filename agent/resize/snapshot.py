"""What one pass of the engine reads: the tree diffed against the pods at their allocated values.

`Reader` is the tree (the real files, or a dry run's `Simulated` overlay); `Snapshot` one read of it;
`Computed` one pod at its allocated values (what the snapshot and admission's running sums are built
from; its tier share is from the pod as it asks, as the kubelet's QoS pass counts it); `merged` swaps
one pod's files (and the tiers) for a newer read. No I/O of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Protocol

from agent.core.compute import PodComputation, PodComputeError, compute_pod
from agent.core.compute.aggregate import pod_requests
from agent.core.compute.config import ComputeConfig
from agent.core.compute.node import TERMINAL_PHASES
from agent.core.compute.tiers import NO_SUMS, TierSums, tier_contribution
from agent.core.diff import FileDiff, NodeDiff, Owner
from agent.core.model import PodView, Problem
from agent.core.plan import CgroupStep, ContainerStep, Plan
from agent.pipeline.execute import Execution, StepOutcome
from agent.resize.allocation import with_allocation
from agent.resize.types import PodAllocation


class Reader(Protocol):
    def read(self, relpath: str) -> str | None: ...

    def read_many(self, relpaths: Iterable[str]) -> tuple[dict[str, str | None], dict[str, bool]]: ...

    def exists(self, reldir: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One read of the tree, diffed against the pods at their allocated values."""

    node: NodeDiff
    extra: dict[str, str | None]
    waiting: tuple[str, ...]  # pods whose cgroup does not exist yet


class Simulated:
    """A reader over the real tree with the steps of a dry run laid over it."""

    def __init__(self, base: Reader) -> None:
        self.base = base
        self.files: dict[str, str] = {}
        self.gone: set[str] = set()

    def read(self, relpath: str) -> str | None:
        if relpath.rsplit("/", 1)[0] in self.gone:
            return None
        return self.files.get(relpath) if relpath in self.files else self.base.read(relpath)

    def exists(self, reldir: str) -> bool:
        return reldir not in self.gone and self.base.exists(reldir)

    def read_many(self, relpaths: Iterable[str]) -> tuple[dict[str, str | None], dict[str, bool]]:
        paths = list(relpaths)
        texts, dirs = self.base.read_many(paths)
        for p in paths:
            if p.rsplit("/", 1)[0] in self.gone:
                texts[p] = None
            elif p in self.files:
                texts[p] = self.files[p]
        return texts, {d: d not in self.gone and ok for d, ok in dirs.items()}

    def run(self, plan: Plan, node: NodeDiff) -> Execution:
        result = Execution()
        for step in plan.steps:
            if isinstance(step, CgroupStep):
                self.files[step.path] = step.setting.value
            elif isinstance(step, ContainerStep):
                for c in step.changes:
                    self.files[c.setting.path] = c.setting.value
            else:
                self.gone.update(
                    f.setting.directory for f in node.files if f.desired.container_id == step.container_id
                )
            result.outcomes.append(StepOutcome(step, True))
            result.writes += 1
        return result


@dataclass(frozen=True, slots=True)
class Computed:
    """One pod at its allocated values: its computation (None when terminal or not computable), the
    compute error, and its allocated (CPU milli, memory) requests for admission."""

    comp: PodComputation | None
    error: Problem | None
    requests: tuple[int, int]
    active: bool  # counted in the node's used requests and the tiers (not terminal, or not gone yet)
    actuate: bool = True  # its cgroups are converged (not for a terminal pod that is not gone yet)
    # its share of the tier sums, from the pod as it asks (None: the same as `comp`'s). The kubelet's QoS
    # pass sums its pod manager's pods, the spec, not the allocation: while a resize is not yet admitted
    # (or Deferred, Infeasible) the two differ, and the tier values must still be the kubelet's.
    tiers: TierSums | None = None

    def tier_share(self) -> TierSums:
        if self.tiers is not None:
            return self.tiers
        return tier_contribution(self.comp) if self.comp is not None else NO_SUMS


def compute_allocated(
    pod: PodView, allocated: PodAllocation, cfg: ComputeConfig, *, lingering: bool = False
) -> Computed:
    """A terminal pod, or one being deleted, counts as the kubelet counts it: until it is known to be
    gone (`lingering`: its pod cgroup is still there; the kubelet removes it as the pod's last act,
    then stops counting the pod, before the API server drops the object). A terminal pod's cgroups are
    no longer written."""
    effective = with_allocation(pod, allocated)
    terminal = pod.phase in TERMINAL_PHASES
    active = not (terminal or pod.deleting) or lingering
    req = pod_requests(effective)
    requests = (req.cpu_milli or 0, req.memory or 0)
    if not active:
        return Computed(None, None, requests, False)
    tiers = None if effective is pod else _spec_share(pod, cfg)
    try:
        return Computed(compute_pod(effective, cfg), None, requests, True, actuate=not terminal, tiers=tiers)
    except PodComputeError as err:
        return Computed(None, Problem(err.pod, err.message), requests, True, actuate=not terminal, tiers=tiers)


def _spec_share(pod: PodView, cfg: ComputeConfig) -> TierSums | None:
    """The pod's tier share as it asks; None (the allocated share) when the spec cannot be computed."""
    try:
        return tier_contribution(compute_pod(pod, cfg))
    except PodComputeError:
        return None


def merged(snap: Snapshot, fresh: Snapshot, pod: str) -> Snapshot:
    """`snap` with one pod's files and the tiers replaced by a newer read of them (`fresh`)."""
    newer: dict[str, FileDiff] = {
        f.setting.path: f for f in fresh.node.files if f.desired.owner is Owner.TIER or f.desired.pod == pod
    }
    files = tuple(newer.pop(f.setting.path, f) for f in snap.node.files)
    node = replace(snap.node, files=(*files, *newer.values()))
    waiting = tuple(w for w in snap.waiting if w != pod) + tuple(w for w in fresh.waiting if w == pod)
    return Snapshot(node, {**snap.extra, **fresh.extra}, waiting)
