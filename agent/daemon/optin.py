"""Objects that opt in to a feature this node has switched off get one Event saying so.

Why: the per-object opt-in (a VPA's `kube-cgroup-agent.io/vpa-actuator: node`, a workload's
`kube-cgroup-agent.io/pod-update-policy`, a VPA naming the `kube-cgroup-agent` recommender) is the
safety; the node's configuration is the operator's cluster-wide switch. When the switch is off, the
owner of an opted-in object sees nothing happen and reads no agent log: `kubectl describe` must say why.
The Event's name is derived from the object and the feature, so every agent and every restart creates
the same one: the API server keeps one (409 for the others), once per object, not per pod or node.
The objects are listed again every `NOTICE_PERIOD_S` (an object that opts in later is told too).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent.daemon.components import DaemonContext
from agent.infra.apiserver import APIServer, path
from agent.infra.logging import get_logger
from agent.kube.errors import APIConflict, APIForbidden, APINotFound, wrap
from agent.kube.status import PodRef, event_body, now_rfc3339
from agent.recommender.publish import names_us
from agent.rollout.workload import POLICY
from agent.vpa.model import ACTUATOR_ANNOTATION

log = get_logger("agent.daemon.optin")

NOTICE_PERIOD_S: Final = 600.0
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
    """Lists the opted-in objects of each switched-off feature and creates their Events, every
    NOTICE_PERIOD_S, from one thread. Reading errors are logged once per feature and do not stop the agent."""

    name = "opt-in-notices"

    def __init__(self, ctx: DaemonContext, features: tuple[Feature, ...], period_s: float = NOTICE_PERIOD_S) -> None:
        self.node = ctx.node or "unknown"
        self.features = features
        self.period_s = period_s
        self.api = APIServer(ctx.api)
        self.errors = ctx.metrics.errors
        self._thread: threading.Thread | None = None
        self._quiet: set[str] = set()  # features whose listing failed for good (no CRD, no RBAC): said once

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._run, args=(stop,), name=self.name, daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.once()
            stop.wait(self.period_s)

    def once(self) -> int:
        """One round; the number of Events created (those already there count as told)."""
        created = 0
        for feature in self.features:
            key = f"{feature.key}/{feature.plural}"
            if key in self._quiet:
                continue
            try:
                found = self.api.list(path(f"{feature.group}/{feature.version}", feature.plural))
            except Exception as err:  # the client raises its own and urllib3's errors: typed below
                api = wrap(f"list {feature.plural}", err)
                if isinstance(api, APINotFound | APIForbidden):
                    self._quiet.add(key)
                log.info("optin.list_failed", feature=feature.key, resource=feature.plural, error=str(api))
                continue
            for body in notices(feature, found.get("items") or [], self.node, now_rfc3339()):
                created += self._create(body)
        return created

    def _create(self, body: dict[str, Any]) -> int:
        ns = body["metadata"]["namespace"]
        try:
            self.api.create(path("v1", "events", ns), body)
        except Exception as err:
            api = wrap("create event", err)
            if isinstance(api, APIConflict):
                return 0  # another agent (or this one, before a restart) told it already
            log.warning("optin.event_failed", object=f"{ns}/{body['involvedObject']['name']}", error=str(api))
            self.errors.labels(type(api).__name__).inc()
            return 0
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
