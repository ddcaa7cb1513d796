"""Graceful in-place updates beside the pod loop (seed 004): this node's part of the rollout of every
StatefulSet and DaemonSet that opts in (agent.rollout.workload).

Steady state costs nothing but two watches (StatefulSets, DaemonSets): a workload is looked at closer
only when one of this node's pods is behind its update revision. Then, each second: the workload's pods
(one LIST), its revisions (cached: they never change), the order (agent.rollout.order), and for a pod
whose turn it is, one update, step by step, each step once:

  slot      take a Lease `kcg-rollout-<kind>-<name>-<i>` (i below the budget): no two nodes exceed it
  prepull   in place: pull the new images through CRI (a present image is not pulled again)
  unready   the pod's InPlaceUpdateReady condition False (with the readiness gate, Services drop it)
  grace     wait `grace-period-seconds`
  patch     in place: images + revision labels, one patch with the pod's resourceVersion as precondition;
            Recreate: delete the pod (UID precondition), the controller recreates it at the update revision
  wait      the changed containers run anew and are ready (the others did not restart), then the
            condition True; for a recreated pod, its successor Ready at the update revision
  done      release the slot; Events on the pod and the workload

A crash anywhere loses nothing: the slot's Lease expires, a pod left with the condition False is taken up
again by the next start (its revision label says whether the patch happened). It never evicts.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from agent.daemon.components import Component, DaemonContext
from agent.daemon.objects import ObjectCache, Threads
from agent.infra.lease import acquire, release
from agent.infra.logging import get_logger
from agent.kube.errors import APIConflict, APIError, APINotFound, wrap
from agent.kube.status import STRATEGIC_MERGE, PodRef, now_rfc3339
from agent.kube.trim import without_managed_fields
from agent.pods.parse import controller_owner
from agent.pods.quantity import parse_any
from agent.rollout.config import RolloutSettings
from agent.rollout.eligibility import Change, Kind, classify, template_of
from agent.rollout.order import Rollout, slots, turns
from agent.rollout.steps import (
    ContainerRun,
    condition_body,
    gate_of,
    has_gate,
    in_place_body,
    is_failed,
    patched_and_running,
    progress,
    runs,
)
from agent.rollout.workload import (
    POLICY,
    READY_GATE,
    REVISION_LABEL,
    STATUS,
    Policy,
    RolloutConfigError,
    Workload,
    condition,
    daemonset_update_revision,
    owned_by,
    parse_workload,
    pod_state,
    revision_hash,
)

log = get_logger("agent.daemon.rollout")


def kept_workload(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """What is kept of a StatefulSet or DaemonSet between watch events: the object (less its
    managedFields) when it opts in; its name alone when not (`parse_workload` reads nothing else of it
    then, and the watch sends it whole again when it opts in)."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    if POLICY in (meta.get("annotations") or {}):
        return without_managed_fields(raw)
    return {"metadata": {k: meta[k] for k in ("namespace", "name") if k in meta}}

TICK_S: Final = 1.0
LEASE_S: Final = 30
LEASE_LABEL: Final = "kube-cgroup-agent.io/rollout"


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

    @property
    def holder(self) -> str:
        return self.pod


