"""The VPA status a Lease holder writes from the merged histories, and whether a write says something new
(`worth_writing`). Pure. The containers' recommendations in VPA's shape; the pod level's (agent.recommender.
podlevel) as `podRecommendations` beside them, compared as a container named POD would be."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agent.core.model import POD
from agent.pods.quantity import parse
from agent.recommender.config import BUCKET_GROWTH, RecommenderSettings
from agent.recommender.estimate import recommend
from agent.recommender.model import ContainerHistory
from agent.recommender.podlevel import FIELD, PodCaps, pod_recommendation
from agent.recommender.render import as_vpa
from agent.recommender.state import ContainerRecommendation


def status_for(settings: RecommenderSettings, merged: Mapping[str, ContainerHistory], now: float,
               holder: str = "", nodes: int = 0, caps: PodCaps | None = None) -> dict[str, Any]:
    """`merged` per container name, and under POD the pod level's (capped by `caps`, the VPA's podPolicy)."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    containers = {name: h for name, h in merged.items() if name != POD}
    items = [
        ContainerRecommendation("", name, recommend(h, settings, len(containers)))
        for name, h in sorted(containers.items())
        if not (h.cpu.is_empty() and h.memory.is_empty())
    ]
    pod = pod_recommendation(merged[POD], settings, caps) if POD in merged else None
    low = [i.container for i in items if i.recommendation.confidence < 1.0]
    by = f"merged by {holder} from {nodes} node(s)" if holder else ""
    some = bool(items) or pod is not None
    conditions = [
        {"type": "RecommendationProvided", "status": "True" if some else "False", "lastTransitionTime": stamp,
         "reason": "" if some else "NoSamples", "message": by if some else "no usage samples from any node yet"},
        {"type": "LowConfidence", "status": "True" if low else "False", "lastTransitionTime": stamp,
         "reason": "ShortHistory" if low else "", "message": f"less than a day of samples: {', '.join(low)}" if low else ""},
    ]
    recommendation: dict[str, Any] = {"containerRecommendations": [as_vpa(i) for i in items]}
    if pod is not None:
        recommendation[FIELD] = pod
    return {"recommendation": recommendation, "conditions": conditions}


def comparable(status: Mapping[str, Any] | None) -> Any:
    """A status as far as a write would change it: the recommendation and the conditions, without their
    times."""
    status = status or {}
    conditions = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
                  if isinstance(c, Mapping)]
    return {"recommendation": status.get("recommendation"), "conditions": sorted(conditions, key=lambda c: str(c.get("type")))}


def _quantities(status: Mapping[str, Any] | None) -> dict[tuple[str, str, str], float] | None:
    """(container or POD, field, resource) -> value of a status's recommendation; None when unreadable."""
    out: dict[tuple[str, str, str], float] = {}
    try:
        recommendation = (status or {}).get("recommendation") or {}
        pod = recommendation.get(FIELD)
        for c in [*(recommendation.get("containerRecommendations") or []), *([{**pod, "containerName": POD}] if pod else [])]:
            for fld in ("target", "lowerBound", "upperBound", "uncappedTarget"):
                for res, q in (c.get(fld) or {}).items():
                    out[(str(c.get("containerName")), fld, str(res))] = float(parse(q, f"{fld}.{res}"))
    except (ValueError, TypeError, AttributeError):
        return None
    return out


def worth_writing(old: Mapping[str, Any] | None, new: Mapping[str, Any], min_change: float) -> bool:
    """Whether a holder writes `new` over `old` (what it last wrote): a condition, a container or a field
    that changed; a target that moved by more than `min_change` of the larger of the two values (to or from
    zero always; with 0, any move); a bound (lowerBound, upperBound, uncappedTarget) that moved by more than
    `min_change` and more than one histogram bucket.

    Why not every change: every status write is a watch event to every node with the VPA's pods and to the
    keeper, whose admission parameters follow each target. The bounds widen with the confidence, which
    grows with every interval of history, so they move a little at every merge; a write a VPA an interval
    is what upstream's recommender costs. And VPA's updater leaves a pod whose requests lie within
    [lowerBound, upperBound] alone unless it has run 12 h and the sum over CPU and memory of
    |request − target| / request reaches `--pod-update-threshold` (0.1): a target held back by less than
    10 % is about that tolerance for one resource (two moving together reach it sooner). Since `old` is
    what was last written, a target is never more than `min_change` behind the merge."""
    if comparable(old)["conditions"] != comparable(new)["conditions"]:
        return True
    a, b = _quantities(old), _quantities(new)
    if a is None or b is None or a.keys() != b.keys():
        return True
    bound_change = max(BUCKET_GROWTH, min_change)
    for key, x in a.items():
        y = b[key]
        if x == y:
            continue
        larger = max(abs(x), abs(y))
        if key[1] == "target":
            if x == 0 or y == 0 or abs(x - y) > min_change * larger:
                return True
        elif abs(x - y) > bound_change * larger:
            return True
    return False
