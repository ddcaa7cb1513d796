"""Recommendations as a table or as JSON in VPA's RecommendedContainerResources shape, a pod level's in
AEP-7571's podRecommendations shape (quantities as the API writes them: CPU in millicores, memory in bytes
with a binary suffix when exact)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agent.core.model import POD
from agent.recommender.estimate import Estimate
from agent.recommender.state import ContainerRecommendation

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def memory_quantity(n: int) -> str:
    for suffix, size in _BINARY:
        if n >= size and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


def cpu_quantity(milli: int) -> str:
    return f"{milli // 1000}" if milli % 1000 == 0 and milli else f"{milli}m"


def _resources(e: Estimate) -> dict[str, str]:
    return {"cpu": cpu_quantity(e.cpu_milli), "memory": memory_quantity(e.memory)}


def as_vpa(item: ContainerRecommendation) -> dict[str, Any]:
    r = item.recommendation
    return {
        "containerName": item.container,
        "target": _resources(r.target),
        "lowerBound": _resources(r.lower),
        "upperBound": _resources(r.upper),
        "uncappedTarget": _resources(r.uncapped),
    }


def as_pod_level(item: ContainerRecommendation) -> dict[str, Any]:
    """AEP-7571's podRecommendations: a container's fields without the name."""
    return {k: v for k, v in as_vpa(item).items() if k != "containerName"}


def to_json(items: Sequence[ContainerRecommendation]) -> str:
    pods: dict[str, dict[str, Any]] = {}
    for item in items:
        entry = pods.setdefault(item.pod, {"pod": item.pod, "containerRecommendations": []})
        confidence = {"confidence": round(item.recommendation.confidence, 4)}
        if item.container == POD:
            entry["podRecommendations"] = {**as_pod_level(item), **confidence}
        else:
            entry["containerRecommendations"].append({**as_vpa(item), **confidence})
    return json.dumps({"pods": list(pods.values())}, indent=2)


def to_table(items: Sequence[ContainerRecommendation]) -> str:
    head = ("POD", "CONTAINER", "TARGET", "LOWER BOUND", "UPPER BOUND", "UNCAPPED TARGET", "CONFIDENCE")
    rows: list[tuple[str, ...]] = [head]
    for item in items:
        v = as_vpa(item)
        cells = [f"{v[k]['cpu']} / {v[k]['memory']}" for k in ("target", "lowerBound", "upperBound", "uncappedTarget")]
        rows.append((item.pod, item.container or "(pod)", *cells, f"{item.recommendation.confidence:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
