"""What a VPA recommendation makes of a pod's containers, and whether VPA's updater would act now (pure).

Each rule is VPA's own, named where it lives in kubernetes/autoscaler (vertical-pod-autoscaler/pkg):
- capping (utils/vpa/capping.go): target, lower and upper bounds clamped to the container policy's
  minAllowed, then maxAllowed; with controlledValues RequestsOnly, a recommendation above the container's
  current limit is capped to that limit;
- limits (utils/vpa/limit_and_request_scaling.go GetProportionalLimit): under RequestsAndLimits a limit
  keeps its ratio to the request, floor(limit × new request / request), in millicores for CPU and bytes
  for memory; limit == request gives limit = new request; no request gives limit = new request; no
  limit (or a zero one) gives none;
- when (updater/priority): a request outside [lowerBound, upperBound] of any container, or the pod lived
  at least podLifetimeThreshold (12 h) and the summed relative change Σ_resource |Σrec − Σreq| / Σreq
  (milli-units) is ≥ 0.1, or a quick OOM that changes something.
Beyond VPA, for the node: a change that would move the pod to another QoS class is refused (the API
server refuses it anyway); a pod with pod-level resources is decided by agent.vpa.podlevel_decide instead.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from agent.core.compute.qos import compute_qos
from agent.core.model import POD as POD  # re-exported: the target that carries `spec.resources`
from agent.core.model import ContainerView, PodView, Resources
from agent.vpa.defaults import MIN_CHANGE, POD_LIFETIME_S
from agent.vpa.model import VPA, ContainerPolicy, ControlledValues, Recommendation, UpdateMode

INT64_MAX: Final = 2**63 - 1
IN_PLACE_MODES: Final = frozenset({UpdateMode.IN_PLACE, UpdateMode.IN_PLACE_OR_RECREATE})
RECREATE_MODES: Final = frozenset({UpdateMode.RECREATE, UpdateMode.AUTO})
SAME: Final = "the recommendation is what the pod has"


@dataclass(frozen=True, slots=True)
class Options:
    actuate_all: bool = False  # vpa.actuate: all (no per-VPA opt-in needed)
    treat_recreate_as_in_place: bool = False  # vpa.treatRecreateAsInPlace
    pod_lifetime_s: float = POD_LIFETIME_S  # vpa.podLifetimeThreshold
    min_change: float = MIN_CHANGE
    usage_margin: float = (
        0.1  # vpa.memoryUsageMargin: a memory limit never goes below working set × (1 + this)
    )


def not_actuated_because(vpa: VPA, opts: Options) -> str | None:
    """Why the agent leaves this VPA's pods alone, or None when it may change them in place."""
    if not vpa.opted_in and not opts.actuate_all:
        return "the VPA does not opt in (annotation kube-cgroup-agent.io/vpa-actuator: node)"
    if vpa.mode in (UpdateMode.OFF, UpdateMode.INITIAL):
        return f"updateMode {vpa.mode.value} changes no running pod"
    if vpa.mode in RECREATE_MODES and not opts.treat_recreate_as_in_place:
        return f"updateMode {vpa.mode.value} is the VPA updater's (set vpa.treatRecreateAsInPlace to act in place)"
    return None


def clamp(v: int | None, lo: int | None, hi: int | None) -> int | None:
    """`v` within [lo, hi], either bound absent; None stays None."""
    if v is None:
        return None
    if lo is not None and v < lo:
        v = lo
    if hi is not None and v > hi:
        v = hi
    return v


def capped(r: Resources, policy: ContainerPolicy | None, limits: Resources | None = None) -> Resources:
    """`r` within the policy's [minAllowed, maxAllowed] (minimum first, as VPA applies them); with
    RequestsOnly also at most the container's current limit (`limits`)."""
    if policy is None:
        return r
    cpu = clamp(r.cpu_milli, policy.min_allowed.cpu_milli, policy.max_allowed.cpu_milli)
    memory = clamp(r.memory, policy.min_allowed.memory, policy.max_allowed.memory)
    if policy.values is ControlledValues.REQUESTS_ONLY and limits is not None:
        cpu = clamp(cpu, None, limits.cpu_milli)
        memory = clamp(memory, None, limits.memory)
    return Resources(cpu, memory)


