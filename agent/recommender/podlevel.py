"""The pod level in the recommender's publishing (issue 42, docs/vpa-pod-level.md): a pod that sets pod-level
resources has a history of its own, its pod cgroup's, kept under POD beside its containers'; merged across
nodes as theirs are, it becomes AEP-7571's `status.recommendation.podRecommendations` (target, lowerBound,
upperBound, uncappedTarget) — by the same estimator, with the pod minimums whole (no containers share them),
capped by the VPA's `podPolicy` as VPA's recommender caps a container by its containerPolicy: mode Off
gives none, uncontrolled resources are left out, target and both bounds within [minAllowed, maxAllowed]
(min first, max wins), uncappedTarget as estimated. Pure.

Where it goes: in a NodeHistory, the pod history of a VPA is an entry of its own, `<namespace>/<name>/pod`
(a key no VPA has: its name cannot hold a "/"), `{"containers": {"": history}}` in the wire format of a
container's. The schema of the entries knows only `containers`, and a node of an older release looks up its
VPA's own entry: a field beside `containers` would be pruned by the API server, a history under "" among
the containers taken by an older holder for a container named "". In the VPA: the status field where the
CRD holds it, else (a CRD that prunes it, every released one) the annotation
kube-cgroup-agent.io/vpa-pod-recommendation with the same JSON object, which agent.vpa.parse reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent.core.model import EMPTY, Resources
from agent.recommender.config import RecommenderSettings
from agent.recommender.estimate import Estimate, Recommendation, recommend
from agent.recommender.model import ContainerHistory
from agent.recommender.render import cpu_quantity, memory_quantity

# agent.vpa.model's name (the recommender does not import agent.vpa: tests/recommender/test_podlevel_publish.py)
POD_RECOMMENDATION_ANNOTATION: Final = "kube-cgroup-agent.io/vpa-pod-recommendation"
FIELD: Final = "podRecommendations"


def pod_entry(vpa_key: str) -> str:
    """The NodeHistory entry that holds the pod history of the VPA `vpa_key` ("namespace/name")."""
    return f"{vpa_key}/pod"


@dataclass(frozen=True, slots=True)
class PodCaps:
    """What the recommender takes of a VPA's `podPolicy` (agent.vpa.model.PodPolicy)."""

    off: bool = False
    min_allowed: Resources = EMPTY
    max_allowed: Resources = EMPTY
    controlled: frozenset[str] = frozenset({"cpu", "memory"})


def _cap(value: int, low: int | None, high: int | None) -> int:
    """capping.go maybeCapToPolicyMin, then maybeCapToPolicyMax."""
    if low is not None and value < low:
        value = low
    if high is not None and value > high:
        value = high
    return value


def capped(r: Recommendation, caps: PodCaps) -> Recommendation:
    lo, hi = caps.min_allowed, caps.max_allowed

    def cap(e: Estimate) -> Estimate:
        return Estimate(_cap(e.cpu_milli, lo.cpu_milli, hi.cpu_milli), _cap(e.memory, lo.memory, hi.memory))

    return Recommendation(cap(r.target), cap(r.lower), cap(r.upper), r.target, r.confidence)


def _resources(e: Estimate, controlled: frozenset[str]) -> dict[str, str]:
    out = {"cpu": cpu_quantity(e.cpu_milli), "memory": memory_quantity(e.memory)}
    return {k: v for k, v in out.items() if k in controlled}


def pod_recommendation(h: ContainerHistory, settings: RecommenderSettings, caps: PodCaps | None) -> dict[str, Any] | None:
    """podRecommendations from the merged pod history; None when it has no samples, the policy is Off or
    controls neither resource."""
    caps = caps or PodCaps()
    if (h.cpu.is_empty() and h.memory.is_empty()) or caps.off or not caps.controlled & {"cpu", "memory"}:
        return None
    r = capped(recommend(h, settings, 1), caps)
    return {"target": _resources(r.target, caps.controlled), "lowerBound": _resources(r.lower, caps.controlled),
            "upperBound": _resources(r.upper, caps.controlled), "uncappedTarget": _resources(r.uncapped, caps.controlled)}


def annotated(vpa: Mapping[str, Any]) -> Any:
    """The podRecommendations the VPA's annotation holds (None: none, or not JSON)."""
    text = ((vpa.get("metadata") or {}).get("annotations") or {}).get(POD_RECOMMENDATION_ANNOTATION)
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def observed(vpa: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The VPA's status as the publisher compares with: podRecommendations from the annotation where the
    status has none (a CRD that prunes the field)."""
    status = vpa.get("status")
    pod = annotated(vpa)
    if pod is None or not isinstance(status, Mapping):
        return status if isinstance(status, Mapping) else None
    raw = status.get("recommendation")
    recommendation: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    if FIELD in recommendation:
        return status
    return {**status, "recommendation": {**recommendation, FIELD: pod}}


def annotation_patch(vpa: Mapping[str, Any], pod: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The merge patch of the VPA's metadata that makes its annotation say `pod` (None: remove it); None when
    it already does."""
    has = annotated(vpa)
    if pod is None and has is None:
        return None
    if pod is not None and has == pod:
        return None
    text = json.dumps(pod, separators=(",", ":"), sort_keys=True) if pod is not None else None
    return {"metadata": {"annotations": {POD_RECOMMENDATION_ANNOTATION: text}}}
