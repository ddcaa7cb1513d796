"""The replay that refuses a plan: after every step, no child above its parent (per resource, containers
summed within their pod) and no pod memory step while a qos-reserved tier is above both its old and new
limit."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from agent.core.diff import NodeDiff, Owner
from agent.core.plan.groups import _Group, _groups
from agent.core.plan.tiers import reserve_tiers
from agent.core.plan.types import INF, CgroupStep, Plan, Resource, RestartStep, Step
from agent.core.plan.values import _cpu_limit_of, _memory_limit_of


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