def proportional_limit(limit: int | None, request: int | None, new_request: int | None) -> int | None:
    """GetProportionalLimit for one resource, in its integer unit (millicores, bytes)."""
    if not limit:
        return None
    if not new_request:
        return None
    if not request or request == limit:
        return new_request
    return min(limit * new_request // request, INT64_MAX)


@dataclass(frozen=True, slots=True)
class ContainerTarget:
    container: str
    requests: Resources
    limits: Resources


def container_target(
    c: ContainerView, rec: Recommendation, policy: ContainerPolicy | None
) -> ContainerTarget | None:
    """The container's requests and limits under the recommendation; None when its policy is Off."""
    if policy is not None and policy.off:
        return None
    controlled = policy.controlled if policy is not None else frozenset({"cpu", "memory"})
    target = capped(rec.target, policy, c.limits)
    new_cpu = (
        target.cpu_milli if "cpu" in controlled and target.cpu_milli is not None else c.requests.cpu_milli
    )
    new_mem = target.memory if "memory" in controlled and target.memory is not None else c.requests.memory
    requests = replace(c.requests, cpu_milli=new_cpu, memory=new_mem)
    limits = c.limits
    if policy is None or policy.values is ControlledValues.REQUESTS_AND_LIMITS:
        cpu_limit, mem_limit = limits.cpu_milli, limits.memory
        if "cpu" in controlled and new_cpu != c.requests.cpu_milli:
            cpu_limit = proportional_limit(limits.cpu_milli, c.requests.cpu_milli, new_cpu)
        if "memory" in controlled and new_mem != c.requests.memory:
            mem_limit = proportional_limit(limits.memory, c.requests.memory, new_mem)
        limits = replace(limits, cpu_milli=cpu_limit, memory=mem_limit)
    return ContainerTarget(c.name, requests, limits)


def clamped_targets(pod: PodView, vpa: VPA) -> tuple[ContainerTarget, ...]:
    """Every container's requests and limits under the VPA's recommendation, whether or not the updater
    would act now (what `explain` shows); containers with no recommendation or a policy Off are left out."""
    out = []
    for c in pod.containers:
        rec = vpa.recommendation_for(c.name)
        t = container_target(c, rec, vpa.policy_for(c.name)) if rec is not None else None
        if t is not None:
            out.append(t)
    return tuple(out)


def api_resources(t: ContainerTarget) -> dict[str, dict[str, str]]:
    """The target as the API writes a container's resources (millicores, bytes): what a proposal carries
    and what a pods/resize patch sends."""
    return api_values(t.requests, t.limits)


def api_values(requests: Resources, limits: Resources) -> dict[str, dict[str, str]]:
    """Requests and limits as the API writes them (cpu in millicores, memory in bytes), for a container's
    resources or a pod's `spec.resources`."""
    out: dict[str, dict[str, str]] = {}
    for kind, r in (("requests", requests), ("limits", limits)):
        values = {}
        if r.cpu_milli is not None:
            values["cpu"] = f"{r.cpu_milli}m"
        if r.memory is not None:
            values["memory"] = str(r.memory)
        if values:
            out[kind] = values
    return out


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with one pod: `targets` to apply when `apply`, and why (shown by `explain`). `held`
    names the memory limits kept above the recommendation because the container uses more; `restarts`
    the containers the kubelet restarts for it (their resizePolicy, a pod-level resize)."""

    apply: bool
    reason: str
    targets: tuple[ContainerTarget, ...] = ()
    held: tuple[str, ...] = ()
    restarts: tuple[str, ...] = ()


def hold_memory_at_usage(
    t: ContainerTarget, c: ContainerView, usage: int | None, margin: float
) -> tuple[ContainerTarget, str | None]:
    """Beyond VPA (the updater cannot see usage): a memory limit that would go down is kept at least at
    the working set plus the margin, and never above where it is; with no usage known yet, a decrease
    waits. The request is held in the same proportion (limit/request as the pod has it), so the next
    decision, once usage allows, still scales the limit with VPA's ratio."""
    new, current = t.limits.memory, c.limits.memory
    if new is None or current is None or new >= current:
        return t, None
    floor = current if usage is None else min(current, math.ceil(usage * (1 + margin)))
    if new >= floor:
        return t, None
    requests = t.requests
    if c.requests.memory is not None and t.requests.memory is not None:
        requests = replace(requests, memory=max(t.requests.memory, floor * c.requests.memory // current))
    why = (
        f"{c.name}: memory held at limit {floor} (no working set read yet)"
        if usage is None
        else f"{c.name}: memory held at limit {floor} (working set {usage} + {margin:.0%}), not {new}"
    )
    return ContainerTarget(t.container, requests, replace(t.limits, memory=floor)), why


def _priority(pod: PodView, vpa: VPA) -> tuple[bool, float]:
    """(a request outside its bounds, the summed relative change): GetUpdatePriority over the capped
    recommendation, milli-units for both resources as VPA sums them."""
    outside = False
    total_req: dict[str, int] = {}
    total_rec: dict[str, int] = {}
    for c in pod.containers:
        rec = vpa.recommendation_for(c.name)
        if rec is None:
            continue
        policy = vpa.policy_for(c.name)
        target, lower, upper = (capped(x, policy, c.limits) for x in (rec.target, rec.lower, rec.upper))
        for res, rec_v, lo, hi, req in (
            ("cpu", target.cpu_milli, lower.cpu_milli, upper.cpu_milli, c.requests.cpu_milli),
            ("memory", target.memory, lower.memory, upper.memory, c.requests.memory),
        ):
            if rec_v is None or (policy is not None and res not in policy.controlled):
                continue
            scale = 1 if res == "cpu" else 1000  # MilliValue of bytes
            total_rec[res] = total_rec.get(res, 0) + rec_v * scale
            if req is None:
                outside = True
                continue
            total_req[res] = total_req.get(res, 0) + req * scale
            if (lo is not None and req < lo) or (hi is not None and req > hi):
                outside = True
    diff = 0.0
    for res, rec_total in total_rec.items():
        req_total = max(float(total_req.get(res, 0)), 1.0)
        diff += abs(req_total - rec_total) / req_total
    return outside, diff


def update_priority(pod: PodView, vpa: VPA) -> tuple[bool, float]:
    """_priority for agent.vpa.podlevel_decide, over the containers it is given."""
    return _priority(pod, vpa)


def decide(
    pod: PodView,
    vpa: VPA,
    age_s: float | None,
    quick_oom: bool,
    opts: Options,
    usage: Mapping[str, int] | None = None,
    reaction: str | None = None,
) -> Verdict:
    """Whether VPA's updater would update this pod now, and to what (one pod, pure). `usage`: each
    container's working set, when the node knows it (None: not capped at all, as VPA itself);
    `reaction`: why the node reacts now (agent.vpa.react), which, as a quick OOM, need not wait."""
    why = not_actuated_because(vpa, opts)
    if why is not None:
        return Verdict(False, why)
    if pod.pod_requests is not None or pod.pod_limits is not None:
        return Verdict(False, "the pod has pod-level resources (decided by agent.vpa.podlevel_decide)")
    if not vpa.recommendations:
        return Verdict(False, "the VPA has no recommendation yet")
    targets = []
    by_name = {c.name: c for c in pod.containers}
    for c in pod.containers:
        rec = vpa.recommendation_for(c.name)
        t = container_target(c, rec, vpa.policy_for(c.name)) if rec is not None else None
        if t is not None and (t.requests, t.limits) != (c.requests, c.limits):
            targets.append(t)
    if not targets:
        return Verdict(False, SAME)
    outside, diff = _priority(pod, vpa)
    if not outside and not quick_oom and reaction is None:
        if age_s is None or age_s < opts.pod_lifetime_s:
            return Verdict(
                False, "within the recommended range and the pod is younger than podLifetimeThreshold"
            )
        if diff < opts.min_change:
            return Verdict(
                False,
                f"within the recommended range and the change ({diff:.0%}) is below {opts.min_change:.0%}",
            )
    if _changes_qos(pod, targets):
        return Verdict(False, "the recommendation would change the pod's QoS class")
    why_now = (
        reaction
        if reaction is not None
        else "quick OOM"
        if quick_oom
        else ("a request outside the recommended range" if outside else f"a {diff:.0%} change")
    )
    if usage is None:
        return Verdict(True, why_now, tuple(targets))
    # the updater would act: now a memory decrease stops at what the container uses (the node knows it)
    held: list[str] = []
    kept = []
    for t in targets:
        c = by_name[t.container]
        t, note = hold_memory_at_usage(t, c, usage.get(c.name), opts.usage_margin)
        if note:
            held.append(note)
        if (t.requests, t.limits) != (c.requests, c.limits):
            kept.append(t)
    if not kept:
        return Verdict(False, "a memory decrease waits for the working set to allow it", held=tuple(held))
    return Verdict(True, why_now, tuple(kept), tuple(held))


def _changes_qos(pod: PodView, targets: Sequence[ContainerTarget]) -> bool:
    by_name = {t.container: t for t in targets}
    containers = tuple(
        replace(c, requests=by_name[c.name].requests, limits=by_name[c.name].limits)
        if c.name in by_name
        else c
        for c in pod.containers
    )
    before = compute_qos(replace(pod, status_qos=None)).qos
    return compute_qos(replace(pod, containers=containers, status_qos=None)).qos is not before


class ResizeBlock(enum.StrEnum):
    INFEASIBLE = "Infeasible"
    DEFERRED = "Deferred"


@dataclass(frozen=True, slots=True)
class Blocked:
    """A VPA-driven resize the node refused (Infeasible) or put off (Deferred), as last reported."""

    vpa: str
    targets: tuple[ContainerTarget, ...]
    state: ResizeBlock
    message: str = ""

    def why(self) -> str:
        then = "lowers" if self.state is ResizeBlock.INFEASIBLE else "changes"
        said = f" ({self.message})" if self.message else ""
        return f"the resize to the recommendation is {self.state.value}{said}: tried again when the recommendation {then}"


def target_values(t: ContainerTarget) -> tuple[int | None, ...]:
    """(CPU request, memory request, CPU limit, memory limit): what a resize changes."""
    return (t.requests.cpu_milli, t.requests.memory, t.limits.cpu_milli, t.limits.memory)


def retry_allowed(blocked: Blocked, targets: Sequence[ContainerTarget]) -> bool:
    """Whether a new decision may be sent after `blocked`: a Deferred one when the targets changed at all
    (the node retries the same one itself), an Infeasible one only when some request or limit is lower
    than what was refused (asking for as much or more can never fit either)."""
    before = {t.container: t for t in blocked.targets}
    if blocked.state is ResizeBlock.DEFERRED:
        return tuple(targets) != blocked.targets
    for t in targets:
        old = before.get(t.container)
        if old is None:
            return True
        if any(
            n is not None and (o is None or n < o)
            for n, o in zip(target_values(t), target_values(old), strict=True)
        ):
            return True
    return False


def with_local_memory(vpa: VPA, container: str, memory: int) -> VPA:
    """The VPA with `container`'s memory target (and upper bound) raised to at least `memory`: the node's
    own recommender after an OOM kill it saw, before the merged status catches up (that recommender is the
    VPA's, so this is the VPA's answer sooner, not a second opinion)."""
    recs = []
    for r in vpa.recommendations:
        if r.container == container and (r.target.memory or 0) < memory:
            r = replace(
                r,
                target=replace(r.target, memory=memory),
                upper=replace(r.upper, memory=max(memory, r.upper.memory or 0)),
            )
        recs.append(r)
    return replace(vpa, recommendations=tuple(recs))
