"""Objects that opt in to a feature this node has switched off get one Event saying so.

Why: the per-object opt-in (a VPA's `kube-cgroup-agent.io/vpa-actuator: node`, a workload's
`kube-cgroup-agent.io/pod-update-policy`, a VPA naming the `kube-cgroup-agent` recommender) is the
safety; the node's configuration is the operator's cluster-wide switch. When the switch is off, the
owner of an opted-in object sees nothing happen and reads no agent log: `kubectl describe` must say why.
The Event's name is derived from the object and the feature, so every agent and every restart creates
the same one: the API server keeps one (409 for the others), once per object, not per pod or node.

Only the objects of this node's own pods are read (a node's cost grows with its pods, not with the
cluster), every `NOTICE_PERIOD_S` (an object that opts in later is told too): the VPAs in one list narrowed
by the target label the cluster's keeper sets (agent.vpa.target) over the pods' owner chains
(agent.kube.owners), and the StatefulSets and DaemonSets that own the pods, each by name, its metadata
alone. An object once told is not read again.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent.core.model import PodView
from agent.daemon.components import DaemonContext
from agent.infra.apiserver import METADATA, APIServer, path
from agent.infra.logging import get_logger
from agent.kube.errors import APIConflict, APIForbidden, APINotFound, wrap
from agent.kube.node_vpas import NodeVPAs
from agent.kube.status import PodRef, event_body, now_rfc3339
from agent.recommender.publish import names_us
from agent.rollout.workload import POLICY
from agent.vpa.model import ACTUATOR_ANNOTATION

log = get_logger("agent.daemon.optin")

NOTICE_PERIOD_S: Final = 600.0
SETTLE_S: Final = 1.0
REASON: Final = "FeatureOffOnNode"
CONFIGMAP: Final = "ConfigMap kube-cgroup-agent/kube-cgroup-agent"


@dataclass(frozen=True, slots=True)
class Feature:
    key: str  # the configuration section: vpa, rollout, recommender
    group: str
    version: str
    plural: str
    kind: str
    opts_in: Callable[[Mapping[str, Any]], bool]
    how: str  # what the object set to opt in, for the message


def _annotation(obj: Mapping[str, Any], name: str) -> str | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(name)
    return value if isinstance(value, str) else None


VPA_ACTUATOR: Final = Feature(
    "vpa", "autoscaling.k8s.io", "v1", "verticalpodautoscalers", "VerticalPodAutoscaler",
    lambda o: _annotation(o, ACTUATOR_ANNOTATION) == "node", f"{ACTUATOR_ANNOTATION}: node",
)
RECOMMENDER: Final = Feature(
    "recommender", "autoscaling.k8s.io", "v1", "verticalpodautoscalers", "VerticalPodAutoscaler",
    names_us, "spec.recommenders: [{name: kube-cgroup-agent}]",
)
STATEFULSETS: Final = Feature(
    "rollout", "apps", "v1", "statefulsets", "StatefulSet", lambda o: _annotation(o, POLICY) is not None, POLICY,
)
DAEMONSETS: Final = Feature(
    "rollout", "apps", "v1", "daemonsets", "DaemonSet", lambda o: _annotation(o, POLICY) is not None, POLICY,
)


# ---- pure ----

def features_off(vpa: bool, rollout: bool, recommender: bool) -> tuple[Feature, ...]:
    off: list[Feature] = []
    if not vpa:
        off.append(VPA_ACTUATOR)
    if not recommender:
        off.append(RECOMMENDER)
    if not rollout:
        off += [STATEFULSETS, DAEMONSETS]
    return tuple(off)


def notice_name(feature: Feature, obj_name: str, uid: str) -> str:
    """`<object>.kube-cgroup-agent-<feature>-off.<uid hash>`: the same for every agent, within the 253
    characters of a name (the UID tells a recreated object of the same name apart)."""
    suffix = f".kube-cgroup-agent-{feature.key}-off.{hashlib.sha256(uid.encode()).hexdigest()[:10]}"
    return obj_name[: 253 - len(suffix)] + suffix


def notice_message(feature: Feature, node: str) -> str:
    return (
        f"this {feature.kind} opts in to kube-cgroup-agent's {feature.key} ({feature.how}), but "
        f"{feature.key}.enabled is false in the agent's configuration (seen on node {node}): nothing acts on it. "
        f"Set `{feature.key}: {{enabled: true}}` in {CONFIGMAP} and restart the agents to turn it on."
    )


def notices(feature: Feature, objects: Iterable[Mapping[str, Any]], node: str, now: str) -> list[dict[str, Any]]:
    """The Events to create: one per opted-in object (pure)."""
    out: list[dict[str, Any]] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        ns, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
        if not (isinstance(ns, str) and isinstance(name, str) and isinstance(uid, str)) or not feature.opts_in(obj):
            continue
        ref = PodRef(ns, name, uid, kind=feature.kind, api_version=f"{feature.group}/{feature.version}")
        out.append(event_body(ref, REASON, notice_message(feature, node), True, node, notice_name(feature, name, uid), now))
    return out


# ---- shell ----

class OptInNotices:
    """Reads the opted-in objects of this node's pods for each switched-off feature and creates their
    Events, every NOTICE_PERIOD_S, from one thread. Reading errors are logged once per feature and do not
    stop the agent."""

    name = "opt-in-notices"

    def __init__(self, ctx: DaemonContext, features: tuple[Feature, ...], period_s: float = NOTICE_PERIOD_S) -> None:
        self.node = ctx.node or "unknown"
        self.features = features
        self.period_s = period_s
        self.ctx = ctx
        self.api = APIServer(ctx.api)
        self.vpas = NodeVPAs(self.api, lambda: self.ctx.pods())
        self.errors = ctx.metrics.errors
        self._thread: threading.Thread | None = None
        self._quiet: set[str] = set()  # features whose reading failed for good (no CRD, no RBAC): said once
        self._told: set[tuple[str, str, str]] = set()  # (kind, namespace, name) whose Event exists
        self._owners_seen: frozenset[tuple[str, str, str]] | None = None  # the pods' owners at the last round
        self.wake = threading.Event()  # the node's pods changed: a round when their owners did
        ctx.on_pods.append(self.wake.set)

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._run, args=(stop,), name=self.name, daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self, stop: threading.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            owners = frozenset((p.namespace, *p.owner) for p in self.ctx.pods() if p.owner is not None)
            if owners != self._owners_seen or time.monotonic() - last >= self.period_s:
                self._owners_seen = owners
                last = time.monotonic()
                self.once()
            self.wake.wait(max(0.0, self.period_s - (time.monotonic() - last)))
            self.wake.clear()
            stop.wait(SETTLE_S)  # a burst of arrivals makes one round

    def once(self) -> int:
        """One round; the number of Events created (those already there count as told)."""
        created = 0
        pods = self.ctx.pods()
        vpas: list[Mapping[str, Any]] | None = None
        for feature in self.features:
            key = f"{feature.key}/{feature.plural}"
            if key in self._quiet:
                continue
            try:
                if feature.plural == "verticalpodautoscalers":
                    vpas = self._vpas() if vpas is None else vpas
                    found = vpas
                else:
                    found = self._workloads(feature, pods)
            except Exception as err:  # the client raises its own and urllib3's errors: typed below
                api = wrap(f"read {feature.plural}", err)
                if isinstance(api, APINotFound | APIForbidden):
                    self._quiet.add(key)
                log.info("optin.list_failed", feature=feature.key, resource=feature.plural, error=str(api))
                continue
            for body in notices(feature, found, self.node, now_rfc3339()):
                told = self._create(body)
                if told is None:
                    continue  # tried again next round
                created += told
                involved = body["involvedObject"]
                self._told.add((involved["kind"], body["metadata"]["namespace"], involved["name"]))
        return created

    def _vpas(self) -> list[Mapping[str, Any]]:
        """The VPAs whose target owns one of this node's pods and that are not told yet."""
        return [v for v in self.vpas() if ("VerticalPodAutoscaler", (v.get("metadata") or {}).get("namespace"),
                                           (v.get("metadata") or {}).get("name")) not in self._told]

    def _workloads(self, feature: Feature, pods: list[PodView]) -> list[Mapping[str, Any]]:
        """The feature's workloads that own one of this node's pods and are not told yet: each by name, its
        metadata alone (a workload gone meanwhile is skipped)."""
        owned = sorted({(p.namespace, p.owner[1]) for p in pods if p.owner is not None and p.owner[0] == feature.kind})
        out = []
        for ns, name in owned:
            if (feature.kind, ns, name) in self._told:
                continue
            try:
                out.append(self.api.get(path(f"{feature.group}/{feature.version}", feature.plural, ns, name),
                                        timeout=(10, 30), accept=METADATA))
            except Exception as err:
                if isinstance(wrap(f"get {feature.kind} {ns}/{name}", err), APINotFound):
                    continue
                raise
        return out

    def _create(self, body: dict[str, Any]) -> int | None:
        """1 when created, 0 when it was there already, None when it could not be."""
        ns = body["metadata"]["namespace"]
        try:
            self.api.create(path("v1", "events", ns), body)
        except Exception as err:
            api = wrap("create event", err)
            if isinstance(api, APIConflict):
                return 0  # another agent (or this one, before a restart) told it already
            log.warning("optin.event_failed", object=f"{ns}/{body['involvedObject']['name']}", error=str(api))
            self.errors.labels(type(api).__name__).inc()
            return None
        log.info("optin.told", object=f"{ns}/{body['involvedObject']['name']}", kind=body["involvedObject"]["kind"],
                 message=body["message"])
        return 1


def optin_component(ctx: DaemonContext) -> OptInNotices | None:
    """On with pods from the API, for the features the configuration switches off."""
    if ctx.api is None:
        return None
    s = ctx.settings
    off = features_off(s.vpa.enabled, s.rollout.enabled, s.recommender.enabled)
    return OptInNotices(ctx, off) if off else None
