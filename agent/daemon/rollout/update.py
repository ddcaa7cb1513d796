"""One pod's update on this node, step by step, each step once: the API writes and CRI pulls of
slot → prepull → unready → grace → patch → wait → done (the steps are drawn in `agent.daemon.rollout`).

Why a step at a time: a pass runs every second and never waits — a step that must wait (the grace
period, the containers coming back ready, a recreated pod's successor) returns, and the next pass takes
the pod up where it stands (`Flight.phase`). The API bodies are `agent.rollout.steps`'; this sends them.
Also here: the readiness condition of a new pod whose template lists the gate (nothing else sets it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.daemon.components import DaemonContext
from agent.daemon.rollout.slots import Slots
from agent.daemon.rollout.status import Notices, workload_ref
from agent.infra.apiserver import STRATEGIC_MERGE, APIServer, path
from agent.infra.logging import get_logger
from agent.kube.errors import APIConflict, APIError, wrap
from agent.kube.status import now_rfc3339
from agent.pods.parse import controller_owner
from agent.rollout.config import RolloutSettings
from agent.rollout.eligibility import Change, Kind
from agent.rollout.order import Rollout
from agent.rollout.steps import (
    ContainerRun,
    condition_body,
    gate_of,
    has_gate,
    in_place_body,
    patched_and_running,
    progress,
    runs,
)
from agent.rollout.workload import READY_GATE, REVISION_LABEL, Workload, condition

log = get_logger("agent.daemon.rollout")


@dataclass
class Flight:
    """One pod's update in progress on this node."""

    workload: Workload
    pod: str
    uid: str
    change: Change
    update_hash: str
    slot: str = ""
    phase: str = "slot"
    since: float = 0.0
    before: Mapping[str, ContainerRun] = field(default_factory=dict)
    overdue: bool = False
    renewed: float = 0.0  # when the slot's Lease was last renewed (monotonic)
    warned_restart: set[str] = field(default_factory=set)


