"""The pod the VPA tests decide: web-6d4f-x in namespace shop, owned by ReplicaSet web-6d4f (of the
Deployment web), one container app with requests 100m/100Mi and limits 200m/200Mi by default."""

from __future__ import annotations

from typing import Any

from tests.resize.manifests import ctr


def vpa_pod(cpu_req: str = "100m", cpu_lim: str = "200m", conditions: list[dict[str, Any]] | None = None, started: str = "2026-11-25T00:00:00Z") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-6d4f-x", "namespace": "shop", "uid": "uid-web",
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-6d4f", "controller": True}],
        },
        "spec": {"containers": [ctr("app", req={"cpu": cpu_req, "memory": "100Mi"}, lim={"cpu": cpu_lim, "memory": "200Mi"})]},
        "status": {"phase": "Running", "startTime": started, "conditions": conditions or []},
    }
