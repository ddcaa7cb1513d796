"""Cluster-wide recommendations with no central recommender: for every VPA that names `kube-cgroup-agent` in
`spec.recommenders`, each node publishes its partial histories (one RecommendationPartial object per VPA and
node, holding per container the histograms VPA's checkpoints hold), and one node per VPA — the holder of the
Lease `kcg-rec-<vpa>` — merges every node's partials (decaying histograms with a common reference add) and
writes `status.recommendation` and the conditions RecommendationProvided / LowConfidence, at most once per
`recommenderInterval`. The holder renews its Lease at each publishing step, once an interval, so the Lease
lasts two intervals and a margin (`lease_seconds`): a holder that keeps stepping keeps it, whatever the other
nodes' phases. A holder that stops gives its Leases up (deletes them), and another node takes over at its next
step; one that dies is taken over once its Lease has expired. Nothing is lost, since the partials live in
the API.

Why a CRD of the project's own and not VerticalPodAutoscalerCheckpoint: the VPA recommender loads and
garbage-collects checkpoints; objects it does not own must not look like its own. The pure parts (which
pods a VPA selects, merging, the status) are functions; `Publisher.step` is the shell.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from agent.core.model import PodView
from agent.infra.apiserver import MERGE_PATCH, APIServer, path
from agent.infra.lease import acquire, micro, release
from agent.recommender.config import RecommenderSettings
from agent.recommender.estimate import recommend
from agent.recommender.model import ContainerHistory
from agent.recommender.render import as_vpa
from agent.recommender.state import ContainerRecommendation, RecommenderState

RECOMMENDER_NAME: Final = "kube-cgroup-agent"
VPA: Final = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")
PARTIAL: Final = ("kube-cgroup-agent.io", "v1alpha1", "recommendationpartials")
LABEL_VPA: Final = "kube-cgroup-agent.io/vpa"
LABEL_NODE: Final = "kube-cgroup-agent.io/node"
LEASE_MARGIN_S: Final = 10  # beyond two intervals: a step delayed by a slow API call keeps its Lease


def lease_seconds(interval_s: float) -> int:
    """How long a holder's Lease lasts: it renews once an interval (at its step), so two intervals and a margin
    (a Lease shorter than the interval expires between the holder's steps, and whichever node steps then takes
    it: the leadership would move at every step)."""
    return int(2 * interval_s) + LEASE_MARGIN_S


# ---- pure ----

def names_us(vpa: Mapping[str, Any]) -> bool:
    recs = (vpa.get("spec") or {}).get("recommenders") or []
    return any(isinstance(r, Mapping) and r.get("name") == RECOMMENDER_NAME for r in recs)


def selects(vpa: Mapping[str, Any], pod: PodView) -> bool:
    """Whether the VPA's targetRef controls the pod: its controller directly (StatefulSet, DaemonSet, Job,
    ReplicaSet...), or a Deployment through its ReplicaSet, whose name is the Deployment's plus the pod's
    `pod-template-hash` — exact, with no API call."""
    ref = (vpa.get("spec") or {}).get("targetRef") or {}
    if pod.namespace != (vpa.get("metadata") or {}).get("namespace") or pod.owner is None:
        return False
    kind, name = pod.owner
    if (kind, name) == (ref.get("kind"), ref.get("name")):
        return True
    template_hash = pod.labels.get("pod-template-hash")
    return ref.get("kind") == "Deployment" and kind == "ReplicaSet" and name == f"{ref.get('name')}-{template_hash}"


def partial(state: RecommenderState, pods: Iterable[PodView]) -> dict[str, ContainerHistory]:
    """This node's history per container name, merged over the VPA's pods here."""
    out: dict[str, ContainerHistory] = {}
    for pod in pods:
        for (key, container), h in state.histories.items():
            if key != pod.key:
                continue
            merged = out.setdefault(container, ContainerHistory(state.settings))
            merged.merge(h)
    return out


def merge_partials(settings: RecommenderSettings, docs: Iterable[Mapping[str, Any]]) -> dict[str, ContainerHistory]:
    out: dict[str, ContainerHistory] = {}
    for doc in docs:
        containers = ((doc.get("spec") or {}).get("containers")) or {}
        for name, data in containers.items():
            h = ContainerHistory.from_dict(settings, data)
            out.setdefault(name, ContainerHistory(settings)).merge(h)
    return out


def status_for(settings: RecommenderSettings, merged: Mapping[str, ContainerHistory], now: float) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    items = [
        ContainerRecommendation("", name, recommend(h, settings, len(merged)))
        for name, h in sorted(merged.items())
        if not (h.cpu.is_empty() and h.memory.is_empty())
    ]
    low = [i.container for i in items if i.recommendation.confidence < 1.0]
    conditions = [
        {"type": "RecommendationProvided", "status": "True" if items else "False", "lastTransitionTime": stamp,
         "reason": "" if items else "NoSamples", "message": "" if items else "no usage samples from any node yet"},
        {"type": "LowConfidence", "status": "True" if low else "False", "lastTransitionTime": stamp,
         "reason": "ShortHistory" if low else "", "message": f"less than a day of samples: {', '.join(low)}" if low else ""},
    ]
    return {"recommendation": {"containerRecommendations": [as_vpa(i) for i in items]}, "conditions": conditions}


# ---- shell ----

def _path(kind: tuple[str, str, str], ns: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    """The path of a custom resource (group, version, plural), namespaced or not."""
    return path(f"{kind[0]}/{kind[1]}", kind[2], ns, name, sub)


@dataclass(slots=True)
class Publisher:
    api: Any  # kubernetes.client.ApiClient
    node: str
    state: RecommenderState
    pods: Callable[[], Sequence[PodView]]
    # the VPAs that may concern this node's pods (never every VPA of the cluster); raises the client's
    # errors, a 404 when there is no VPA CRD
    vpas: Callable[[], Sequence[Mapping[str, Any]]]
    clock: Callable[[], float] = time.time
    _written: dict[str, float] = field(default_factory=dict)  # VPA key -> when its status was last written
    _held: set[tuple[str, str]] = field(default_factory=set)  # (namespace, VPA) whose Lease this node holds
    writes: int = 0

    def _server(self) -> APIServer:
        return APIServer(self.api)

    def step(self) -> list[str]:
        """Publish this node's partials; for every VPA whose Lease this node holds, merge and write the
        status (rate-limited). Returns the VPAs whose status was written."""
        from kubernetes.client.exceptions import ApiException

        co = self._server()
        try:
            vpas = [v for v in self.vpas() if names_us(v)]
        except ApiException as err:
            if err.status == 404:
                return []  # no VPA CRD: nothing to publish for
            raise
        written: list[str] = []
        pods = list(self.pods())
        for vpa in vpas:
            ns, name = vpa["metadata"]["namespace"], vpa["metadata"]["name"]
            mine = partial(self.state, [p for p in pods if selects(vpa, p)])
            if mine:
                self._publish(co, ns, name, mine)
            interval = self.state.settings.recommender_interval_s
            if self._lead(ns, name) and self.clock() - self._written.get(f"{ns}/{name}", -1e18) >= interval:
                docs = co.list(_path(PARTIAL, ns), {"labelSelector": f"{LABEL_VPA}={name}"})["items"]
                merged = merge_partials(self.state.settings, docs)
                co.patch(_path(VPA, ns, name, "status"), {"status": status_for(self.state.settings, merged, self.clock())}, MERGE_PATCH)
                self._written[f"{ns}/{name}"] = self.clock()
                self.writes += 1
                written.append(f"{ns}/{name}")
        return written

    def _publish(self, co: APIServer, ns: str, vpa: str, mine: Mapping[str, ContainerHistory]) -> None:
        from kubernetes.client.exceptions import ApiException

        obj_name = f"{vpa}-{self.node}"[:253]
        body = {
            "apiVersion": f"{PARTIAL[0]}/{PARTIAL[1]}",
            "kind": "RecommendationPartial",
            "metadata": {"name": obj_name, "namespace": ns, "labels": {LABEL_VPA: vpa, LABEL_NODE: self.node}},
            "spec": {"vpaName": vpa, "node": self.node, "updated": micro(self.clock()),
                     "containers": json.loads(json.dumps({c: h.to_dict() for c, h in mine.items()}))},
        }
        try:
            co.patch(_path(PARTIAL, ns, obj_name), {"spec": body["spec"]}, MERGE_PATCH)
        except ApiException as err:
            if err.status != 404:
                raise
            co.create(_path(PARTIAL, ns), body)

    def _lead(self, ns: str, vpa: str) -> bool:
        """Hold (or take over an expired) Lease `kcg-rec-<vpa>`; a conflict means another node won."""
        duration = lease_seconds(self.state.settings.recommender_interval_s)
        held = acquire(self.api, ns, _lease_name(vpa), self.node, duration, self.clock)
        (self._held.add if held else self._held.discard)((ns, vpa))
        return held

    def release_all(self) -> int:
        """Give up every Lease this node holds (at shutdown): the next node to step takes over at once, not
        after the Lease expires. Returns how many were released; an API error is the caller's to log."""
        released = 0
        for ns, vpa in sorted(self._held):
            release(self.api, ns, _lease_name(vpa), self.node)
            self._held.discard((ns, vpa))
            released += 1
        return released


def _lease_name(vpa: str) -> str:
    return f"kcg-rec-{vpa}"[:253]
