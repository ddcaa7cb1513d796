"""The VPAs of this node's pods, read once (not watched): for the parts that look at them now and then
(the opt-in notices every few minutes, the recommender's publishing step once an interval) when the VPA
component, which watches them, does not run.

One list a read, narrowed by the server to the VPAs labelled with a target on the pods' owner chains
(agent.vpa.target); the chains' links are read once each (agent.kube.owners). A node never lists every
VPA of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.core.model import PodView
from agent.infra.apiserver import APIServer, path
from agent.kube.owners import OwnerLinks
from agent.vpa.source import owner_chain
from agent.vpa.target import selector, target_value

VPAS = path("autoscaling.k8s.io/v1", "verticalpodautoscalers")


def node_selector(pods: Sequence[PodView], owners: OwnerLinks) -> str | None:
    """The label selector of the VPAs that may target one of `pods` (None: none can)."""
    owners.update(pods)
    links = owners.owners()
    return selector({target_value(p.namespace, *link) for p in pods for link in owner_chain(p.namespace, p.owner, links)})


class NodeVPAs:
    def __init__(self, api: APIServer, pods: Callable[[], Sequence[PodView]]) -> None:
        self.api = api
        self.pods = pods
        self.owners = OwnerLinks(api)

    def __call__(self) -> list[Mapping[str, Any]]:
        """The VPAs of the node's pods now; raises the client's errors (a 404: no VPA CRD)."""
        wanted = node_selector(list(self.pods()), self.owners)
        if wanted is None:
            return []
        items = self.api.list(VPAS, {"labelSelector": wanted}, timeout=(10, 30)).get("items") or []
        return [v for v in items if isinstance(v, Mapping)]
