"""What a VPA recommendation makes of a pod's pod-level resources (`spec.resources`), before any decision
(pure; the decision is agent.vpa.podlevel_decide, the design docs/vpa-pod-level.md).

The rules are VPA's container rules carried to the pod level, as AEP-7571 (kubernetes/autoscaler PRs
#8586, #9340, #9988) carries them:
- the pod-level recommendation is the VPA status's `podRecommendations` when it holds one; otherwise the
  sum of the pod's regular containers' (what the upstream recommender writes today): a container's
  target, lower and upper bound capped by its own policy, a container whose policy is Off left out, a
  container without a recommendation counted at its own request (AEP-7571, #8586 "calculate pod-level
  recommendations dynamically"); a bound is unknown when one summed container lacks it;
- capping (capping.go, pod level as #9340 does it): podPolicy minAllowed, then maxAllowed; with
  RequestsOnly at most the current pod-level limit; then the namespace's LimitRange type Pod, min and
  max for the pod's limit/request ratio (GetBoundaryRequest), a request never above max;
- limits (GetProportionalLimit): under RequestsAndLimits a pod-level limit keeps its ratio to the pod-level
  request; none stays none. Only resources the pod-level stanza already holds are changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final, Protocol

from agent.core.model import EMPTY, PodView, Resources
from agent.vpa.model import VPA, ControlledValues, PodPolicy, PodRecommendation
from agent.vpa.policy import api_values, capped, clamp, proportional_limit

RESOURCES: Final = ("cpu", "memory")
ALL: Final = frozenset(RESOURCES)


def get(r: Resources, res: str) -> int | None:
    return r.cpu_milli if res == "cpu" else r.memory


def put(r: Resources, res: str, v: int | None) -> Resources:
    return replace(r, cpu_milli=v) if res == "cpu" else replace(r, memory=v)


@dataclass(frozen=True, slots=True)
class PodTarget:
    """The pod-level requests and limits to set (`spec.resources`), hugepages and others kept."""

    requests: Resources
    limits: Resources


@dataclass(frozen=True, slots=True)
class PodBounds:
    """The namespace's LimitRange items of type Pod merged as VPA's LimitRangeCalculator merges them: the
    highest min, the lowest max (millicores, bytes)."""

    min: Resources = EMPTY
    max: Resources = EMPTY


class _Limit(Protocol):  # agent.pods.sources.limitrange_rules.Limit (not imported: that module parses quantities)
    @property
    def resource(self) -> str: ...
    @property
    def amount(self) -> int: ...


class _Item(Protocol):
    @property
    def scope(self) -> str: ...
    @property
    def min(self) -> Sequence[_Limit]: ...
    @property
    def max(self) -> Sequence[_Limit]: ...


class _LimitRange(Protocol):
    @property
    def items(self) -> Sequence[_Item]: ...


def pod_bounds(ranges: Iterable[_LimitRange]) -> PodBounds | None:
    """The Pod items of the namespace's LimitRanges (agent.pods.sources.limitrange_rules.LimitRange, as the
    daemon keeps them); None when none bounds cpu or memory (nothing is capped then)."""
    lo: dict[str, int] = {}
    hi: dict[str, int] = {}
    for lr in ranges:
        for item in lr.items:
            if item.scope != "Pod":
                continue
            for limit in item.min:
                if limit.resource in ALL:
                    lo[limit.resource] = max(lo.get(limit.resource, limit.amount), limit.amount)
            for limit in item.max:
                if limit.resource in ALL:
                    hi[limit.resource] = min(hi.get(limit.resource, limit.amount), limit.amount)
    if not lo and not hi:
        return None
    return PodBounds(Resources(lo.get("cpu"), lo.get("memory")), Resources(hi.get("cpu"), hi.get("memory")))


def _summed(values: Sequence[int | None]) -> int | None:
    return None if not values or any(v is None for v in values) else sum(v for v in values if v is not None)


def summed_recommendation(pod: PodView, vpa: VPA) -> PodRecommendation | None:
    """The pod-level recommendation as the sum of the regular containers' (None: no container has one)."""
    parts: dict[tuple[str, str], list[int | None]] = {}
    found = False
    for c in pod.containers:
        policy = vpa.policy_for(c.name)
        if policy is not None and policy.off:
            continue
        rec = vpa.recommendation_for(c.name)
        found = found or rec is not None
        controlled = policy.controlled if policy is not None else ALL
        for field in ("target", "lower", "upper"):
            value = capped(getattr(rec, field), policy) if rec is not None else EMPTY
            for res in RESOURCES:
                own = get(c.requests, res)
                recommended = get(rec.target, res) if rec is not None and res in controlled else None
                if recommended is not None:
                    parts.setdefault((field, res), []).append(get(value, res))
                elif own is not None:
                    parts.setdefault((field, res), []).append(own)
    if not found:
        return None

    def total(field: str) -> Resources:
        return Resources(_summed(parts.get((field, "cpu"), [])), _summed(parts.get((field, "memory"), [])))

    return PodRecommendation(total("target"), total("lower"), total("upper"), source="containers")


