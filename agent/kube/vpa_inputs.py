"""VPAs, their owners (ReplicaSets) and this node, read once from the API for the CLI's dry-run
commands (`agent.vpa.inputs` decides from them as the daemon would). Read-only, never watched, and only
what the node's pods need, as the daemon reads them (its RBAC allows no more): the owner links of its
pods by name (agent.kube.owners), the VPAs by their target label (agent.vpa.target)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.infra.apiserver import APIServer, path
from agent.vpa.inputs import VPAInputError, VPAInputs, from_objects


def read_api(kubeconfig: str | None, node: str | None) -> VPAInputs | None:
    """From the API; None when the cluster has no VPA CRD (the feature is off there, as in the daemon)."""
    from kubernetes.client.exceptions import ApiException

    from agent.kube.client import api_client

    vpas = path("autoscaling.k8s.io/v1", "verticalpodautoscalers")
    try:
        api = APIServer(api_client(kubeconfig))
        found: list[Mapping[str, Any]] = []
        try:
            probe: Any = api.list(vpas, {"limit": 1})
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        if node:
            items = _node_vpas(api, node, found)
        else:  # no node to narrow by: every VPA, and no owner chain beyond a pod's own controller
            items = probe.get("items", []) if not probe.get("metadata", {}).get("continue") else api.list(vpas).get("items", [])
        found.extend({**v, "kind": "VerticalPodAutoscaler"} for v in items)
        if node:
            found.append({**api.get(path("v1", "nodes", name=node)), "kind": "Node"})
    except ApiException as err:
        raise VPAInputError(f"reading VPAs from the API failed: {err.status} {err.reason}") from None
    except Exception as err:  # configuration and connection errors: one line, not a traceback
        raise VPAInputError(f"reading VPAs from the API failed: {err}") from None
    return from_objects(found, node)


def _node_vpas(api: APIServer, node: str, links: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The VPAs of `node`'s pods; their owner links appended to `links` as the objects they were read from."""
    from agent.kube.node_vpas import NodeVPAs
    from agent.pods.load import from_objects as pods_from

    raw = api.list(path("v1", "pods"), {"fieldSelector": f"spec.nodeName={node}"}).get("items") or []
    pods = pods_from([p for p in raw if isinstance(p, dict)]).pods
    read = NodeVPAs(api, lambda: pods)
    items = read()
    for (ns, kind, name), (owner_kind, owner) in read.owners.owners().items():
        links.append({"kind": kind, "metadata": {"namespace": ns, "name": name, "ownerReferences": [
            {"kind": owner_kind, "name": owner, "controller": True}]}})
    return items