class RolloutComponent:
    name = "rollout"

    def __init__(self, ctx: DaemonContext, settings: RolloutSettings) -> None:
        from kubernetes import client

        self.ctx = ctx
        self.settings = settings
        self.node = ctx.node or ""
        self.apps = client.AppsV1Api(ctx.api)
        self.core = client.CoreV1Api(ctx.api)
        self.wake = threading.Event()
        self.statefulsets = ObjectCache(self.wake.set, keep=kept_workload)
        self.daemonsets = ObjectCache(self.wake.set, keep=kept_workload)
        self.flights: dict[str, Flight] = {}  # pod uid -> its update
        self.revisions: dict[tuple[str, str], Mapping[str, Any]] = {}  # (ns, name) -> ControllerRevision (immutable)
        self.ds_update: dict[tuple[str, int], str] = {}  # (DaemonSet uid, generation) -> update revision name
        self.status: dict[str, str] = {}  # workload key -> last status annotation written
        self._said: set[tuple[str, str]] = set()  # (object, what) already reported once
        self._threads = Threads(ctx.metrics)

    # ---- lifecycle ----

    def start(self, stop: threading.Event) -> None:
        loops = [
            ("rollout-statefulsets", lambda s: self._watch(self.apps.list_stateful_set_for_all_namespaces, "statefulsets", self.statefulsets, s)),
            ("rollout-daemonsets", lambda s: self._watch(self.apps.list_daemon_set_for_all_namespaces, "daemonsets", self.daemonsets, s)),
            ("rollout", self._loop),
        ]
        self._threads.start(loops, stop)

    def join(self, timeout_s: float) -> None:
        self._threads.join(timeout_s, self.wake)

    def _watch(self, call: Any, noun: str, sink: ObjectCache, stop: threading.Event) -> None:
        self._threads.watch(call, noun, sink, stop)

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.wake.wait(TICK_S)
            self.wake.clear()
            if stop.is_set():
                return
            try:
                self.tick()
            except Exception as err:  # one bad pass must not end the rollouts: log, go on
                log.warning("rollout.tick_failed", error=f"{type(err).__name__}: {err}")

    # ---- one pass ----

    def workloads(self) -> list[tuple[Workload, Mapping[str, Any]]]:
        out = []
        for kind, cache in (("StatefulSet", self.statefulsets), ("DaemonSet", self.daemonsets)):
            for raw in cache.values():
                try:
                    w = parse_workload(kind, raw)
                except RolloutConfigError as err:
                    meta = raw.get("metadata") or {}
                    self._once(f"{kind}/{meta.get('namespace')}/{meta.get('name')}", str(err), lambda e=err, r=raw, k=kind: self._workload_event(
                        _ref(k, r), "RolloutConfigInvalid", str(e), True))
                    continue
                if w is not None:
                    out.append((w, raw))
        return out

    def tick(self) -> None:
        mine = self.ctx.pods()
        workloads = self.workloads()
        self._open_gates(workloads)
        for w, raw in workloads:
            local = [p for p in mine if p.namespace == w.namespace and p.owner == (w.kind.value, w.name)]
            flying = [f for f in self.flights.values() if f.workload.key == w.key]
            if not local and not flying:
                continue
            update = self._update_revision(w, raw)
            if update is None:
                continue
            update_hash, update_rev = update
            if not flying and all(p.labels.get(REVISION_LABEL) == update_hash for p in local):
                continue  # this node's pods are all updated: nothing to read
            self._pass(w, raw, update_hash, update_rev)

    def _pass(self, w: Workload, raw_w: Mapping[str, Any], update_hash: str, update_rev: Mapping[str, Any]) -> None:
        pods = self._pods(w)
        by_name = {str(p["metadata"]["name"]): p for p in pods}
        for f in [f for f in self.flights.values() if f.workload.key == w.key]:
            f.workload = w
            self._advance(f, by_name.get(f.pod))
        now = time.time()
        states = []
        for p in pods:
            s = pod_state(p, str((p.get("spec") or {}).get("nodeName") or ""), is_failed(p, update_hash, now, self.settings.ready_timeout_s))
            if s.node == self.node and s.updating and str(p["metadata"]["uid"]) not in self.flights:
                s = replace(s, updating=False)  # left half-done by an earlier start of this agent: take it up
            states.append(s)
        rollout = w.rollout(update_hash, max(w.replicas, len(states)))
        waiting: dict[str, str] = {}
        for turn in turns(rollout, states, self.node):
            pod = by_name.get(turn.pod)
            if pod is None or str(pod["metadata"]["uid"]) in self.flights:
                continue
            if not turn.go:
                waiting[turn.pod] = turn.reason
                continue
            change = self._change(w, pod, update_rev)
            if change is None:
                waiting[turn.pod] = "its revision is not readable"
                continue
            f = Flight(w, turn.pod, str(pod["metadata"]["uid"]), change, update_hash)
            if self._take_slot(f, rollout, states):
                self.flights[f.uid] = f
                log.info("rollout.start", workload=w.key, pod=turn.pod, how=change.kind.value, reason=change.reason)
                self._advance(f, pod)
            else:
                waiting[turn.pod] = "waiting for a free slot (another node is updating)"
        self._report(w, raw_w, pods, update_hash, waiting)

    def _open_gates(self, workloads: Sequence[tuple[Workload, Mapping[str, Any]]]) -> None:
        """A new pod whose template lists the InPlaceUpdateReady gate has no such condition yet, so it never
        becomes Ready: the agent sets it True (as OpenKruise does at creation). From the pods this node
        already has: no API read."""
        owners = {(w.namespace, w.kind.value, w.name) for w, _ in workloads}
        for pod in self.ctx.raw_pods():
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            gate = gate_of(pod)
            if not has_gate(pod) or uid in self.flights or meta.get("deletionTimestamp"):
                continue
            if gate is not None and not (gate.get("status") == "False" and patched_and_running(pod)):
                continue  # set already, or an update not finished (taken up as a turn: its revision is behind)
            owner = controller_owner(meta)
            if owner is None or (str(meta.get("namespace") or "default"), *owner) not in owners:
                continue
            # a new pod; or one this agent patched before it stopped, whose containers now all run ready
            body = (condition_body(uid, True, "NotUpdating", "no in-place update in progress", now_rfc3339()) if gate is None
                    else condition_body(uid, True, "UpdatedInPlace", "finished after the agent restarted", now_rfc3339()))
            try:
                self.core.patch_namespaced_pod_status(str(meta.get("name")), str(meta.get("namespace") or "default"), body,
                                                      _content_type=STRATEGIC_MERGE, _preload_content=False, _request_timeout=(10, 30))
            except Exception as err:
                log.warning("rollout.gate_failed", pod=f"{meta.get('namespace')}/{meta.get('name')}", error=str(wrap("set condition", err)))

    # ---- reading ----

    def _pods(self, w: Workload) -> list[Mapping[str, Any]]:
        listed: Any = self.core.list_namespaced_pod(w.namespace, label_selector=w.label_selector, _preload_content=False, _request_timeout=(10, 30))
        items = json.loads(listed.data).get("items") or []
        return [p for p in items if owned_by(p, w.uid)]

    def _revision(self, ns: str, name: str) -> Mapping[str, Any] | None:
        cached = self.revisions.get((ns, name))
        if cached is None:
            try:
                got: Any = self.apps.read_namespaced_controller_revision(name, ns, _preload_content=False, _request_timeout=(10, 30))
            except Exception as err:
                if isinstance(wrap("read revision", err), APINotFound):
                    return None
                raise
            cached = json.loads(got.data)
            self.revisions[(ns, name)] = cached
        return cached

    def _update_revision(self, w: Workload, raw: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
        """(the hash pods at the update revision carry, that revision)."""
        if w.update_revision:  # StatefulSet
            rev = self._revision(w.namespace, w.update_revision)
            return (w.update_revision, rev) if rev is not None else None
        name = self.ds_update.get((w.uid, w.generation))
        if name is None and w.observed_generation < w.generation:
            return None  # the controller has not written this generation's revision yet: next pass
        if name is None:
            listed: Any = self.apps.list_namespaced_controller_revision(w.namespace, label_selector=w.label_selector, _preload_content=False, _request_timeout=(10, 30))
            items = json.loads(listed.data).get("items") or []
            for item in items:
                self.revisions[(w.namespace, str(item["metadata"]["name"]))] = item
            latest = daemonset_update_revision(items, w.uid)
            if latest is None:
                return None
            name = str(latest["metadata"]["name"])
            self.ds_update[(w.uid, w.generation)] = name
        rev = self._revision(w.namespace, name)
        return (revision_hash(rev), rev) if rev is not None else None

    def _change(self, w: Workload, pod: Mapping[str, Any], update_rev: Mapping[str, Any]) -> Change | None:
        if w.policy is Policy.RECREATE:
            return Change(Kind.RECREATE, f"{w.kind.value} policy Recreate")
        current_hash = str(((pod.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL) or "")
        current = self._current_revision(w, current_hash)
        new, old = template_of(update_rev), template_of(current) if current is not None else None
        if new is None or old is None:
            return Change(Kind.RECREATE, "the pod's revision is gone: recreated") if new is not None else None
        return classify(old, new, parse_any, self.settings.options())

    def _current_revision(self, w: Workload, current_hash: str) -> Mapping[str, Any] | None:
        if w.update_revision is not None:  # StatefulSet: the label is the revision's name
            return self._revision(w.namespace, current_hash)
        for (ns, _), rev in self.revisions.items():  # DaemonSet: listed with the update revision
            if ns == w.namespace and owned_by(rev, w.uid) and revision_hash(rev) == current_hash:
                return rev
        return None

    # ---- one pod's update ----

    def _take_slot(self, f: Flight, rollout: Rollout, states: Sequence[Any]) -> bool:
        ns, w = f.workload.namespace, f.workload
        base = f"kcg-rollout-{w.kind.value.lower()}-{w.name}"
        me = next((s for s in states if s.name == f.pod), None)
        free = slots(rollout, states) + (1 if me is not None and not me.updating and (me.terminating or not me.ready) else 0)
        for i in range(free):  # a pod unavailable already costs the budget nothing more
            name = f"{base}-{i}"[:253]
            if acquire(self.ctx.api, ns, name, f"{self.node}/{f.holder}", LEASE_S, time.time, {LEASE_LABEL: f"{w.kind.value.lower()}.{w.name}"}):
                f.slot, f.renewed = name, time.monotonic()
                return True
        return False

    def _advance(self, f: Flight, pod: Mapping[str, Any] | None) -> None:
        """Take the pod as far as it can go now (each step once; a step that must wait returns)."""
        w = f.workload
        if f.slot and time.monotonic() - f.renewed >= LEASE_S / 3:  # a crashed agent's slot expires, a live one's never does
            acquire(self.ctx.api, w.namespace, f.slot, f"{self.node}/{f.holder}", LEASE_S, time.time)
            f.renewed = time.monotonic()
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
                self._once(w.key, "no-gate", lambda: self._workload_event(_wref(w), "NoReadinessGate",
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
        resp: Any = self.core.patch_namespaced_pod_status(f.pod, f.workload.namespace, body, _content_type=STRATEGIC_MERGE,
                                                          _preload_content=False, _request_timeout=(10, 30))
        pod: Mapping[str, Any] = json.loads(resp.data)
        return pod

    def _patch(self, f: Flight, pod: Mapping[str, Any]) -> bool:
        w = f.workload
        try:
            if f.change.kind is Kind.RECREATE:
                from kubernetes import client

                options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=f.uid))
                self.core.delete_namespaced_pod(f.pod, w.namespace, body=options, _preload_content=False, _request_timeout=(10, 30))
                self._pod_event(f, "RecreatedForUpdate", f"deleted for revision {f.update_hash}: {f.change.reason}", False)
                return True
            for attempt in range(3):  # a conflict (the kubelet wrote the pod's status meanwhile): read again, retry
                f.before = runs(pod)
                body = in_place_body(pod, w, f.update_hash, f.change, now_rfc3339())
                try:
                    self.core.patch_namespaced_pod(f.pod, w.namespace, body, _content_type=STRATEGIC_MERGE,
                                                   _preload_content=False, _request_timeout=(10, 30))
                    break
                except Exception as err:
                    if not isinstance(wrap("patch", err), APIConflict) or attempt == 2:
                        raise
                    got: Any = self.core.read_namespaced_pod(f.pod, w.namespace, _preload_content=False, _request_timeout=(10, 30))
                    pod = json.loads(got.data)
                    if str(pod["metadata"]["uid"]) != f.uid:
                        return False
            if f.change.resources:
                resize = {"spec": {"containers": [{"name": n, "resources": r} for n, r in sorted(f.change.resources.items())]}}
                self.core.patch_namespaced_pod_resize(f.pod, w.namespace, resize, _content_type=STRATEGIC_MERGE,
                                                      _preload_content=False, _request_timeout=(10, 30))
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
            self._workload_event(_wref(f.workload), "RolloutHalted",
                                 f"pod {f.pod} is not Ready at revision {f.update_hash} after {self.settings.ready_timeout_s:.0f}s: no further pod is updated until the template changes", True)
            self.ctx.metrics.rollout_pods.labels("failed").inc()
            self._release(f)

    def _release(self, f: Flight) -> None:
        if f.slot:
            release(self.ctx.api, f.workload.namespace, f.slot, f"{self.node}/{f.holder}")
            f.slot = ""

    def _finish(self, f: Flight) -> None:
        self._release(f)
        self.flights.pop(f.uid, None)
        log.info("rollout.done", workload=f.workload.key, pod=f.pod, how=f.change.kind.value)

    # ---- reporting ----

    def _report(self, w: Workload, raw: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], update_hash: str, waiting: Mapping[str, str]) -> None:
        """This node's pods of the workload, in the workload's status annotation (merged with other nodes')."""
        mine = {}
        for p in pods:
            if (p.get("spec") or {}).get("nodeName") != self.node:
                continue
            name = str(p["metadata"]["name"])
            uid = str(p["metadata"]["uid"])
            labels = (p.get("metadata") or {}).get("labels") or {}
            if uid in self.flights:
                mine[name] = "updating"
            elif name in waiting:
                mine[name] = f"waiting: {waiting[name]}"
            elif labels.get(REVISION_LABEL) == update_hash:
                mine[name] = "updated"
        text = json.dumps({"revision": update_hash, "node": self.node, "pods": mine}, sort_keys=True)
        if self.status.get(w.key) == text:
            return
        self.status[w.key] = text
        key = status_key(self.node)
        patch = {"metadata": {"annotations": {key: text}}}
        try:
            if w.kind.value == "StatefulSet":
                self.apps.patch_namespaced_stateful_set(w.name, w.namespace, patch, _preload_content=False, _request_timeout=(10, 30))
            else:
                self.apps.patch_namespaced_daemon_set(w.name, w.namespace, patch, _preload_content=False, _request_timeout=(10, 30))
        except Exception as err:
            problem = str(wrap(f"annotate {w.key}", err))
            self._once(w.key, "status-annotation", lambda: log.warning("rollout.status_not_written", workload=w.key, error=problem))

    def _pod_event(self, f: Flight, reason: str, message: str, warning: bool) -> None:
        self.ctx.event_on(PodRef(f.workload.namespace, f.pod, f.uid), reason, message, warning)
        self._workload_event(_wref(f.workload), reason, f"pod {f.pod}: {message}", warning)

    def _workload_event(self, ref: PodRef, reason: str, message: str, warning: bool) -> None:
        self.ctx.event_on(ref, reason, message, warning)
        (log.warning if warning else log.info)("rollout.event", object=f"{ref.kind}/{ref.namespace}/{ref.name}", reason=reason, message=message)

    def _once(self, obj: str, what: str, act: Any) -> None:
        if (obj, what) not in self._said:
            self._said.add((obj, what))
            act()


def status_key(node: str) -> str:
    """This node's status annotation on a workload: one key per node, so that nodes never overwrite each
    other (an annotation name is at most 63 characters)."""
    prefix, _, name = STATUS.partition("/")
    return f"{prefix}/" + f"{name}.{node}"[:63].rstrip(".-_")


def _ref(kind: str, raw: Mapping[str, Any]) -> PodRef:
    meta = raw.get("metadata") or {}
    return PodRef(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""), kind, "apps/v1")