class Updater:
    def __init__(self, ctx: DaemonContext, settings: RolloutSettings, api: APIServer, slots: Slots, notices: Notices) -> None:
        self.ctx = ctx
        self.settings = settings
        self.api = api
        self.slots = slots
        self.notices = notices
        self.flights: dict[str, Flight] = {}  # pod uid -> its update

    def begin(self, f: Flight, pod: Mapping[str, Any], rollout: Rollout, states: Sequence[Any]) -> bool:
        """Start `f` when a slot is free (and take it as far as it goes now); False when none is."""
        slot = self.slots.take(f.workload, f.pod, rollout, states)
        if slot is None:
            return False
        f.slot, f.renewed = slot, time.monotonic()
        self.flights[f.uid] = f
        log.info("rollout.start", workload=f.workload.key, pod=f.pod, how=f.change.kind.value, reason=f.change.reason)
        self.advance(f, pod)
        return True

    def advance(self, f: Flight, pod: Mapping[str, Any] | None) -> None:
        """Take the pod as far as it can go now (each step once; a step that must wait returns)."""
        w = f.workload
        if f.slot:  # a crashed agent's slot expires, a live one's never does
            f.renewed = self.slots.keep(w, f.slot, f.pod, f.renewed)
        if pod is None or str(pod["metadata"]["uid"]) != f.uid:
            if f.change.kind is Kind.RECREATE and f.phase == "wait":
                return self._wait_successor(f, pod)
            log.info("rollout.pod_gone", workload=w.key, pod=f.pod)
            return self._finish(f)
        if f.phase == "slot":
            f.phase = "prepull" if f.change.kind is Kind.IN_PLACE else "patch"
        if f.phase == "prepull":
            self._prepull(f)
            f.phase = "unready"
        if f.phase == "unready":
            if not has_gate(pod):
                self.notices.once(w.key, "no-gate", lambda: self.notices.workload_event(workload_ref(w), "NoReadinessGate",
                    f"the pod template has no readiness gate {READY_GATE}: Services keep sending to a pod while its containers restart", True))
            pod = self._condition(f, False, "UpdatingInPlace", f"updating to revision {f.update_hash}: {f.change.reason}")
            f.phase, f.since = "grace", time.monotonic()
        if f.phase == "grace":
            if time.monotonic() - f.since < w.grace_s:
                return
            f.phase = "patch"
        if f.phase == "patch":
            if not self._patch(f, pod):
                return
            f.phase, f.since = "wait", time.monotonic()
            return
        if f.phase == "wait":
            if f.change.kind is Kind.RECREATE:
                return self._wait_successor(f, pod)
            self._wait_in_place(f, pod)

    def _prepull(self, f: Flight) -> None:
        cri = self.ctx.cri
        if cri is None:
            return
        for container, image in sorted(f.change.images.items()):
            try:
                if not cri.image_present(image):
                    started = time.monotonic()
                    cri.pull_image(image)
                    log.info("rollout.pulled", pod=f.pod, container=container, image=image, ms=round((time.monotonic() - started) * 1000))
            except Exception as err:  # the kubelet pulls it then (with the pod's pull secrets)
                log.warning("rollout.prepull_failed", pod=f.pod, image=image, error=str(err))

    def _condition(self, f: Flight, ready: bool, reason: str, message: str) -> Mapping[str, Any]:
        """Set the InPlaceUpdateReady condition; the pod as it is now (its new resourceVersion)."""
        body = condition_body(f.uid, ready, reason, message, now_rfc3339())
        pod: Mapping[str, Any] | None = self.api.patch(path("v1", "pods", f.workload.namespace, f.pod, "status"), body,
                                                        STRATEGIC_MERGE, timeout=(10, 30))
        if pod is None:
            raise ValueError(f"the API server's answer to the condition of {f.workload.namespace}/{f.pod} is not JSON")
        return pod

    def _patch(self, f: Flight, pod: Mapping[str, Any]) -> bool:
        w = f.workload
        try:
            if f.change.kind is Kind.RECREATE:
                self.api.delete(path("v1", "pods", w.namespace, f.pod), {"preconditions": {"uid": f.uid}}, timeout=(10, 30))
                self._pod_event(f, "RecreatedForUpdate", f"deleted for revision {f.update_hash}: {f.change.reason}", False)
                return True
            for attempt in range(3):  # a conflict (the kubelet wrote the pod's status meanwhile): read again, retry
                f.before = runs(pod)
                body = in_place_body(pod, w, f.update_hash, f.change, now_rfc3339())
                try:
                    self.api.patch(path("v1", "pods", w.namespace, f.pod), body, STRATEGIC_MERGE, timeout=(10, 30))
                    break
                except Exception as err:
                    if not isinstance(wrap("patch", err), APIConflict) or attempt == 2:
                        raise
                    pod = self.api.get(path("v1", "pods", w.namespace, f.pod), timeout=(10, 30))
                    if str(pod["metadata"]["uid"]) != f.uid:
                        return False
            if f.change.resources:
                resize = {"spec": {"containers": [{"name": n, "resources": r} for n, r in sorted(f.change.resources.items())]}}
                self.api.patch(path("v1", "pods", w.namespace, f.pod, "resize"), resize, STRATEGIC_MERGE, timeout=(10, 30))
        except Exception as err:
            api_err = err if isinstance(err, APIError) else wrap(f"update pod {w.namespace}/{f.pod}", err)
            if isinstance(api_err, APIConflict):
                return False  # still changing under us: again with the next pass
            raise api_err from err
        log.info("rollout.patched", workload=w.key, pod=f.pod, images=dict(f.change.images))
        return True

    def _wait_in_place(self, f: Flight, pod: Mapping[str, Any]) -> None:
        done, restarted = progress(f.before, runs(pod), frozenset(f.change.images))
        for c in restarted:
            if c not in f.warned_restart:
                f.warned_restart.add(c)
                self._pod_event(f, "UnexpectedRestart", f"container {c} restarted during the in-place update though its image did not change", True)
        if done:
            self._condition(f, True, "UpdatedInPlace", f"revision {f.update_hash}")
            self._pod_event(f, "UpdatedInPlace", f"{f.change.reason}; revision {f.update_hash}", False)
            self.ctx.metrics.rollout_pods.labels("in-place").inc()
            return self._finish(f)
        self._overdue(f)

    def _wait_successor(self, f: Flight, pod: Mapping[str, Any] | None) -> None:
        """A recreated pod's slot is held until its successor runs Ready at the update revision."""
        if pod is not None and str(pod["metadata"]["uid"]) != f.uid:
            labels = (pod.get("metadata") or {}).get("labels") or {}
            ready = (condition(pod, "Ready") or {}).get("status") == "True"
            if labels.get(REVISION_LABEL) == f.update_hash and ready:
                self.ctx.metrics.rollout_pods.labels("recreated").inc()
                return self._finish(f)
        self._overdue(f)

    def _overdue(self, f: Flight) -> None:
        if not f.overdue and time.monotonic() - f.since > self.settings.ready_timeout_s:
            f.overdue = True  # the slot goes; the pod, failed at the update revision, halts the rollout
            self.notices.workload_event(workload_ref(f.workload), "RolloutHalted",
                                        f"pod {f.pod} is not Ready at revision {f.update_hash} after {self.settings.ready_timeout_s:.0f}s: no further pod is updated until the template changes", True)
            self.ctx.metrics.rollout_pods.labels("failed").inc()
            self._release(f)

    def _release(self, f: Flight) -> None:
        if f.slot:
            self.slots.release(f.workload, f.slot, f.pod)
            f.slot = ""

    def _finish(self, f: Flight) -> None:
        self._release(f)
        self.flights.pop(f.uid, None)
        log.info("rollout.done", workload=f.workload.key, pod=f.pod, how=f.change.kind.value)

    def _pod_event(self, f: Flight, reason: str, message: str, warning: bool) -> None:
        self.notices.pod_event(f.workload, f.pod, f.uid, reason, message, warning)

    def open_gates(self, workloads: Sequence[Workload]) -> None:
        """A new pod whose template lists the InPlaceUpdateReady gate has no such condition yet, so it never
        becomes Ready: the agent sets it True (as OpenKruise does at creation) on the pods of the StatefulSets
        that opt in and of every DaemonSet (whose pods' gate says it opts in). From the pods this node already
        has: no API read."""
        owners = {(w.namespace, w.kind.value, w.name) for w in workloads}
        for pod in self.ctx.raw_pods():
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            gate = gate_of(pod)
            if not has_gate(pod) or uid in self.flights or meta.get("deletionTimestamp"):
                continue
            if gate is not None and not (gate.get("status") == "False" and patched_and_running(pod)):
                continue  # set already, or an update not finished (taken up as a turn: its revision is behind)
            owner = controller_owner(meta)
            if owner is None or (owner[0] != "DaemonSet" and (str(meta.get("namespace") or "default"), *owner) not in owners):
                continue  # a DaemonSet's pod: its gate is its opt-in (the DaemonSet is not watched here)
            # a new pod; or one this agent patched before it stopped, whose containers now all run ready
            body = (condition_body(uid, True, "NotUpdating", "no in-place update in progress", now_rfc3339()) if gate is None
                    else condition_body(uid, True, "UpdatedInPlace", "finished after the agent restarted", now_rfc3339()))
            try:
                ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
                self.api.patch(path("v1", "pods", ns, name, "status"), body, STRATEGIC_MERGE, timeout=(10, 30))
            except Exception as err:
                log.warning("rollout.gate_failed", pod=f"{meta.get('namespace')}/{meta.get('name')}", error=str(wrap("set condition", err)))
