"""The project's objects in etcd at the end of a run: each kind the agents and the keeper write, its
count and its bytes (each object as JSON, what the API server stores for a custom resource; built-in
kinds are stored as protobuf, a little smaller), beside etcd's whole database and the API server's own
count of every kind (`apiserver_storage_objects`)."""

from __future__ import annotations

from typing import Any

from bench.scale import metrics
from bench.scale.harness import Harness

PROJECT = {
    "vpaadmissionparams": "/apis/kube-cgroup-agent.io/v1alpha1/vpaadmissionparams",
    "nodehistories": "/apis/kube-cgroup-agent.io/v1alpha1/nodehistories",
}


def _items(h: Harness, url: str) -> list[dict[str, Any]]:
    from bench.scale.api import APIError

    try:
        return list(h.client.get(url).get("items") or [])
    except APIError:
        return []


def _size(items: list[dict[str, Any]]) -> int:
    import json

    return sum(len(json.dumps(i, separators=(",", ":"))) for i in items)


def measure(h: Harness) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, url in PROJECT.items():
        items = _items(h, url)
        out[name] = {"count": len(items), "bytes": _size(items)}
    leases = [i for i in _items(h, "/apis/coordination.k8s.io/v1/leases") if i["metadata"]["name"].startswith("kcg-")]
    out["leases kcg-*"] = {"count": len(leases), "bytes": _size(leases)}
    events = [i for i in _items(h, "/api/v1/events")
              if "kube-cgroup-agent" in str((i.get("source") or {}).get("component", "")) + str(i.get("reportingComponent", ""))]
    out["events (the agents')"] = {"count": len(events), "bytes": _size(events)}
    vpas = _items(h, "/apis/autoscaling.k8s.io/v1/verticalpodautoscalers")
    samples = metrics.parse(h.client.text("/metrics"))
    stored = {r: int(v) for (r,), v in metrics.gauge(samples, "apiserver_storage_objects", "resource").items()}
    try:
        etcd = metrics.parse(h.cp.etcd_metrics())
        db = int(sum(etcd.get("etcd_mvcc_db_total_size_in_bytes", {}).values()))
        in_use = int(sum(etcd.get("etcd_mvcc_db_total_size_in_use_in_bytes", {}).values()))
    except OSError:
        db = in_use = 0
    return {"project": out, "vpas": len(vpas), "vpas_opted_in": sum(
        1 for v in vpas if (v["metadata"].get("annotations") or {}).get("kube-cgroup-agent.io/vpa-actuator") == "node"),
        "etcd_db_bytes": db, "etcd_in_use_bytes": in_use,
        "apiserver_storage_objects": dict(sorted(stored.items(), key=lambda x: -x[1])[:20])}
