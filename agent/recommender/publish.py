"""Cluster-wide recommendations with no central recommender: for every VPA that names `kube-cgroup-agent` in
`spec.recommenders`, each node publishes the usage histories of that VPA's pods on it in ONE object of its
own, its NodeHistory (cluster-scoped, named after the node, one entry per VPA, each container's histories as
one compact string: `wire.py`), labelled `vpa.kube-cgroup-agent.io/<hash of namespace/name>` for each VPA it
holds. One node per VPA — the holder of the Lease `kcg-rec-<vpa>` in the VPA's namespace — lists the
NodeHistories of that VPA by its label, merges them (decaying histograms with a common reference add) and
writes `status.recommendation` and the conditions RecommendationProvided / LowConfidence when a condition
changed, a target moved by more than `statusMinChange` or a bound by more than that and one histogram
bucket (`worth_writing`).

Why one object per node and not per VPA and node: at 5,000 nodes and 150,000 pods, (VPA, node) pairs run to
150,000 objects — each with its own metadata and managed fields, about 1 KiB before any history — and as many
writes an interval; one object a node keeps the writes at nodes / interval and the bytes at the histories
themselves (BENCHMARKS "At scale"). Why a CRD of the project's own and not VerticalPodAutoscalerCheckpoint: the
VPA recommender loads and garbage-collects checkpoints; objects it does not own must not look like its own.

What it costs, all per `recommenderInterval` (default 5 minutes): one write of the NodeHistory per node, one
LIST per VPA a node holds, a Lease renewal per held VPA every third or fourth interval (the Lease lasts six
intervals), and a GET of another node's Lease only once it could have expired. A holder that stops gives its
Leases up (deletes them); the other nodes take over when the Lease they last saw would have expired, or at
once if they never saw it; a holder that dies is taken over once its Lease expires, up to six intervals
after its last renewal. Nothing is lost, since the histories live in the API. The garbage collector deletes
a NodeHistory with its Node and a Lease with its VPA.

The pure parts (which pods a VPA selects, the object, merging, the status) are functions; `Publisher.step` is
the shell.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agent.core.model import POD, PodView
from agent.infra.apiserver import MERGE_PATCH, APIServer, path
from agent.infra.lease import LeaseView, acquire_lease, micro, release
from agent.infra.logging import get_logger
from agent.recommender import wire
from agent.recommender.config import RecommenderSettings
from agent.recommender.model import ContainerHistory
from agent.recommender.podlevel import FIELD, PodCaps, annotation_patch, observed, pod_entry
from agent.recommender.state import RecommenderState
from agent.recommender.status import comparable as comparable  # re-exported: the status is the publisher's
from agent.recommender.status import status_for as status_for
from agent.recommender.status import worth_writing as worth_writing

log = get_logger("agent.recommender")
RECOMMENDER_NAME: Final = "kube-cgroup-agent"
VPA: Final = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")
HISTORY: Final = ("kube-cgroup-agent.io", "v1alpha1", "nodehistories")
LABEL_PREFIX: Final = "vpa.kube-cgroup-agent.io/"
LEASE_INTERVALS: Final = 6  # a holder's Lease lasts this many intervals and the margin
LEASE_MARGIN_S: Final = 10  # beyond the intervals: a step delayed by a slow API call keeps its Lease
RENEW_AFTER_INTERVALS: Final = 3  # a holder renews once its renewal is three intervals old


def lease_seconds(interval_s: float) -> int:
    """How long a holder's Lease lasts: it renews at the first step at least three intervals after its last
    renewal — so between three and four intervals apart whatever the steps' phase — and the Lease lasts six
    intervals and a margin, so that a holder whose steps run late by up to two intervals still keeps it,
    renewing it about 0.29 times an interval (at 10,000 VPAs and the default 5 minutes: about 10 renewals a
    second cluster-wide). The price: a holder that dies is taken over only once its Lease expires, up to
    six intervals after its last renewal."""
    return int(LEASE_INTERVALS * interval_s) + LEASE_MARGIN_S


def renewal_due(renewed: float, now: float, interval_s: float) -> bool:
    """Whether a holder renews, at a step at `now`, the Lease it last renewed at `renewed`."""
    return now - renewed >= RENEW_AFTER_INTERVALS * interval_s


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


def vpa_label(key: str) -> str:
    """The label a NodeHistory carries for each VPA ("namespace/name") it holds histories of: a label key's
    name is at most 63 characters, a VPA's namespace and name together up to 316."""
    return LABEL_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:40]


