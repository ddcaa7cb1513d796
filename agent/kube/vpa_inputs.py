"""VPAs, their owners (ReplicaSets) and this node, read once from the API for the CLI's dry-run
commands (`agent.vpa.inputs` decides from them as the daemon would). Read-only lists, never watched."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.infra.apiserver import APIServer, path
from agent.vpa.inputs import VPAInputError, VPAInputs, from_objects


def read_api(kubeconfig: str | None, node: str | None) -> VPAInputs | None:
    """From the API; None when the cluster has no VPA CRD (the feature is off there, as in the daemon)."""
    from kubernetes.client.exceptions import ApiException

    from agent.kube.client import api_client

    try:
        api = APIServer(api_client(kubeconfig))
        found: list[Mapping[str, Any]] = []
        try:
            listed: Any = api.list(path("autoscaling.k8s.io/v1", "verticalpodautoscalers"))
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        found.extend({**v, "kind": "VerticalPodAutoscaler"} for v in listed.get("items", []))
        rs: Any = api.list(path("apps/v1", "replicasets"))
        found.extend({**r, "kind": "ReplicaSet"} for r in rs.get("items", []))
        if node:
            found.append({**api.get(path("v1", "nodes", name=node)), "kind": "Node"})
    except ApiException as err:
        raise VPAInputError(f"reading VPAs from the API failed: {err.status} {err.reason}") from None
    except Exception as err:  # configuration and connection errors: one line, not a traceback
        raise VPAInputError(f"reading VPAs from the API failed: {err}") from None
    return from_objects(found, node)
