"""`build_plan`: the ordered steps from a diff (see the package docstring for the rule)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from agent.diff import NodeDiff, Owner
from agent.model import ContainerValues, Problem
from agent.plan.groups import (
    _container_steps,
    _current_container_values,
    _Group,
    _groups,
    _ordered_cgroup_writes,
    _reclaim_container_step,
    _reclaim_target,
    _usage,
)
from agent.plan.invariants import check_invariants
from agent.plan.tiers import MEMORY_LIMIT_FILES, reserve_tiers
from agent.plan.types import (
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
    extra = extra or {}
    groups = _groups(node)
    desired_containers: dict[tuple[str, str], ContainerValues] = {
        (p.pod.key, c.container.name): c.values for p in node.computation.pods for c in p.containers
    }
    restarting = {
        k
        for k, g in groups.items()
        if g.owner is Owner.CONTAINER and (g.pod or "", g.container or "") in restarts
    }
    errors: list[Problem] = []
    warnings: list[Problem] = []
    blocked: list[Blocked] = []
    blocked_memory: set[str] = set()  # pods (or tiers, by cgroup) whose memory changes are held back
    reclaim: dict[tuple[str, str, str], int] = {}  # group -> intermediate memory limit

    reserve = reserve_tiers(node)

    def is_reserve(g: _Group) -> bool:
        return g.owner is Owner.TIER and str(g.cgroup) in reserve

    # The memory-usage guard: a limit is lowered only when usage is below the new limit. Not for a
    # tier's qos-reserved limit: the kernel reclaims toward it, and a refusal sets it at the usage.
    for k, g in groups.items():
        if k in restarting or g.direction("memory") >= 0:
            continue
        usage = _usage(g, extra)
        new_limit = g.memory_limit(True)
        if is_reserve(g):
            if usage is not None and new_limit != INF and usage > new_limit:
                warnings.append(
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
            errors.append(Problem(g.pod, message))
            blocked.append(Blocked(g.pod, str(g.cgroup), g.container, int(new_limit), int(usage), message))
            blocked_memory.add(who)
            if reclaim_step_down:
                target = _reclaim_target(usage, new_limit, g.memory_limit(False))
                if target is not None:
                    reclaim[k] = target
    # A pod cgroup steps down only as far as its containers' current limits allow.
    for k in list(reclaim):
        g = groups[k]
        if g.owner is Owner.CONTAINER:
            continue
        kids = [c for c in groups.values() if c.owner is Owner.CONTAINER and c.cgroup == g.cgroup]
        floor = max((reclaim.get(c.key, c.memory_limit(False)) for c in kids), default=0.0)
        total = sum(reclaim.get(c.key, c.memory_limit(False)) for c in kids)
        floor = max(floor, total) if total != INF else INF
        if floor >= g.memory_limit(False):
            del reclaim[k]
        else:
            reclaim[k] = max(reclaim[k], int(floor))

    phases: dict[Resource, tuple[list[Step], ...]] = {}
    for resource in RESOURCE_ORDER:
        parents = [g for g in groups.values() if g.owner is not Owner.CONTAINER and g.changed(resource)]
        first: list[Step] = []  # qos-reserved tier limits that shrink: before any pod value grows
        last: list[Step] = []  # those that grow: after every pod value shrank (or the pod left)
        if resource == "memory":
            tiers = [g for g in parents if is_reserve(g)]
            parents = [g for g in parents if not is_reserve(g)]
            for g in sorted(
                (g for g in tiers if g.direction("memory") < 0), key=lambda g: reserve[str(g.cgroup)]
            ):
                first.extend(
                    replace(w, at_usage_on_refusal=w.setting.filename in MEMORY_LIMIT_FILES)
                    for w in _ordered_cgroup_writes(g, resource, extra)
                )
            for g in sorted(
                (g for g in tiers if g.direction("memory") >= 0), key=lambda g: -reserve[str(g.cgroup)]
            ):
                last.extend(_ordered_cgroup_writes(g, resource, extra))
        containers = [
            g
            for g in groups.values()
            if g.owner is Owner.CONTAINER and g.changed(resource) and g.key not in restarting
        ]
        held: list[_Group] = []
        if resource == "memory":
            held = [g for g in (*parents, *containers) if g.key in reclaim]
            parents = [g for g in parents if (g.pod or str(g.cgroup)) not in blocked_memory]
            containers = [g for g in containers if g.pod not in blocked_memory]
        grow = sorted((g for g in parents if g.direction(resource) >= 0), key=lambda g: (g.depth, g.key))
        shrink = sorted((g for g in parents if g.direction(resource) < 0), key=lambda g: (-g.depth, g.key))
        c_down = sorted((g for g in containers if g.direction(resource) < 0), key=lambda g: g.key)
        c_up = sorted((g for g in containers if g.direction(resource) >= 0), key=lambda g: g.key)
        a: list[Step] = []
        b: list[Step] = []
        c: list[Step] = []
        d: list[Step] = []
        for g in grow:
            a.extend(_ordered_cgroup_writes(g, resource, extra))
        if include_containers:
            b.extend(_container_steps(c_down, resource, desired_containers))
            b.extend(
                _reclaim_container_step(g, reclaim[g.key], desired_containers)
                for g in held
                if g.owner is Owner.CONTAINER
            )
        for g in shrink:
            c.extend(_ordered_cgroup_writes(g, resource, extra))
        for g in sorted((g for g in held if g.owner is not Owner.CONTAINER), key=lambda g: (-g.depth, g.key)):
            f = g.files.get(layout.MEMORY_LIMIT) or g.files.get(layout.MEMORY_MAX)
            if f is not None:
                s = replace(f.setting, value=str(reclaim[g.key]))
                c.append(CgroupStep(s, f.current, "memory", g.owner, g.pod))
        if include_containers:
            d.extend(_container_steps(c_up, resource, desired_containers))
        if resource != "memory":
            # a held-back memory limit stays where it is in every later update of that container
            for part in (b, d):
                for i, step in enumerate(part):
                    if isinstance(step, ContainerStep) and step.pod in blocked_memory:
                        g = groups[
                            (Owner.CONTAINER.value, str(step.changes[0].setting.cgroup), step.container)
                        ]
                        current = _current_container_values(g, step.values).memory_limit
                        part[i] = replace(step, values=replace(step.values, memory_limit=current))
        waiting = sorted({g.pod for g in groups.values() if g.pod is not None and g.pod in blocked_memory})
        if last and waiting:
            # a pod's memory decrease waits for usage: the lower tiers stay where they are until it is done
            warnings.append(
                Problem(
                    None,
                    f"QoS tier memory limits not raised while the memory decrease of {', '.join(waiting)} waits",
                )
            )
            last = []
        phases[resource] = (first, a, b, c, d, last)

    restart_steps: list[Step] = []
    if include_containers:
        for k in sorted(restarting):
            g = groups[k]
            if g.pod is None or g.pod_uid is None or g.container is None or g.container_id is None:
                continue
            why = tuple(r for r in RESOURCE_ORDER if g.changed(r))
            restart_steps.append(RestartStep(g.pod, g.pod_uid, g.container, g.container_id, g.cgroup, why))
    steps: list[Step] = []
    if restart_steps:
        # every parent grows first (both resources), then the restarts, then the rest per resource
        for resource in RESOURCE_ORDER:
            steps.extend(phases[resource][0])
            steps.extend(phases[resource][1])
        steps.extend(restart_steps)
        for resource in RESOURCE_ORDER:
            for part in phases[resource][2:]:
                steps.extend(part)
    else:
        for resource in RESOURCE_ORDER:
            for part in phases[resource]:
                steps.extend(part)

    plan = Plan(tuple(steps), tuple(warnings), tuple(errors), tuple(blocked))
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
