"""Ordering changes so that a child never exceeds its parent (pure).

Per resource — memory first, then CPU, as the kubelet actuates — the steps run in four phases:
  A. pod and tier cgroups whose limit grows, parents first;
  B. containers whose limit shrinks;
  C. pod and tier cgroups whose limit shrinks, children first;
  D. containers whose limit grows.
Whatever the starting and final states, if the final state has every child within its parent, every
intermediate state does too: a parent only shrinks once its children are at or below their final
values, and a child only grows once its parent is at its final value. `check_invariants` replays a plan
and refuses it if any step would break the rule. Within one v1 cgroup, CFS period and quota are
written in the order that keeps the quota/period ratio between its old and new values (the kernel
compares ratios), and memory+swap is raised before the memory limit when it would be exceeded.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from agent.diff import FileDiff, NodeDiff, Owner
from agent.model import UNLIMITED, ContainerID, ContainerValues, PodUID, Problem
from cgroupfs import layout
from cgroupfs.convert import parse_cpu_max
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


Step = CgroupStep | ContainerStep


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[Step, ...]
    warnings: tuple[Problem, ...] = ()
    errors: tuple[Problem, ...] = ()


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
    out: dict[str, None] = {}
    for f in node.changes:
        s = f.setting
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


def build_plan(
    node: NodeDiff,
    extra: Mapping[str, str | None] | None = None,
    *,
    include_containers: bool = True,
) -> Plan:
    """The ordered steps that take the observed state to the desired one (only differing values)."""
    extra = extra or {}
    groups = _groups(node)
    desired_containers: dict[tuple[str, str], ContainerValues] = {
        (p.pod.key, c.container.name): c.values for p in node.computation.pods for c in p.containers
    }
    errors: list[Problem] = []
    warnings: list[Problem] = []
    blocked_memory: set[str] = set()  # pods (or tiers, by cgroup) whose memory changes are held back

    # The memory-usage guard: a limit is lowered only when usage is below the new limit.
    for g in groups.values():
        if g.direction("memory") >= 0:
            continue
        usage = _usage(g, extra)
        new_limit = g.memory_limit(True)
        if usage is not None and new_limit != INF and usage > new_limit:
            who = g.pod or str(g.cgroup)
            what = f"container {g.container!r}" if g.container else f"cgroup {g.cgroup}"
            errors.append(
                Problem(
                    g.pod,
                    f"{what}: memory limit {int(new_limit)} is below current usage {int(usage)}; "
                    "not lowering it (retried later)",
                )
            )
            blocked_memory.add(who)

    steps: list[Step] = []
    for resource in RESOURCE_ORDER:
        parents = [g for g in groups.values() if g.owner is not Owner.CONTAINER and g.changed(resource)]
        containers = [g for g in groups.values() if g.owner is Owner.CONTAINER and g.changed(resource)]
        if resource == "memory":
            parents = [g for g in parents if (g.pod or str(g.cgroup)) not in blocked_memory]
            containers = [g for g in containers if g.pod not in blocked_memory]
        grow = sorted((g for g in parents if g.direction(resource) >= 0), key=lambda g: (g.depth, g.key))
        shrink = sorted((g for g in parents if g.direction(resource) < 0), key=lambda g: (-g.depth, g.key))
        c_down = sorted((g for g in containers if g.direction(resource) < 0), key=lambda g: g.key)
        c_up = sorted((g for g in containers if g.direction(resource) >= 0), key=lambda g: g.key)
        for g in grow:
            steps.extend(_ordered_cgroup_writes(g, resource, extra))
        if include_containers:
            steps.extend(_container_steps(c_down, resource, desired_containers))
        for g in shrink:
            steps.extend(_ordered_cgroup_writes(g, resource, extra))
        if include_containers:
            steps.extend(_container_steps(c_up, resource, desired_containers))

    plan = Plan(tuple(steps), tuple(warnings), tuple(errors))
    violation = check_invariants(node, plan)
    if violation is not None:
        return Plan((), plan.warnings, (*plan.errors, Problem(None, f"plan refused: {violation}")))
    return plan


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


def check_invariants(node: NodeDiff, plan: Plan) -> str | None:
    """Replay `plan` from the observed state: describe the first step after which a child's CPU limit
    (quota/period) or memory limit exceeds its parent's when it did not before; None when safe.
    An unlimited child is fine (the kernel allows it under a limited parent)."""
    groups = _groups(node)
    texts: dict[_Key, dict[str, str | None]] = {
        k: {name: f.current for name, f in g.files.items()} for k, g in groups.items()
    }
    parents = {k: _parent_key(g, groups) for k, g in groups.items()}
    children: dict[_Key, list[_Key]] = defaultdict(list)
    for k, p in parents.items():
        if p is not None:
            children[p].append(k)

    def limit(key: _Key, res: Resource) -> float:
        return _cpu_limit_of(texts[key]) if res == "cpu" else _memory_limit_of(texts[key])

    def violations(key: _Key, res: Resource) -> set[tuple[_Key, _Key]]:
        pairs = [(c, key) for c in children.get(key, ())]
        parent = parents.get(key)
        if parent is not None:
            pairs.append((key, parent))
        return {(c, p) for c, p in pairs if limit(c, res) != INF and limit(c, res) > limit(p, res)}

    for step in plan.steps:
        if step.resource == "hugetlb":
            continue
        if isinstance(step, CgroupStep):
            key: _Key = (step.owner.value, str(step.setting.cgroup), "")
            changes = {step.setting.filename: step.setting.value}
        else:
            key = (Owner.CONTAINER.value, str(step.changes[0].setting.cgroup), step.container)
            changes = {c.setting.filename: c.setting.value for c in step.changes}
        if key not in texts:
            continue
        before = violations(key, step.resource)
        texts[key].update(changes)
        new = violations(key, step.resource) - before
        if new:
            child, parent = sorted(new)[0]
            where = step.path if isinstance(step, CgroupStep) else f"container {step.container}"
            who = child[1] + (f" container {child[2]}" if child[2] else "")
            return f"after {where}, {who} would exceed its parent {parent[1]} in {step.resource}"
    return None
