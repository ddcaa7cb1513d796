"""What the rollout tells: Events on pods and workloads, and this node's status annotation on each
StatefulSet (`kube-cgroup-agent rollout status` merges every node's), on each of its own pods of a
DaemonSet.

Why apart: a rollout is looked at every second, so what it says must be said once — an annotation only
when its text changed, a complaint about a workload (a bad policy, no readiness gate, an annotation not
written) once per object — and every Event on a pod is also one on its workload, where people look.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any

from agent.daemon.components import DaemonContext
from agent.infra.apiserver import STRATEGIC_MERGE, APIServer, path
from agent.infra.logging import get_logger
from agent.kube.errors import wrap
from agent.kube.status import PodRef
from agent.rollout.order import WorkloadKind
from agent.rollout.workload import REVISION_LABEL, STATUS, Workload

log = get_logger("agent.daemon.rollout")


def status_key(node: str) -> str:
    """This node's status annotation on a workload: one key per node, so that nodes never overwrite each
    other (an annotation name is at most 63 characters)."""
    prefix, _, name = STATUS.partition("/")
    return f"{prefix}/" + f"{name}.{node}"[:63].rstrip(".-_")


def raw_ref(kind: str, raw: Mapping[str, Any]) -> PodRef:
    """A workload as an Event's object, from its API object (even one that could not be parsed)."""
    meta = raw.get("metadata") or {}
    return PodRef(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""), kind, "apps/v1")


def workload_ref(w: Workload) -> PodRef:
    return PodRef(w.namespace, w.name, w.uid, w.kind.value, "apps/v1")


class Notices:
    def __init__(self, ctx: DaemonContext, node: str, api: APIServer) -> None:
        self.ctx = ctx
        self.node = node
        self.api = api
        self.status: dict[str, str] = {}  # workload key -> last status annotation written
        self._said: set[tuple[str, str]] = set()  # (object, what) already reported once

    def once(self, obj: str, what: str, act: Callable[[], object]) -> None:
        if (obj, what) not in self._said:
            self._said.add((obj, what))
            act()

    def pod_event(self, w: Workload, pod: str, uid: str, reason: str, message: str, warning: bool) -> None:
        self.ctx.event_on(PodRef(w.namespace, pod, uid), reason, message, warning)
        self.workload_event(workload_ref(w), reason, f"pod {pod}: {message}", warning)

    def workload_event(self, ref: PodRef, reason: str, message: str, warning: bool) -> None:
        self.ctx.event_on(ref, reason, message, warning)
        (log.warning if warning else log.info)("rollout.event", object=f"{ref.kind}/{ref.namespace}/{ref.name}", reason=reason, message=message)

    def publish(
        self,
        w: Workload,
        pods: Sequence[Mapping[str, Any]],
        update_hash: str,
        waiting: Mapping[str, str],
        updating: Collection[str],
    ) -> None:
        """This node's pods of the workload, in the workload's status annotation (merged with other
        nodes'); `updating` are the UIDs of the pods being updated here."""
        mine = {}
        for p in pods:
            if (p.get("spec") or {}).get("nodeName") != self.node:
                continue
            name = str(p["metadata"]["name"])
            uid = str(p["metadata"]["uid"])
            labels = (p.get("metadata") or {}).get("labels") or {}
            if uid in updating:
                mine[name] = "updating"
            elif name in waiting:
                mine[name] = f"waiting: {waiting[name]}"
            elif labels.get(REVISION_LABEL) == update_hash:
                mine[name] = "updated"
        if w.kind is WorkloadKind.DAEMON_SET:
            self._on_pods(w, pods, update_hash, mine)
            return
        text = json.dumps({"revision": update_hash, "node": self.node, "pods": mine}, sort_keys=True)
        if self.status.get(w.key) == text:
            return
        self.status[w.key] = text
        patch = {"metadata": {"annotations": {status_key(self.node): text}}}
        try:
            self.api.patch(path("apps/v1", w.kind.plural, w.namespace, w.name), patch, STRATEGIC_MERGE, timeout=(10, 30))
        except Exception as err:
            problem = str(wrap(f"annotate {w.key}", err))
            self.once(w.key, "status-annotation", lambda: log.warning("rollout.status_not_written", workload=w.key, error=problem))

    def _on_pods(self, w: Workload, pods: Sequence[Mapping[str, Any]], update_hash: str, mine: Mapping[str, str]) -> None:
        """A DaemonSet's status goes on this node's own pods of it, not on the DaemonSet: a DaemonSet spans
        every node, and one annotation a node on it would outgrow an object's 256 KiB of annotations at a
        few thousand nodes, each write sent to every node watching it."""
        for p in pods:
            name = str(p["metadata"]["name"])
            if name not in mine:
                continue
            text = json.dumps({"revision": update_hash, "node": self.node, "state": mine[name]}, sort_keys=True)
            key = f"{w.key}/{name}"
            if self.status.get(key) == text or ((p.get("metadata") or {}).get("annotations") or {}).get(STATUS) == text:
                self.status[key] = text
                continue
            self.status[key] = text
            patch = {"metadata": {"annotations": {STATUS: text}}}
            try:
                self.api.patch(path("v1", "pods", w.namespace, name), patch, STRATEGIC_MERGE, timeout=(10, 30))
            except Exception as err:
                said = partial(log.warning, "rollout.status_not_written", workload=w.key,
                               error=str(wrap(f"annotate pod {w.namespace}/{name}", err)))
                self.once(w.key, "status-annotation", said)
