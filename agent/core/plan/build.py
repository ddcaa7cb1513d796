"""`build_plan`: the ordered steps from a diff (see the package docstring for the rule)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from agent.core.diff import NodeDiff, Owner
from agent.core.model import ContainerValues, Problem
from agent.core.plan.groups import (
    _container_steps,
    _current_container_values,
    _Group,
    _groups,
    _ordered_cgroup_writes,
    _reclaim_container_step,
    _reclaim_target,
    _usage,
)
from agent.core.plan.invariants import check_invariants
from agent.core.plan.tiers import MEMORY_LIMIT_FILES, reserve_tiers, settle_negative_limits
from agent.core.plan.types import (
    INF,
    RESOURCE_ORDER,
    Blocked,
    CgroupStep,
    ContainerStep,
    Plan,
    Resource,
    RestartStep,
    Step,
)
from cgroupfs import layout

Key = tuple[str, str, str]  # (owner, cgroup, container)


@dataclass(slots=True)
class _Context:
    """What every phase of one plan shares: the diff per cgroup, usages read for the guard, the desired
    container values, the containers restarted instead of updated, the qos-reserved tiers."""

    groups: dict[Key, _Group]
    extra: Mapping[str, str | None]
    desired: dict[tuple[str, str], ContainerValues]
    restarting: set[Key]
    reserve: dict[str, int]
    include_containers: bool

    def is_reserve(self, g: _Group) -> bool:
        return g.owner is Owner.TIER and str(g.cgroup) in self.reserve


@dataclass(slots=True)
class _Guard:
    """What the memory-usage guard held back: a limit is lowered only when usage is below the new limit."""

    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    blocked_memory: set[str] = field(default_factory=set)  # pods (or tiers, by cgroup) held back
    reclaim: dict[Key, int] = field(default_factory=dict)  # group -> intermediate memory limit (step-down)


def build_plan(
    node: NodeDiff,
    extra: Mapping[str, str | None] | None = None,
    *,
    include_containers: bool = True,
    restarts: Collection[tuple[str, str]] = frozenset(),
    reclaim_step_down: bool = False,
) -> Plan:
    """The ordered steps that take the observed state to the desired one (only differing values).

    `restarts` names (pod key, container) pairs whose resize policy asks for a restart: they get one
    RestartStep instead of in-place updates. With `reclaim_step_down`, a memory limit held back by the
    usage guard is stepped down toward usage instead of left where it is (seed 000's control loop).
    """
    if not restarts and not any(f.differs for f in node.files):
        return Plan(())  # converged: nothing to order, nothing to check (most passes of a quiet node)
    node, settled = settle_negative_limits(node, extra or {})
    groups = _groups(node)
    ctx = _Context(
        groups=groups,
        extra=extra or {},
        desired={
            (p.pod.key, c.container.name): c.values for p in node.computation.pods for c in p.containers
        },
        restarting={
            k
            for k, g in groups.items()
            if g.owner is Owner.CONTAINER and (g.pod or "", g.container or "") in restarts
        },
        reserve=reserve_tiers(node),
        include_containers=include_containers,
    )
    guard = _memory_guard(ctx, reclaim_step_down)
    _limit_pod_reclaim(ctx, guard)
    phases = {resource: _phases(ctx, guard, resource) for resource in RESOURCE_ORDER}
    steps = _assemble(phases, _restart_steps(ctx))
    plan = Plan(tuple(steps), (*settled, *guard.warnings), tuple(guard.errors), tuple(guard.blocked))
    violation = check_invariants(node, plan)
    if violation is not None:
        return Plan(
            (),
            plan.warnings,
            (*plan.errors, Problem(None, f"plan refused: {violation}")),
            plan.blocked,
            violation,
        )
    return plan


def _memory_guard(ctx: _Context, reclaim_step_down: bool) -> _Guard:
    """Hold back every memory decrease below current usage (not a tier's qos-reserved limit: the kernel
    reclaims toward it, and a refusal sets it at the usage)."""
    guard = _Guard()
    for k, g in ctx.groups.items():
        if k in ctx.restarting or g.direction("memory") >= 0:
            continue
        usage = _usage(g, ctx.extra)
        new_limit = g.memory_limit(True)
        if ctx.is_reserve(g):
            if usage is not None and new_limit != INF and usage > new_limit:
                guard.warnings.append(
                    Problem(
                        None,
                        f"QoS tier {g.cgroup}: usage {int(usage)} is above its new memory limit "
                        f"{int(new_limit)}; if the kernel cannot reclaim enough, the limit is set at the "
                        "usage (as the kubelet does) and lowered again on a later pass",
                    )
                )
            continue
        if usage is not None and new_limit != INF and usage > new_limit:
            who = g.pod or str(g.cgroup)
            what = f"container {g.container!r}" if g.container else f"cgroup {g.cgroup}"
            message = (
                f"{what}: memory limit {int(new_limit)} is below current usage {int(usage)}; "
                "not lowering it (retried later)"
            )
            guard.errors.append(Problem(g.pod, message))
            guard.blocked.append(
                Blocked(g.pod, str(g.cgroup), g.container, int(new_limit), int(usage), message)
            )
            guard.blocked_memory.add(who)
            if reclaim_step_down:
                target = _reclaim_target(usage, new_limit, g.memory_limit(False))
                if target is not None:
                    guard.reclaim[k] = target
    return guard


def _limit_pod_reclaim(ctx: _Context, guard: _Guard) -> None:
    """A pod cgroup steps down only as far as its containers' current limits allow."""
    reclaim = guard.reclaim
    for k in list(reclaim):
        g = ctx.groups[k]
        if g.owner is Owner.CONTAINER:
            continue
        kids = [c for c in ctx.groups.values() if c.owner is Owner.CONTAINER and c.cgroup == g.cgroup]
        floor = max((reclaim.get(c.key, c.memory_limit(False)) for c in kids), default=0.0)
        total = sum(reclaim.get(c.key, c.memory_limit(False)) for c in kids)
        floor = max(floor, total) if total != INF else INF
        if floor >= g.memory_limit(False):
            del reclaim[k]
        else:
            reclaim[k] = max(reclaim[k], int(floor))


def _tier_steps(ctx: _Context, tiers: list[_Group]) -> tuple[list[Step], list[Step]]:
    """qos-reserved tier limits: those that shrink first (lowest tier first, set at usage if refused),
    those that grow last (highest first)."""
    first: list[Step] = []
    last: list[Step] = []
    for g in sorted(
        (g for g in tiers if g.direction("memory") < 0), key=lambda g: ctx.reserve[str(g.cgroup)]
    ):
        first.extend(
            replace(w, at_usage_on_refusal=w.setting.filename in MEMORY_LIMIT_FILES)
            for w in _ordered_cgroup_writes(g, "memory", ctx.extra)
        )
    for g in sorted(
        (g for g in tiers if g.direction("memory") >= 0), key=lambda g: -ctx.reserve[str(g.cgroup)]
    ):
        last.extend(_ordered_cgroup_writes(g, "memory", ctx.extra))
    return first, last


def _phases(ctx: _Context, guard: _Guard, resource: Resource) -> tuple[list[Step], ...]:
    """One resource's steps as (tier shrinks, A parents grow, B containers shrink, C parents shrink,
    D containers grow, tier growth)."""
    groups = ctx.groups
    parents = [g for g in groups.values() if g.owner is not Owner.CONTAINER and g.changed(resource)]
    first: list[Step] = []
    last: list[Step] = []
    if resource == "memory":
        first, last = _tier_steps(ctx, [g for g in parents if ctx.is_reserve(g)])
        parents = [g for g in parents if not ctx.is_reserve(g)]
    containers = [
        g
        for g in groups.values()
        if g.owner is Owner.CONTAINER and g.changed(resource) and g.key not in ctx.restarting
    ]
    held: list[_Group] = []
    if resource == "memory":
        held = [g for g in (*parents, *containers) if g.key in guard.reclaim]
        parents = [g for g in parents if (g.pod or str(g.cgroup)) not in guard.blocked_memory]
        containers = [g for g in containers if g.pod not in guard.blocked_memory]
    grow = sorted((g for g in parents if g.direction(resource) >= 0), key=lambda g: (g.depth, g.key))
    shrink = sorted((g for g in parents if g.direction(resource) < 0), key=lambda g: (-g.depth, g.key))
    c_down = sorted((g for g in containers if g.direction(resource) < 0), key=lambda g: g.key)
    c_up = sorted((g for g in containers if g.direction(resource) >= 0), key=lambda g: g.key)
    a: list[Step] = [w for g in grow for w in _ordered_cgroup_writes(g, resource, ctx.extra)]
    b: list[Step] = []
    c: list[Step] = [w for g in shrink for w in _ordered_cgroup_writes(g, resource, ctx.extra)]
    d: list[Step] = []
    if ctx.include_containers:
        b.extend(_container_steps(c_down, resource, ctx.desired, groups))
        b.extend(
            _reclaim_container_step(g, guard.reclaim[g.key], ctx.desired)
            for g in held
            if g.owner is Owner.CONTAINER
        )
    for g in sorted((g for g in held if g.owner is not Owner.CONTAINER), key=lambda g: (-g.depth, g.key)):
        f = g.files.get(layout.MEMORY_LIMIT) or g.files.get(layout.MEMORY_MAX)
        if f is not None:
            c.append(
                CgroupStep(
                    replace(f.setting, value=str(guard.reclaim[g.key])), f.current, "memory", g.owner, g.pod
                )
            )
    if ctx.include_containers:
        d.extend(_container_steps(c_up, resource, ctx.desired, groups))
    if resource != "memory":
        _keep_held_memory(ctx, guard, (b, d))
    waiting = sorted({g.pod for g in groups.values() if g.pod is not None and g.pod in guard.blocked_memory})
    if last and waiting:
        # a pod's memory decrease waits for usage: the lower tiers stay where they are until it is done
        guard.warnings.append(
            Problem(
                None,
                f"QoS tier memory limits not raised while the memory decrease of {', '.join(waiting)} waits",
            )
        )
        last = []
    return first, a, b, c, d, last


def _keep_held_memory(ctx: _Context, guard: _Guard, parts: tuple[list[Step], ...]) -> None:
    """A held-back memory limit stays where it is in every later update of that container."""
    for part in parts:
        for i, step in enumerate(part):
            if isinstance(step, ContainerStep) and step.pod in guard.blocked_memory:
                g = ctx.groups[(Owner.CONTAINER.value, str(step.changes[0].setting.cgroup), step.container)]
                current = _current_container_values(g, step.values).memory_limit
                part[i] = replace(step, values=replace(step.values, memory_limit=current))


def _restart_steps(ctx: _Context) -> list[Step]:
    out: list[Step] = []
    if not ctx.include_containers:
        return out
    for k in sorted(ctx.restarting):
        g = ctx.groups[k]
        if g.pod is None or g.pod_uid is None or g.container is None or g.container_id is None:
            continue
        why = tuple(r for r in RESOURCE_ORDER if g.changed(r))
        out.append(RestartStep(g.pod, g.pod_uid, g.container, g.container_id, g.cgroup, why))
    return out


def _assemble(phases: Mapping[Resource, tuple[list[Step], ...]], restart_steps: list[Step]) -> list[Step]:
    """Per resource in order; with restarts, every parent grows first (both resources), then the restarts,
    then the rest per resource."""
    steps: list[Step] = []
    if restart_steps:
        for resource in RESOURCE_ORDER:
            steps.extend(phases[resource][0])
            steps.extend(phases[resource][1])
        steps.extend(restart_steps)
        for resource in RESOURCE_ORDER:
            for part in phases[resource][2:]:
                steps.extend(part)
        return steps
    for resource in RESOURCE_ORDER:
        for part in phases[resource]:
            steps.extend(part)
    return steps