def _wref(w: Workload) -> PodRef:
    return PodRef(w.namespace, w.name, w.uid, w.kind.value, "apps/v1")


def admission_policy_api(api: Any) -> bool:
    """Whether the cluster serves ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, 1.30+)."""
    from kubernetes import client

    try:
        found: Any = client.AdmissionregistrationV1Api(api).get_api_resources(_preload_content=False, _request_timeout=(10, 30))
        resources = json.loads(found.data).get("resources") or []
    except Exception:
        return False
    return any(isinstance(r, Mapping) and r.get("name") == "validatingadmissionpolicies" for r in resources)


def rollout_component(ctx: DaemonContext) -> Component | None:
    """On with `rollout.enabled` and pods from the API; off where the cluster cannot enforce the agent's
    admission policy, unless `rollout.allowWithoutAdmissionPolicy`."""
    settings = ctx.settings.rollout
    if not settings.enabled:
        return None
    if ctx.api is None or not ctx.node:
        log.info("rollout.off", message="graceful in-place updates need the API server and the node's name")
        return None
    if not admission_policy_api(ctx.api) and not settings.allow_without_admission_policy:
        log.warning("rollout.off", message="no ValidatingAdmissionPolicy API (Kubernetes < 1.30): the agent's pods patch and delete "
                    "cannot be confined to its node; graceful in-place updates stay off (rollout.allowWithoutAdmissionPolicy to run anyway)")
        return None
    return RolloutComponent(ctx, settings)
