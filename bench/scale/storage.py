"""The project's objects in etcd at the end of a run: each kind the agents and the keeper write, its
count and its bytes (each object as JSON, what the API server stores for a custom resource; built-in
kinds are stored as protobuf, a little smaller), beside etcd's whole database and the API server's own
count of every kind (`apiserver_storage_objects`). The NodeHistories are also split into what each object
costs whatever it holds and what each of its entries (one per VPA naming the recommender with pods on the
node) adds — the entry in spec.vpas, its label, the label's managed field —, which goals.py extrapolates
to other numbers of pods a node; the recommender's Leases (`kcg-rec-*`, one per VPA) apart from the
other `kcg-*` ones (the rollout's slots)."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from bench.scale import metrics

if TYPE_CHECKING:
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
    return sum(size(i) for i in items)


def size(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


HISTORY_LABEL = "vpa.kube-cgroup-agent.io/"  # agent/recommender/publish.py LABEL_PREFIX
REC_LEASE = "kcg-rec-"


def without_entries(obj: dict[str, Any]) -> dict[str, Any]:
    """A NodeHistory with no entry: spec.vpas empty, no VPA label, no managed field of one."""
    out = copy.deepcopy(obj)
    meta = out.get("metadata") or {}
    if isinstance(meta.get("labels"), dict):
        meta["labels"] = {k: v for k, v in meta["labels"].items() if not k.startswith(HISTORY_LABEL)}
    for mf in meta.get("managedFields") or []:
        labels = ((mf.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels")
        if isinstance(labels, dict):
            for k in [k for k in labels if k.startswith("f:" + HISTORY_LABEL)]:
                del labels[k]
    spec = out.get("spec")
    if isinstance(spec, dict) and "vpas" in spec:
        spec["vpas"] = {}
    return out


def histories(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The NodeHistories' count and bytes, and those split: `base_bytes` (the objects without their entries)
    and `entry_bytes` (what their `entries` add), with the containers those entries hold."""
    base = sum(size(without_entries(i)) for i in items)
    total = _size(items)
    entries = containers = 0
    for i in items:
        vpas = (i.get("spec") or {}).get("vpas") or {}
        entries += len(vpas)
        containers += sum(len((e or {}).get("containers") or {}) for e in vpas.values() if isinstance(e, dict))
    return {"count": len(items), "bytes": total, "base_bytes": base, "entry_bytes": total - base,
            "entries": entries, "containers": containers}


def leases(items: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The project's Leases: the recommender's (`kcg-rec-*`) and the other `kcg-*` ones."""
    ours = [i for i in items if i["metadata"]["name"].startswith("kcg-")]
    rec = [i for i in ours if i["metadata"]["name"].startswith(REC_LEASE)]
    rest = [i for i in ours if not i["metadata"]["name"].startswith(REC_LEASE)]
    return {"leases kcg-rec-*": {"count": len(rec), "bytes": _size(rec)},
            "leases kcg-* (others)": {"count": len(rest), "bytes": _size(rest)}}


def measure(h: Harness) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, url in PROJECT.items():
        items = _items(h, url)
        out[name] = histories(items) if name == "nodehistories" else {"count": len(items), "bytes": _size(items)}
    out.update(leases(_items(h, "/apis/coordination.k8s.io/v1/leases")))
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