def pod_recommendation(pod: PodView, vpa: VPA) -> PodRecommendation | None:
    """The VPA's own pod-level recommendation, else the containers' summed."""
    return vpa.pod_recommendation if vpa.pod_recommendation is not None else summed_recommendation(pod, vpa)


def _boundary(request: int | None, limit: int | None, bound: int | None) -> int | None:
    """GetBoundaryRequest: the request whose proportional limit is `bound` (None: no such bound)."""
    if not limit or not bound:
        return None
    if not request:
        return bound
    return request * bound // limit


def capped_pod(
    r: Resources, policy: PodPolicy | None, requests: Resources, limits: Resources, bounds: PodBounds | None
) -> tuple[Resources, tuple[str, ...]]:
    """`r` capped as VPA caps a pod-level value, and what capped it (VPA's capping annotations' words).
    `requests`/`limits`: the pod's current pod-level values (ratio for the LimitRange boundary)."""
    notes: list[str] = []
    out = r
    for res in RESOURCES:
        v = get(r, res)
        if v is None:
            continue
        if policy is not None:
            c = clamp(v, get(policy.min_allowed, res), get(policy.max_allowed, res))
            if c != v:
                notes.append(f"pod level {res} capped to {'minAllowed' if c is not None and c > v else 'maxAllowed'}")
            v = c
            if policy.values is ControlledValues.REQUESTS_ONLY:
                c = clamp(v, None, get(limits, res))
                if c != v:
                    notes.append(f"pod level {res} capped to the pod limit")
                v = c
        if bounds is not None and v is not None:
            req, lim, mn, mx = get(requests, res), get(limits, res), get(bounds.min, res), get(bounds.max, res)
            floor = max((b for b in (_boundary(req, lim, mn), mn) if b is not None), default=None)
            ceiling = min((b for b in (_boundary(req, lim, mx), mx) if b is not None), default=None)
            c = clamp(v, floor, ceiling)
            if c != v:
                side = "Min" if c is not None and c > v else "Max"
                notes.append(f"pod level {res} capped to fit {side} in Pod LimitRange")
            v = c
        out = put(out, res, v)
    return out, tuple(notes)


def capped_recommendation(
    pod: PodView, rec: PodRecommendation, policy: PodPolicy | None, bounds: PodBounds | None
) -> tuple[PodRecommendation, tuple[str, ...]]:
    """Target, lower and upper bound capped alike; the notes are the target's (as VPA annotates it)."""
    requests, limits = pod.pod_requests or EMPTY, pod.pod_limits or EMPTY
    target, notes = capped_pod(rec.target, policy, requests, limits, bounds)
    lower, _ = capped_pod(rec.lower, policy, requests, limits, bounds)
    upper, _ = capped_pod(rec.upper, policy, requests, limits, bounds)
    return replace(rec, target=target, lower=lower, upper=upper), notes


def pod_target(pod: PodView, target: Resources, policy: PodPolicy | None) -> PodTarget:
    """The pod-level requests and limits under the (capped) target: only controlled resources the pod-level
    stanza holds move; limits proportional under RequestsAndLimits."""
    controlled = policy.controlled if policy is not None else ALL
    scales_limits = policy is None or policy.values is ControlledValues.REQUESTS_AND_LIMITS
    old_req, old_lim = pod.pod_requests or EMPTY, pod.pod_limits or EMPTY
    requests, limits = old_req, old_lim
    for res in RESOURCES:
        new, req = get(target, res), get(old_req, res)
        if res not in controlled or new is None or req is None or new == req:
            continue
        requests = put(requests, res, new)
        if scales_limits and get(old_lim, res) is not None:
            limits = put(limits, res, proportional_limit(get(old_lim, res), req, new))
    return PodTarget(requests, limits)


def api_pod_resources(t: PodTarget) -> dict[str, dict[str, str]]:
    """The target as the API writes `spec.resources` (cpu and memory; what a pods/resize body carries)."""
    return api_values(t.requests, t.limits)
