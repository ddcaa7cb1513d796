"""Whether VPA's updater would resize a pod's pod-level resources now, and to what (one pod, pure): the
entry point the VPA source calls for a pod that sets `spec.resources` (docs/vpa-pod-level.md).

The conditions are decide()'s (agent.vpa.policy), over the pod-level values as AEP-7571 has the updater
weigh them (#9340 GetUpdatePriority): a pod-level or managed container request outside its recommended
range, or the pod lived podLifetimeThreshold and the summed relative change (pod level plus managed
containers) is at least minChange, or a quick OOM, or a reaction. Beyond that, for the node and the API:
- a pod that sets both levels: the pod level and the containers that set their own resources are sized
  together (AEP-7571's selected option 2); containers without resources are never given any;
- a memory limit (pod level or container) that would go down stops at the working set + the margin, and
  waits while no working set is read;
- containers are fitted into the new pod values in the same resize, as the API server validates them
  (validatePodResourceConsistency): a container limit above the new pod limit is lowered to it, the
  containers' requests are scaled down together when their aggregate would exceed the new pod request;
  a container whose policy is Off, an init container or a sidecar is never moved (the resize is refused);
- the QoS class is kept (ValidatePodResize refuses any change), and the containers the kubelet restarts
  because of their resizePolicy (an inherited pod limit that changes, KEP-5419) are named.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from agent.core.compute.aggregate import aggregate, pod_level_resources_set
from agent.core.compute.qos import compute_qos
from agent.core.model import EMPTY, ContainerKind, ContainerView, PodView, ResizePolicy
from agent.vpa.model import VPA, PodRecommendation, PodScalingMode
from agent.vpa.podlevel import (
    ALL,
    RESOURCES,
    PodBounds,
    PodTarget,
    capped_recommendation,
    get,
    pod_recommendation,
    pod_target,
    put,
)
from agent.vpa.policy import (
    SAME,
    ContainerTarget,
    Options,
    container_target,
    hold_memory_at_usage,
    not_actuated_because,
    update_priority,
)


@dataclass(frozen=True, slots=True)
class PodUsage:
    """What the node read of the pod: the pod cgroup's working set (None: not read yet, so a memory limit
    decrease waits) and each container's (a managed container's own limit decrease waits for its own)."""

    memory: int | None = None
    containers: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class PodLevelVerdict:
    """What to do with one pod-level pod: `pod` (new `spec.resources`, None when unchanged) and the
    `containers` that move with it, in one resize, when `apply`; why; `recommendation`: the pod-level
    one as capped (for `explain`); `notes`: what capped it; `held`: memory limits kept above it;
    `restarts`: containers the kubelet restarts for it (their resizePolicy)."""

    apply: bool
    reason: str
    pod: PodTarget | None = None
    containers: tuple[ContainerTarget, ...] = ()
    recommendation: PodRecommendation | None = None
    notes: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    restarts: tuple[str, ...] = ()


def _owns_resources(c: ContainerView) -> bool:
    return c.requests.has_cpu_or_memory() or c.limits.has_cpu_or_memory()


def managed_targets(pod: PodView, vpa: VPA) -> tuple[ContainerTarget, ...]:
    """The regular containers that set their own resources and have a recommendation, sized as decide()
    sizes them (policy Off: left out)."""
    out = []
    for c in pod.containers:
        rec = vpa.recommendation_for(c.name)
        t = container_target(c, rec, vpa.policy_for(c.name)) if rec is not None and _owns_resources(c) else None
        if t is not None:
            out.append(t)
    return tuple(out)


def _pod_priority(pod: PodView, rec: PodRecommendation, controlled: frozenset[str]) -> tuple[bool, float]:
    """(pod-level request outside [lower, upper], relative change), VPA's milli-units."""
    outside, diff = False, 0.0
    requests = pod.pod_requests or EMPTY
    for res in RESOURCES:
        target, req = get(rec.target, res), get(requests, res)
        if res not in controlled or target is None:
            continue
        if req is None:
            outside = True
            continue
        lo, hi = get(rec.lower, res), get(rec.upper, res)
        outside = outside or (lo is not None and req < lo) or (hi is not None and req > hi)
        diff += abs(req - target) / max(req, 1)
    return outside, diff


