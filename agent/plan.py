"""Ordering changes so that a child never exceeds its parent (pure).

Per resource — memory first, then CPU, as the kubelet actuates — the steps run in four phases:
  A. pod and tier cgroups whose limit grows, parents first;
  B. containers whose limit shrinks;
  C. pod and tier cgroups whose limit shrinks, children first;
  D. containers whose limit grows.
Whatever the starting and final states, if the final state has every child within its parent, every
intermediate state does too: a parent only shrinks once its children are at or below their final
values, and a child only grows once its parent is at its final value.

The memory limits qos-reserved puts on the Burstable and BestEffort tiers are not containment (a pod's
limit may be above its tier's, as the kubelet sets them); they keep the lower tiers out of memory the
higher tiers requested. So they move around every pod and container memory step: a tier limit that
shrinks (a higher-tier request grows, a pod arrives) is written before anything else, lowest tier first;
one that grows (a request shrinks, a pod left) after everything else. While pod values change, every
tier is thus at or below the limit that protects both the old and the new requests. A shrink the
kernel refuses (usage above it) is set at the usage instead, as the kubelet does (see `execute`). `check_invariants` replays a plan
and refuses it if any step would break the rule. Within one v1 cgroup, CFS period and quota are
written in the order that keeps the quota/period ratio between its old and new values (the kernel
compares ratios), and memory+swap is raised before the memory limit when it would be exceeded.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from agent.diff import FileDiff, NodeDiff, Owner
from agent.model import UNLIMITED, ContainerID, ContainerValues, PodUID, Problem, TierKind
from cgroupfs import layout
from cgroupfs.convert import PAGE_SIZE, parse_cpu_max
from cgroupfs.layout import FileSetting
from cgroupfs.types import CgroupName, CgroupVersion, Controller

Resource = Literal["memory", "cpu", "hugetlb"]
RESOURCE_ORDER: tuple[Resource, ...] = ("memory", "cpu", "hugetlb")
INF = math.inf


@dataclass(frozen=True, slots=True)
class CgroupStep:
    """Write one file of a pod or tier cgroup."""

    setting: FileSetting
    current: str | None
    resource: Resource
    owner: Owner
    pod: str | None = None
    kind: Literal["cgroup"] = "cgroup"
    # a QoS tier's qos-reserved memory limit: when the kernel refuses it (usage above), set it at the
    # usage instead and go on, as the kubelet's retrySetMemoryReserve does
    at_usage_on_refusal: bool = False

    @property
    def path(self) -> str:
        return self.setting.path

    def to_json(self) -> dict[str, object]:
        return {"kind": "cgroup", "path": self.path, "from": self.current, "to": self.setting.value}


@dataclass(frozen=True, slots=True)
class ContainerStep:
    """One UpdateContainerResources call: the full value set, with `resource` the one being changed."""

    pod: str
    pod_uid: PodUID
    container: str
    container_id: ContainerID
    resource: Resource
    changes: tuple[FileDiff, ...]
    values: ContainerValues
    kind: Literal["container"] = "container"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": "container",
            "pod": self.pod,
            "container": self.container,
            "containerID": self.container_id,
            "resource": self.resource,
            "from": {c.desired.field: c.current for c in self.changes},
            "to": {c.desired.field: c.setting.value for c in self.changes},
        }


@dataclass(frozen=True, slots=True)
class RestartStep:
    """Stop one container through the runtime (CRI StopContainer) so that the kubelet starts it again with
    its new values: its resize policy says RestartContainer for a resource that changes. Only that
    container restarts; the pod (sandbox, other containers) is never recreated (seed 004's point).

    It is placed after every parent cgroup has grown and before anything shrinks, so the new container
    starts inside a pod cgroup already large enough, and from then on its old cgroup counts as gone."""

    pod: str
    pod_uid: PodUID
    container: str
    container_id: ContainerID
    cgroup: CgroupName
    resources: tuple[Resource, ...]  # the resources whose change asked for the restart
    kind: Literal["restart"] = "restart"

    @property
    def resource(self) -> Resource:
        return self.resources[0] if self.resources else "memory"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": "restart",
            "pod": self.pod,
            "container": self.container,
            "containerID": self.container_id,
            "resources": list(self.resources),
        }


Step = CgroupStep | ContainerStep | RestartStep


@dataclass(frozen=True, slots=True)
class Blocked:
    """A memory limit held back because usage is above the new limit (retried later; never an error of
    the plan itself). `container` is None for a pod or tier cgroup."""

    pod: str | None
    cgroup: str
    container: str | None
    limit: int
    usage: int
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]
    warnings: tuple[Problem, ...] = ()
    errors: tuple[Problem, ...] = ()
    blocked: tuple[Blocked, ...] = ()
    refused: str | None = None  # the invariant violation that made build_plan refuse the plan


MEMORY_LIMIT_FILES = frozenset({layout.MEMORY_LIMIT, layout.MEMORY_MAX})
_RESERVE_RANK = {TierKind.BEST_EFFORT: 0, TierKind.BURSTABLE: 1}  # lowest tier first


def reserve_tiers(node: NodeDiff) -> dict[str, int]:
    """The tiers whose memory limit qos-reserved sets (cgroup name -> rank, lowest tier 0)."""
    return {
        str(t.cgroup): _RESERVE_RANK[t.kind]
        for t in node.computation.tiers
        if t.kind in _RESERVE_RANK and t.values.memory_limit is not None
    }


def without_tier_memory_growth(node: NodeDiff) -> NodeDiff:
    """`node` with the qos-reserved tier limits that would grow left where they are: while a pod's
    admitted change is still being actuated, the lower tiers do not take back what it may still hold."""
    reserve = reserve_tiers(node)
    files = []
    for f in node.files:
        if (
            f.differs
            and f.desired.owner is Owner.TIER
            and str(f.setting.cgroup) in reserve
            and f.setting.filename in MEMORY_LIMIT_FILES
            and _memory_limit_of({f.setting.filename: f.setting.value})
            > _memory_limit_of({f.setting.filename: f.current})
        ):
            f = replace(f, differs=False)
        files.append(f)
    return replace(node, files=tuple(files))


def resource_of(setting: FileSetting) -> Resource:
    if setting.controller is Controller.MEMORY:
        return "memory"
    if setting.controller is Controller.CPU:
        return "cpu"
    return "hugetlb"


# ---------------------------------------------------------------------------------------------
# Reading limits out of a cgroup's files (current or desired side)


def _int(filename: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        canon = layout.canonical(filename, text)
    except ValueError:
        return None
    return INF if canon == "max" else float(canon)


@dataclass(slots=True)
class _Group:
    """All files of one cgroup (tier, pod or container), current and desired."""

    key: tuple[str, str, str]
    owner: Owner
    cgroup: CgroupName
    depth: int
    pod: str | None
    pod_uid: PodUID | None
    container: str | None
    container_id: ContainerID | None
    files: dict[str, FileDiff] = field(default_factory=dict)

    def text(self, filename: str, new: bool) -> str | None:
        f = self.files.get(filename)
        if f is None:
            return None
        return f.setting.value if new else f.current

    def texts(self, new: bool) -> dict[str, str | None]:
        return {name: self.text(name, new) for name in self.files}

    def cpu_limit(self, new: bool) -> float:
        """quota/period, INF for unlimited or unknown (the kernel default)."""
        return _cpu_limit_of(self.texts(new))

    def cpu_weight(self, new: bool) -> float:
        for name in (layout.CPU_SHARES, layout.CPU_WEIGHT):
            value = _int(name, self.text(name, new))
            if value is not None:
                return value
        return 0.0

    def memory_limit(self, new: bool) -> float:
        return _memory_limit_of(self.texts(new))

    def memory_reservation(self, new: bool) -> float:
        for name in (layout.MEMORY_SOFT, layout.MEMORY_LOW):
            value = _int(name, self.text(name, new))
            if value is not None:
                return value
        return 0.0

    def direction(self, resource: Resource) -> int:
        """+1 grows, -1 shrinks, 0 neither (by limit first, then by the request-like value)."""
        if resource == "cpu":
            old, new = self.cpu_limit(False), self.cpu_limit(True)
            if old == new:
                old, new = self.cpu_weight(False), self.cpu_weight(True)
        elif resource == "memory":
            old, new = self.memory_limit(False), self.memory_limit(True)
            if old == new:
                old, new = self.memory_reservation(False), self.memory_reservation(True)
        else:
            return 0
        return (new > old) - (new < old)

    def changed(self, resource: Resource) -> list[FileDiff]:
        return [f for f in self.files.values() if f.differs and resource_of(f.setting) == resource]


def _groups(node: NodeDiff) -> dict[tuple[str, str, str], _Group]:
    groups: dict[tuple[str, str, str], _Group] = {}
    for f in node.files:
        d = f.desired
        key = (d.owner.value, str(d.setting.cgroup), d.container or "")
        g = groups.get(key)
        if g is None:
            depth = len(d.setting.cgroup.parts) + (1 if d.owner is Owner.CONTAINER else 0)
            g = groups[key] = _Group(
                key, d.owner, d.setting.cgroup, depth, d.pod, d.pod_uid, d.container, d.container_id
            )
        g.files[d.setting.filename] = f
    return groups


# ---------------------------------------------------------------------------------------------
# Ordering inside one cgroup


def _ordered_cgroup_writes(
    g: _Group, resource: Resource, extra: Mapping[str, str | None]
) -> list[CgroupStep]:
    changed = g.changed(resource)
    if not changed:
        return []
    by_name = {f.setting.filename: f for f in changed}

    def step(f: FileDiff) -> CgroupStep:
        return CgroupStep(f.setting, f.current, resource, g.owner, g.pod)

    out: list[CgroupStep] = []
    if resource == "cpu" and layout.CPU_QUOTA in by_name and layout.CPU_PERIOD in by_name:
        # The kernel checks quota/period ratios against parent and children: take the path whose
        # intermediate ratio lies between the old and the new one.
        q_old = _int(layout.CPU_QUOTA, g.text(layout.CPU_QUOTA, False))
        q_new = _int(layout.CPU_QUOTA, g.text(layout.CPU_QUOTA, True))
        p_old = _int(layout.CPU_PERIOD, g.text(layout.CPU_PERIOD, False)) or 100000.0
        p_new = _int(layout.CPU_PERIOD, g.text(layout.CPU_PERIOD, True)) or 100000.0

        def ratio(q: float | None, p: float) -> float:
            return INF if q is None or q < 0 or q == INF else q / p

        lo, hi = sorted((ratio(q_old, p_old), ratio(q_new, p_new)))
        quota_first = lo <= ratio(q_new, p_old) <= hi
        first, second = (
            (layout.CPU_QUOTA, layout.CPU_PERIOD) if quota_first else (layout.CPU_PERIOD, layout.CPU_QUOTA)
        )
        rest = [f for n, f in by_name.items() if n not in (first, second)]
        out.extend(step(f) for f in rest)
        out.extend((step(by_name[first]), step(by_name[second])))
        return out
    if resource == "memory" and layout.MEMORY_LIMIT in by_name:
        f = by_name[layout.MEMORY_LIMIT]
        memsw_path = f"{f.setting.directory}/{layout.MEMORY_MEMSW}"
        memsw = _int(layout.MEMORY_MEMSW, extra.get(memsw_path))
        new = _int(layout.MEMORY_LIMIT, f.setting.value)
        if memsw is not None and new is not None and memsw != INF and new > memsw:
            # memory.limit_in_bytes may never exceed memory.memsw.limit_in_bytes: raise it first.
            ms = replace(f.setting, filename=layout.MEMORY_MEMSW, value=f.setting.value)
            out.append(CgroupStep(ms, extra.get(memsw_path), resource, g.owner, g.pod))
    out.extend(step(f) for f in changed)
    return out


def _usage(g: _Group, extra: Mapping[str, str | None]) -> float | None:
    for f in g.files.values():
        if f.setting.controller is Controller.MEMORY:
            name = layout.MEMORY_USAGE_V1 if f.setting.version is CgroupVersion.V1 else layout.MEMORY_CURRENT
            return _int(name, extra.get(f"{f.setting.directory}/{name}"))
    return None


def usage_paths(node: NodeDiff) -> tuple[str, ...]:
    """Extra files `plan` reads: memory usage and v1 memory+swap of every cgroup whose memory changes."""
    return usage_paths_of(f.setting for f in node.changes)


def usage_paths_of(settings: Iterable[FileSetting]) -> tuple[str, ...]:
    """Memory usage and v1 memory+swap of the cgroups these memory files are in."""
    out: dict[str, None] = {}
    for s in settings:
        if s.controller is Controller.MEMORY:
            if s.version is CgroupVersion.V1:
                out[f"{s.directory}/{layout.MEMORY_USAGE_V1}"] = None
                out[f"{s.directory}/{layout.MEMORY_MEMSW}"] = None
            else:
                out[f"{s.directory}/{layout.MEMORY_CURRENT}"] = None
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Building the plan


def _container_values(g: _Group, desired: ContainerValues, resource: Resource) -> ContainerValues:
    """The full set to send: the resource being changed at its new value; during the memory phase the
    CPU limit stays at its current value so that CPU changes keep their own ordering."""
    if resource != "memory":
        return desired
    current_quota = g.text(layout.CPU_QUOTA, False)
    current_period = g.text(layout.CPU_PERIOD, False)
    if layout.CPU_MAX in g.files:
        text = g.text(layout.CPU_MAX, False)
        if text is not None:
            try:
                q, p = parse_cpu_max(text)
            except ValueError:
                return desired
            return replace(desired, cpu_quota=q if q > 0 else UNLIMITED, cpu_period=p)
        return desired
    try:
        quota = int(current_quota) if current_quota is not None else desired.cpu_quota
        period = int(current_period) if current_period is not None else desired.cpu_period
    except ValueError:
        return desired
    return replace(desired, cpu_quota=quota, cpu_period=period)


def _reclaim_target(usage: float, new_limit: float, current: float) -> int | None:
    """Seed 000's step toward usage: a limit a little above usage (5%, whole pages) so the kernel reclaims
    page cache down to it; None when that would not lower the current limit."""
    target = max(new_limit, usage + usage / 20)
    target = math.ceil(target / PAGE_SIZE) * PAGE_SIZE
    return int(target) if target < current else None


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


def _reclaim_container_step(
    g: _Group, target: int, desired: Mapping[tuple[str, str], ContainerValues]
) -> ContainerStep:
    """An UpdateContainerResources that lowers only the memory limit, to `target`: everything else
    stays at its current value."""
    assert g.pod is not None and g.container is not None and g.pod_uid is not None
    assert g.container_id is not None
    values = desired.get((g.pod, g.container))
    f = g.files.get(layout.MEMORY_LIMIT) or g.files.get(layout.MEMORY_MAX)
    assert values is not None and f is not None
    current = _current_container_values(g, values)
    change = FileDiff(replace(f.desired, setting=replace(f.setting, value=str(target))), f.current, True)
    return ContainerStep(
        g.pod,
        g.pod_uid,
        g.container,
        g.container_id,
        "memory",
        (change,),
        replace(current, memory_limit=target),
    )


def _current_container_values(g: _Group, desired: ContainerValues) -> ContainerValues:
    """The container's values as its cgroup shows them now (desired where a file is unreadable)."""
    cpu = _container_values(g, desired, "memory")
    shares = _int(layout.CPU_SHARES, g.text(layout.CPU_SHARES, False))
    mem = _memory_limit_of({n: g.text(n, False) for n in g.files})
    return replace(
        cpu,
        cpu_shares=int(shares) if shares is not None and shares != INF else desired.cpu_shares,
        memory_limit=UNLIMITED if mem == INF else int(mem),
    )


def _container_steps(
    groups: Iterable[_Group], resource: Resource, desired: Mapping[tuple[str, str], ContainerValues]
) -> list[ContainerStep]:
    out: list[ContainerStep] = []
    for g in groups:
        if g.pod is None or g.container is None or g.container_id is None or g.pod_uid is None:
            continue
        values = desired.get((g.pod, g.container))
        if values is None:
            continue
        out.append(
            ContainerStep(
                g.pod,
                g.pod_uid,
                g.container,
                g.container_id,
                resource,
                tuple(g.changed(resource)),
                _container_values(g, values, resource),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# The invariant: replay the plan and check every parent/child pair after every step


def _parent_key(g: _Group, groups: Mapping[tuple[str, str, str], _Group]) -> tuple[str, str, str] | None:
    if g.owner is Owner.CONTAINER:
        key = (Owner.POD.value, str(g.cgroup), "")
        return key if key in groups else None
    name = g.cgroup.parent
    while name.parts:
        for owner in (Owner.POD, Owner.TIER):
            key = (owner.value, str(name), "")
            if key in groups:
                return key
        name = name.parent
    return None


def _cpu_limit_of(texts: Mapping[str, str | None]) -> float:
    if layout.CPU_MAX in texts:
        text = texts[layout.CPU_MAX]
        if text is None:
            return INF
        try:
            quota, period = parse_cpu_max(text)
        except ValueError:
            return INF
        return INF if quota < 0 else quota / period
    q = _int(layout.CPU_QUOTA, texts.get(layout.CPU_QUOTA))
    p = _int(layout.CPU_PERIOD, texts.get(layout.CPU_PERIOD))
    if q is None or q == INF or q < 0:
        return INF
    return q / (p or 100000.0)


def _memory_limit_of(texts: Mapping[str, str | None]) -> float:
    for name in (layout.MEMORY_LIMIT, layout.MEMORY_MAX):
        if name in texts:
            mem = _int(name, texts[name])
            return INF if mem is None else mem
    return INF


_Key = tuple[str, str, str]


def _pod_level_limited(node: NodeDiff) -> dict[str, set[Resource]]:
    """Per pod key, the resources with a pod-level limit: there the containers may sum above it."""
    out: dict[str, set[Resource]] = {}
    for p in node.computation.pods:
        lim = p.pod.pod_limits
        out[p.pod.key] = set()
        if lim is not None and lim.cpu_milli is not None:
            out[p.pod.key].add("cpu")
        if lim is not None and lim.memory is not None:
            out[p.pod.key].add("memory")
    return out


_EPS = 1e-9


def _touches_pod_memory(step: Step) -> bool:
    if isinstance(step, RestartStep):
        return "memory" in step.resources
    if isinstance(step, CgroupStep):
        return step.resource == "memory" and step.owner is not Owner.TIER
    return step.resource == "memory"


def check_invariants(node: NodeDiff, plan: Plan) -> str | None:
    """Replay `plan` from the observed state: describe the first step after which a child's CPU limit
    (quota/period) or memory limit exceeds its parent's when it did not before; None when safe.
    An unlimited child is fine (the kernel allows it under a limited parent).

    A second rule, the KEP's: where a pod's limit is the sum of its containers' (no pod-level limit),
    the containers' limits may not sum above the pod's at any step, beyond what the starting or the
    final state already shows (per-container minimum quotas can make a tiny sum round above the pod's).
    A restarted container counts as gone from its RestartStep on."""
    groups = _groups(node)
    texts: dict[_Key, dict[str, str | None]] = {
        k: {name: f.current for name, f in g.files.items()} for k, g in groups.items()
    }
    final: dict[_Key, dict[str, str | None]] = {
        k: {name: f.setting.value for name, f in g.files.items()} for k, g in groups.items()
    }
    parents = {k: _parent_key(g, groups) for k, g in groups.items()}
    children: dict[_Key, list[_Key]] = defaultdict(list)
    for k, p in parents.items():
        if p is not None:
            children[p].append(k)
    pod_limited = _pod_level_limited(node)
    removed: set[_Key] = set()

    def limit(key: _Key, res: Resource, state: Mapping[_Key, Mapping[str, str | None]]) -> float:
        if key in removed and state is texts:
            return INF
        return _cpu_limit_of(state[key]) if res == "cpu" else _memory_limit_of(state[key])

    def violations(key: _Key, res: Resource) -> set[tuple[_Key, _Key]]:
        pairs = [(c, key) for c in children.get(key, ())]
        parent = parents.get(key)
        if parent is not None:
            pairs.append((key, parent))
        return {
            (c, p)
            for c, p in pairs
            if not (res == "memory" and groups[p].owner is Owner.TIER)  # a tier's memory is no containment
            and limit(c, res, texts) != INF
            and limit(c, res, texts) > limit(p, res, texts)
        }

    def excess(pod: _Key, res: Resource, state: Mapping[_Key, Mapping[str, str | None]]) -> float:
        """sum(container limits) - pod limit, -INF where the rule does not apply."""
        g = groups[pod]
        if g.owner is not Owner.POD or res in pod_limited.get(g.pod or "", set()):
            return -INF
        kids = [
            c
            for c in children.get(pod, ())
            if groups[c].owner is Owner.CONTAINER and not (c in removed and state is texts)
        ]
        pod_limit = limit(pod, res, state)
        if not kids or pod_limit == INF:
            return -INF
        values = [limit(c, res, state) for c in kids]
        if INF in values:
            return -INF
        return sum(values) - pod_limit

    # qos-reserved: while any pod or container memory value changes, each tier's limit stays at or below
    # both its starting and its final value (what protects the old and the new higher-tier requests)
    reserve = reserve_tiers(node)
    protect: dict[_Key, float] = {}
    for k, g in groups.items():
        if g.owner is Owner.TIER and str(g.cgroup) in reserve:
            end = {name: (f.setting.value if f.differs else f.current) for name, f in g.files.items()}
            protect[k] = min(_memory_limit_of(texts[k]), _memory_limit_of(end))

    allowed: dict[tuple[_Key, Resource], float] = {}
    for k, g in groups.items():
        if g.owner is Owner.POD:
            for res in ("cpu", "memory"):
                allowed[(k, res)] = max(0.0, excess(k, res, texts), excess(k, res, final))

    for step in plan.steps:
        exposed = _touches_pod_memory(step) and next(
            (t for t, bound in protect.items() if _memory_limit_of(texts[t]) > bound), None
        )
        if exposed:
            where_ = step.path if isinstance(step, CgroupStep) else f"container {step.container}"
            return (
                f"{where_} changes a pod's memory while QoS tier {exposed[1]} is at "
                f"{_memory_limit_of(texts[exposed])}, above the {protect[exposed]} that protects the "
                "higher tiers' memory requests (qos-reserved)"
            )
        if isinstance(step, RestartStep):
            key: _Key = (Owner.CONTAINER.value, str(step.cgroup), step.container)
            removed.add(key)
            continue
        if step.resource == "hugetlb":
            continue
        if isinstance(step, CgroupStep):
            key = (step.owner.value, str(step.setting.cgroup), "")
            changes = {step.setting.filename: step.setting.value}
        else:
            key = (Owner.CONTAINER.value, str(step.changes[0].setting.cgroup), step.container)
            changes = {c.setting.filename: c.setting.value for c in step.changes}
        if key not in texts:
            continue
        before = violations(key, step.resource)
        texts[key].update(changes)
        new = violations(key, step.resource) - before
        where = step.path if isinstance(step, CgroupStep) else f"container {step.container}"
        if new:
            child, parent = sorted(new)[0]
            who = child[1] + (f" container {child[2]}" if child[2] else "")
            return f"after {where}, {who} would exceed its parent {parent[1]} in {step.resource}"
        pod = key if groups[key].owner is Owner.POD else parents.get(key)
        if pod is not None and groups[pod].owner is Owner.POD:
            res = step.resource
            if excess(pod, res, texts) > allowed.get((pod, res), 0.0) + _EPS:
                return f"after {where}, the containers of {pod[1]} would sum above the pod's {res} limit"
    return None