def partial(state: RecommenderState, pod_keys: Iterable[str]) -> dict[str, ContainerHistory]:
    """This node's history per container name (and the pod cgroups' under POD), merged over the VPA's pods
    here (those still running and those that left, while the state keeps them: the memory window)."""
    wanted = set(pod_keys)
    out: dict[str, ContainerHistory] = {}
    for (key, container), h in state.histories.items():
        if key in wanted and not (h.cpu.is_empty() and h.memory.is_empty()):
            out.setdefault(container, ContainerHistory(state.settings)).merge(h)
    return out


def node_history(node: str, now: float, entries: Mapping[str, Mapping[str, ContainerHistory]],
                 owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The node's NodeHistory: an entry per VPA ("namespace/name") with each container's histories, and
    one more (`pod_entry`) with the pod level's when the VPA's pods here set pod-level resources."""
    meta: dict[str, Any] = {"name": node, "labels": {vpa_label(k): "" for k in entries}}
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    vpas = {k: {"containers": {c: wire.encode(h) for c, h in sorted(cs.items()) if c != POD}} for k, cs in sorted(entries.items())}
    vpas.update({pod_entry(k): {"containers": {POD: wire.encode(cs[POD])}} for k, cs in entries.items() if POD in cs})
    return {"apiVersion": f"{HISTORY[0]}/{HISTORY[1]}", "kind": "NodeHistory", "metadata": meta,
            "spec": {"node": node, "updated": micro(now), "vpas": vpas}}


def merge_histories(settings: RecommenderSettings, key: str, docs: Iterable[Mapping[str, Any]],
                    ) -> tuple[dict[str, ContainerHistory], list[str], list[str]]:
    """Every node's histories of the VPA `key` merged per container (the pod level's under POD); with the
    nodes merged and those whose entry was unreadable (skipped: one node's bad object never blocks the
    others')."""
    out: dict[str, ContainerHistory] = {}
    nodes: list[str] = []
    bad: list[str] = []
    for doc in docs:
        raw_spec = doc.get("spec")
        spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
        node = str((doc.get("metadata") or {}).get("name") or spec.get("node") or "?")
        vpas = spec.get("vpas")
        entry = vpas.get(key) if isinstance(vpas, Mapping) else None
        containers = entry.get("containers") if isinstance(entry, Mapping) else None
        if not isinstance(containers, Mapping):
            continue  # labelled but no entry (a write in between): nothing of this VPA there
        pod = vpas.get(pod_entry(key)) if isinstance(vpas, Mapping) else None
        pod_level = pod.get("containers") if isinstance(pod, Mapping) else None
        try:
            decoded = {str(c): wire.decode(settings, text) for c, text in containers.items() if c != POD}
            if isinstance(pod_level, Mapping) and POD in pod_level:
                decoded[POD] = wire.decode(settings, pod_level[POD])
        except ValueError:
            bad.append(node)
            continue
        for c, h in decoded.items():
            out.setdefault(c, ContainerHistory(settings)).merge(h)
        nodes.append(node)
    return out, sorted(nodes), sorted(bad)


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
    # the VPA's podPolicy (agent.vpa reads it: the daemon passes agent.daemon.recommender.pod_caps); None:
    # not stated. ValueError: unreadable
    pod_policy: Callable[[Mapping[str, Any]], PodCaps | None] = lambda _vpa: None
    _members: dict[str, set[str]] = field(default_factory=dict)  # VPA key -> pod keys it selected here
    _leases: dict[tuple[str, str], LeaseView] = field(default_factory=dict)  # what each acquire learnt
    _held: set[tuple[str, str]] = field(default_factory=set)  # (namespace, VPA) whose Lease this node holds
    _written: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # VPA key -> the status it last wrote
    _version: str | None = None  # the NodeHistory's resourceVersion after this node's last write
    _owner: Mapping[str, Any] | None = None  # the Node's ownerReference, once read
    _refused: set[str] = field(default_factory=set)  # VPAs whose annotation patch was forbidden (warned once)
    writes: int = 0

    def _server(self) -> APIServer:
        return APIServer(self.api)

    def step(self) -> list[str]:
        """Publish this node's NodeHistory; for every VPA whose Lease this node holds, merge every node's
        histories and write the status if it changed. Returns the VPAs whose status was written."""
        from kubernetes.client.exceptions import ApiException

        co = self._server()
        try:
            vpas = [v for v in self.vpas() if names_us(v)]
        except ApiException as err:
            if err.status == 404:
                return []  # no VPA CRD: nothing to publish for
            raise
        pods = list(self.pods())
        known = {pod for pod, _ in self.state.histories}
        entries: dict[str, dict[str, ContainerHistory]] = {}
        current: dict[str, Mapping[str, Any]] = {}
        for vpa in vpas:
            key = f"{vpa['metadata']['namespace']}/{vpa['metadata']['name']}"
            current[key] = vpa
            members = self._members.setdefault(key, set())
            members |= {p.key for p in pods if selects(vpa, p)}
            members &= known  # a pod the state forgot (the memory window) leaves the entry
            mine = partial(self.state, members)
            if mine:
                entries[key] = mine
        for key in [k for k in self._members if k not in current]:
            del self._members[key]  # the VPA is gone, or no longer names this recommender
        if entries or self._version is not None:
            self._publish(co, entries)
        ours = {(v["metadata"]["namespace"], v["metadata"]["name"]) for v in current.values()}
        for ns, name in sorted(self._held - ours):  # the VPA is gone or no longer concerns this node
            release(self.api, ns, _lease_name(name), self.node)
            self._held.discard((ns, name))
            self._leases.pop((ns, name), None)
        written: list[str] = []
        for key, vpa in sorted(current.items()):
            if self._merge(co, key, vpa):
                written.append(key)
        return written

    def _publish(self, co: APIServer, entries: Mapping[str, Mapping[str, ContainerHistory]]) -> None:
        """Write the NodeHistory whole (PUT with the version this node last wrote: nothing else writes it,
        so a conflict means this node restarted or the object was deleted: read it and write again)."""
        from kubernetes.client.exceptions import ApiException

        if self._owner is None:
            self._owner = self._node_owner(co)
        body = node_history(self.node, self.clock(), entries, self._owner)
        target = _path(HISTORY, name=self.node)
        for _ in range(2):
            try:
                if self._version is None:
                    try:
                        self._version = co.get(target)["metadata"]["resourceVersion"]
                    except ApiException as err:
                        if err.status != 404:
                            raise
                        self._version = str(co.create(_path(HISTORY), body)["metadata"]["resourceVersion"])
                        self.writes += 1
                        return
                body["metadata"]["resourceVersion"] = self._version
                self._version = str(co.replace(target, body)["metadata"]["resourceVersion"])
                self.writes += 1
                return
            except ApiException as err:
                self._version = None
                if err.status not in (404, 409):
                    raise

    def _node_owner(self, co: APIServer) -> Mapping[str, Any] | None:
        """The Node as the NodeHistory's owner: the garbage collector deletes the histories with the node.
        None when the Node cannot be read (the object is then written without; tried again next time)."""
        from kubernetes.client.exceptions import ApiException

        try:
            uid = co.get(path("v1", "nodes", name=self.node))["metadata"]["uid"]
        except (ApiException, KeyError, TypeError):
            return None
        return {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}

    def _merge(self, co: APIServer, key: str, vpa: Mapping[str, Any]) -> bool:
        ns, name = key.split("/", 1)
        if not self._lead(ns, name, (vpa.get("metadata") or {}).get("uid")):
            self._written.pop(key, None)
            return False
        docs = co.list(_path(HISTORY), {"labelSelector": vpa_label(key)})["items"]
        merged, nodes, bad = merge_histories(self.state.settings, key, docs)
        if bad:
            log.warning("recommender.bad_history", vpa=key, nodes=bad)
        caps = self._caps(key, vpa) if POD in merged else None
        status = status_for(self.state.settings, merged, self.clock(), self.node, len(nodes), caps)
        last = self._written.get(key, observed(vpa))
        if not worth_writing(last, status, self.state.settings.status_min_change):
            return False
        pod = status["recommendation"].get(FIELD)
        body = {"status": {**status, "recommendation": {**status["recommendation"], FIELD: pod}}}  # None removes it
        answer = co.patch(_path(VPA, ns, name, "status"), body, MERGE_PATCH)
        kept = ((answer or {}).get("status") or {}).get("recommendation") or {}
        self.writes += 1
        # a CRD without the field prunes it: the annotation carries it (a patch of the object's metadata)
        patch = annotation_patch(vpa, pod if FIELD not in kept else None)
        if patch is not None:
            self._annotate(co, key, patch)
        self._written[key] = status
        return True

    def _annotate(self, co: APIServer, key: str, patch: Mapping[str, Any]) -> None:
        """Patch the VPA's pod-recommendation annotation. A role that may patch only the status (403): one
        warning per VPA, the containers' status stands, the other VPAs are published."""
        from kubernetes.client.exceptions import ApiException

        ns, name = key.split("/", 1)
        try:
            co.patch(_path(VPA, ns, name), patch, MERGE_PATCH)
        except ApiException as err:
            if err.status != 403:
                raise
            if key not in self._refused:
                log.warning("recommender.pod_annotation_refused", vpa=key, reason="patch of verticalpodautoscalers forbidden")
                self._refused.add(key)
            return
        self.writes += 1

    def _caps(self, key: str, vpa: Mapping[str, Any]) -> PodCaps | None:
        """The VPA's podPolicy as the pod level is capped by; a VPA whose policy cannot be read gets no
        pod-level recommendation (one warning), its containers' as before."""
        try:
            return self.pod_policy(vpa)
        except ValueError as err:
            log.warning("recommender.pod_policy", vpa=key, error=str(err))
            return PodCaps(off=True)

    def _lead(self, ns: str, vpa: str, uid: str | None) -> bool:
        """Hold (or take over an expired) Lease `kcg-rec-<vpa>`; a conflict means another node won. A Lease
        another node held is looked at again only once it could have expired; one this node holds is renewed
        once its renewal is three intervals old (`renewal_due`)."""
        interval = self.state.settings.recommender_interval_s
        now = self.clock()
        seen = self._leases.get((ns, vpa))
        if seen is not None:
            if seen.holder != self.node and seen.holder is not None and now <= seen.expires:
                return False
            if seen.held and not renewal_due(seen.renewed, now, interval):
                return True
        owners = [{"apiVersion": f"{VPA[0]}/{VPA[1]}", "kind": "VerticalPodAutoscaler", "name": vpa, "uid": uid}] if uid else []
        view = acquire_lease(self.api, ns, _lease_name(vpa), self.node, lease_seconds(interval), self.clock, owners=owners)
        self._leases[(ns, vpa)] = view
        (self._held.add if view.held else self._held.discard)((ns, vpa))
        return view.held

    def release_all(self) -> int:
        """Give up every Lease this node holds (at shutdown): whoever steps first takes each over — this node's
        next agent at its first step, another node once the Lease it last saw would have expired — without
        waiting for a Lease nobody renews to run out. Returns how many were released; an API error is the
        caller's to log."""
        released = 0
        for ns, vpa in sorted(self._held):
            release(self.api, ns, _lease_name(vpa), self.node)
            self._held.discard((ns, vpa))
            self._leases.pop((ns, vpa), None)
            released += 1
        return released


def _lease_name(vpa: str) -> str:
    return f"kcg-rec-{vpa}"[:253]