def hold_pod_memory(pod: PodView, t: PodTarget, usage: int | None, margin: float) -> tuple[PodTarget, str | None]:
    """A pod-level memory limit that would go down is kept at least at the pod cgroup's working set + the
    margin, never above where it is; with no working set read, the decrease waits. The request is held
    in the pod's own limit/request ratio."""
    new, current = t.limits.memory, (pod.pod_limits or EMPTY).memory
    if new is None or current is None or new >= current:
        return t, None
    floor = current if usage is None else min(current, math.ceil(usage * (1 + margin)))
    if new >= floor:
        return t, None
    requests, old_req = t.requests, (pod.pod_requests or EMPTY).memory
    if old_req is not None and requests.memory is not None:
        requests = replace(requests, memory=max(requests.memory, floor * old_req // current))
    why = (
        f"pod: memory held at limit {floor} (no working set read yet)"
        if usage is None
        else f"pod: memory held at limit {floor} (working set {usage} + {margin:.0%}), not {new}"
    )
    return PodTarget(requests, replace(t.limits, memory=floor)), why


def _with(pod: PodView, t: PodTarget, targets: Mapping[str, ContainerTarget]) -> PodView:
    containers = tuple(
        replace(c, requests=targets[c.name].requests, limits=targets[c.name].limits) if c.name in targets else c
        for c in pod.containers
    )
    return replace(pod, containers=containers, pod_requests=t.requests, pod_limits=t.limits, status_qos=None)


def fit_containers(
    pod: PodView, vpa: VPA, t: PodTarget, targets: tuple[ContainerTarget, ...]
) -> tuple[tuple[ContainerTarget, ...], str | None]:
    """The container targets with every container fitted into the new pod values (or why it cannot be):
    no container limit above the pod limit, the aggregate of the containers' requests at most the pod
    request. Only regular containers whose policy is not Off move; their limits stay (still at least
    their lowered requests)."""
    moved = {x.container: x for x in targets}
    movable = {c.name for c in pod.containers if not ((p := vpa.policy_for(c.name)) is not None and p.off)}
    for res in RESOURCES:
        cap = get(t.limits, res)
        for c in (*pod.init_containers, *pod.containers):
            cur = moved.get(c.name) or ContainerTarget(c.name, c.requests, c.limits)
            lim = get(cur.limits, res)
            if cap is None or not lim or lim <= cap:
                continue
            if c.kind is not ContainerKind.REGULAR or c.name not in movable:
                return targets, f"container {c.name}: its {res} limit {lim} would be above the new pod limit {cap}"
            req = get(cur.requests, res)
            moved[c.name] = ContainerTarget(
                c.name, put(cur.requests, res, min(req, cap)) if req is not None else cur.requests, put(cur.limits, res, cap)
            )
        budget = get(t.requests, res)
        agg = aggregate(_with(pod, t, moved), pick_limits=False)
        total = get(agg.total, res)
        if budget is None or total is None or total <= budget:
            continue
        scaled = [moved.get(c.name) or ContainerTarget(c.name, c.requests, c.limits) for c in pod.containers]
        scaled = [x for x in scaled if x.container in movable and get(x.requests, res)]
        share = sum(get(x.requests, res) or 0 for x in scaled)
        room = budget - ((get(agg.running, res) or 0) - share)
        if share == 0 or room <= 0:
            return targets, f"the containers' {res} requests ({total}) would be above the new pod request {budget}"
        for x in scaled:
            moved[x.container] = replace(x, requests=put(x.requests, res, (get(x.requests, res) or 0) * room // share))
        after = get(aggregate(_with(pod, t, moved), pick_limits=False).total, res)
        if after is not None and after > budget:
            return targets, f"an init container's {res} request is above the new pod request {budget}"
    changed = tuple(
        y for c in pod.containers if (y := moved.get(c.name)) is not None and (y.requests, y.limits) != (c.requests, c.limits)
    )
    return changed, None


def restarted(pod: PodView, t: PodTarget, targets: tuple[ContainerTarget, ...]) -> tuple[str, ...]:
    """Containers whose resizePolicy for a resource is RestartContainer and whose values for it change:
    their own, or the pod limit they inherit for want of their own (KEP-5419)."""
    by_name = {x.container: x for x in targets}
    out = []
    old_lim = pod.pod_limits or EMPTY
    for c in pod.containers:
        for res in RESOURCES:
            if c.resize_policy.get(res) is not ResizePolicy.RESTART_CONTAINER:
                continue
            x = by_name.get(c.name)
            own = x is not None and (get(x.requests, res), get(x.limits, res)) != (get(c.requests, res), get(c.limits, res))
            inherited = not get(c.limits, res) and get(t.limits, res) != get(old_lim, res)
            if own or inherited:
                out.append(f"{c.name} ({res})")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _Sized:
    """The pod-level target and the managed containers' before any gate on when (the updater's) or how
    far (the working set): what both the node and the admission policy start from."""

    rec: PodRecommendation
    notes: tuple[str, ...]
    target: PodTarget
    managed: tuple[ContainerTarget, ...]
    moving: tuple[ContainerTarget, ...]


def _size(pod: PodView, vpa: VPA, bounds: PodBounds | None) -> _Sized | PodLevelVerdict:
    """Steps 2-4 of docs/vpa-pod-level.md (recommendation, capping, target), or why nothing moves."""
    if not pod_level_resources_set(pod):
        return PodLevelVerdict(False, "the pod sets no pod-level resources (its containers are decided alone)")
    policy = vpa.pod_policy
    if policy is not None and policy.mode is PodScalingMode.OFF:
        return PodLevelVerdict(False, "podPolicy mode Off leaves the pod-level resources alone")
    raw = pod_recommendation(pod, vpa)
    if raw is None:
        return PodLevelVerdict(False, "the VPA has no recommendation yet")
    rec, notes = capped_recommendation(pod, raw, policy, bounds)
    t = pod_target(pod, rec.target, policy)
    managed = managed_targets(pod, vpa)
    moving = tuple(x for x in managed if (x.requests, x.limits) != _values(pod, x.container))
    if (t.requests, t.limits) == (pod.pod_requests or EMPTY, pod.pod_limits or EMPTY) and not moving:
        return PodLevelVerdict(False, SAME, recommendation=rec, notes=notes)
    return _Sized(rec, notes, t, managed, moving)


def _fitted(pod: PodView, vpa: VPA, s: _Sized, t: PodTarget, moving: tuple[ContainerTarget, ...],
            held: tuple[str, ...], why_now: str) -> PodLevelVerdict:
    """Steps 7-9: the containers fitted into `t`, the result valid and of the pod's QoS class."""
    rec, notes = s.rec, s.notes
    containers, refused = fit_containers(pod, vpa, t, moving)
    if refused is not None:
        return PodLevelVerdict(False, refused, recommendation=rec, notes=notes, held=held)
    unchanged = (t.requests, t.limits) == (pod.pod_requests or EMPTY, pod.pod_limits or EMPTY)
    if unchanged and not containers:
        return PodLevelVerdict(False, "a memory decrease waits for the working set to allow it", recommendation=rec, notes=notes, held=held)
    for res in RESOURCES:
        req, lim = get(t.requests, res), get(t.limits, res)
        if req is not None and lim is not None and req > lim:
            return PodLevelVerdict(False, f"the pod-level {res} request {req} would be above its limit {lim}", recommendation=rec, notes=notes)
    after = _with(pod, t, {x.container: x for x in containers})
    if compute_qos(after).qos is not compute_qos(replace(pod, status_qos=None)).qos:
        return PodLevelVerdict(False, "the recommendation would change the pod's QoS class", recommendation=rec, notes=notes)
    return PodLevelVerdict(True, why_now, None if unchanged else t, containers, rec, notes, held, restarted(pod, t, containers))


def decide_pod_level(
    pod: PodView,
    vpa: VPA,
    age_s: float | None,
    quick_oom: bool,
    opts: Options,
    usage: PodUsage | None = None,
    bounds: PodBounds | None = None,
    reaction: str | None = None,
) -> PodLevelVerdict:
    """decide() for a pod that sets pod-level resources. `usage`: what the node read (None: not capped
    at all, as VPA itself); `bounds`: the namespace's LimitRange type Pod (agent.vpa.podlevel.pod_bounds);
    `reaction`: why the node reacts now (agent.vpa.react), which need not wait."""
    why = not_actuated_because(vpa, opts)
    if why is not None:
        return PodLevelVerdict(False, why)
    s = _size(pod, vpa, bounds)
    if isinstance(s, PodLevelVerdict):
        return s
    rec, notes, t, moving = s.rec, s.notes, s.target, s.moving
    policy = vpa.pod_policy
    outside, diff = _pod_priority(pod, rec, policy.controlled if policy is not None else ALL)
    names = {x.container for x in s.managed}
    c_out, c_diff = update_priority(replace(pod, containers=tuple(c for c in pod.containers if c.name in names)), vpa)
    outside, diff = outside or c_out, diff + c_diff
    if not outside and not quick_oom and reaction is None:
        if age_s is None or age_s < opts.pod_lifetime_s:
            return PodLevelVerdict(False, "within the recommended range and the pod is younger than podLifetimeThreshold", recommendation=rec, notes=notes)
        if diff < opts.min_change:
            return PodLevelVerdict(False, f"within the recommended range and the change ({diff:.0%}) is below {opts.min_change:.0%}", recommendation=rec, notes=notes)
    why_now = reaction or ("quick OOM" if quick_oom else "a request outside the recommended range" if outside else f"a {diff:.0%} change")
    held: list[str] = []
    if usage is not None:
        t, note = hold_pod_memory(pod, t, usage.memory, opts.usage_margin)
        held += [note] if note else []
        kept = []
        for x in moving:
            c = next(c for c in pod.containers if c.name == x.container)
            x, note = hold_memory_at_usage(x, c, (usage.containers or {}).get(c.name), opts.usage_margin)
            held += [note] if note else []
            kept.append(x)
        moving = tuple(kept)
    return _fitted(pod, vpa, s, t, moving, tuple(held), why_now)


def at_creation(pod: PodView, vpa: VPA, bounds: PodBounds | None) -> PodLevelVerdict:
    """The same sizing for a pod not created yet (the VPA admission policy, agent.vpa.admission): as VPA's
    admission controller, no updater condition (a new pod takes the recommendation whatever it differs
    by) and no working set (nothing runs yet); the gates on the VPA itself (opt-in, updateMode Off) are
    the caller's."""
    s = _size(pod, vpa, bounds)
    if isinstance(s, PodLevelVerdict):
        return s
    return _fitted(pod, vpa, s, s.target, s.moving, (), "a new pod")


def _values(pod: PodView, name: str) -> tuple[object, object]:
    c = next(c for c in pod.containers if c.name == name)
    return c.requests, c.limits
