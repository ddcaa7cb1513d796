"""Graceful in-place updates beside the pod loop (seed 004): this node's part of the rollout of every
StatefulSet and DaemonSet that opts in (agent.rollout.workload).

StatefulSets: one watch per StatefulSet this node has pods of (narrowed to its one object by
`metadata.name`: a node never receives the workloads of other nodes, agent.daemon.scope); a workload is
looked at closer only when one of this node's pods is behind its update revision. Then, each second: the
workload's pods (one LIST), its revisions (cached: they never change), the order (agent.rollout.order).

DaemonSets: no watch at all. A DaemonSet has a pod on every node, so the cluster's keeper hands out the turns
(agent.rollout.handout): this node sees a turn on one of its own pods through the pod watch it has anyway,
then reads the DaemonSet and its revision once (a GET each).

For a pod whose turn it is, one update, step by step, each step once:

  slot      take a Lease `kcg-rollout-<kind>-<name>-<i>` (i below the budget): no two nodes exceed it
  prepull   in place: pull the new images through CRI (a present image is not pulled again)
  unready   the pod's InPlaceUpdateReady condition False (with the readiness gate, Services drop it)
  grace     wait `grace-period-seconds`
  patch     in place: images + revision labels, one patch with the pod's resourceVersion as precondition;
            Recreate: delete the pod (UID precondition), the controller recreates it at the update revision
  wait      the changed containers run anew and are ready (the others did not restart), then the
            condition True; for a recreated pod, its successor Ready at the update revision
  done      release the slot; Events on the pod and the workload

The parts: the API reads and the revisions' cache (`revisions`), the slots (`slots`), one pod's
update (`update`), the Events and the status annotation (`status`); here, the watches and the pass.

A crash anywhere loses nothing: the slot's Lease expires, a pod left with the condition False is taken up
again by the next start (its revision label says whether the patch happened). It never evicts.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Final

from agent.daemon.components import Component, DaemonContext
from agent.daemon.objects import Threads
from agent.daemon.rollout.revisions import Revisions
from agent.daemon.rollout.slots import Slots
from agent.daemon.rollout.status import Notices, raw_ref
from agent.daemon.rollout.update import Flight, Updater
from agent.daemon.scope import ScopedWatches, WatchSpec
from agent.infra.apiserver import APIServer, path
from agent.infra.logging import get_logger
from agent.kube.trim import without_managed_fields
from agent.pods.parse import controller_owner
from agent.rollout.config import RolloutSettings
from agent.rollout.handout import turn_of
from agent.rollout.order import WorkloadKind, turns
from agent.rollout.steps import is_failed
from agent.rollout.workload import (
    POLICY,
    REVISION_LABEL,
    RolloutConfigError,
    Workload,
    parse_workload,
    pod_state,
)

log = get_logger("agent.daemon.rollout")

TICK_S: Final = 1.0
# A workload behind on this node is read again (its pods: one LIST) when it or this node's pods of it
# changed, while an update of it is in flight here, or after about RECHECK_S (a slot of a crashed agent
# expires, a pod elsewhere turned Ready without the workload's status moving): never every tick on
# every node, which on a DaemonSet of N nodes would be N lists of N pods a second.
RECHECK_S: Final = 10.0


def kept_workload(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """What is kept of a StatefulSet or DaemonSet between watch events: the object (less its
    managedFields) when it opts in; its name alone when not (`parse_workload` reads nothing else of it
    then, and the watch sends it whole again when it opts in)."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    if POLICY in (meta.get("annotations") or {}):
        return without_managed_fields(raw)
    return {"metadata": {k: meta[k] for k in ("namespace", "name") if k in meta}}


class RolloutComponent:
    name = "rollout"

    def __init__(self, ctx: DaemonContext, settings: RolloutSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.node = ctx.node or ""
        self.api = api = APIServer(ctx.api)
        self.wake = threading.Event()
        self.statefulsets = ScopedWatches(api, ctx.metrics, "statefulsets", self.wake.set, keep=kept_workload)
        self._turns: dict[str, tuple[str, Workload, Mapping[str, Any]]] = {}  # pod uid -> (its turn, the DaemonSet, revision)
        self._looked: dict[str, tuple[object, float]] = {}  # workload key -> (what it was read at, when)
        self._versions: dict[str, str] = {}  # workload key -> its resourceVersion as watched
        self.rescope = threading.Event()  # the node's pods changed: which workloads it watches may too
        self.rescope.set()
        ctx.on_pods.append(self._pods_changed)
        self.reads = Revisions(api, settings)
        self.notices = Notices(ctx, self.node, api)
        self.updates = Updater(ctx, settings, api, Slots(ctx.api, self.node), self.notices)
        self._threads = Threads(ctx.metrics)

    # ---- lifecycle ----

    def start(self, stop: threading.Event) -> None:
        self._threads.start([("rollout", self._loop)], stop)

    def join(self, timeout_s: float) -> None:
        self._threads.join(timeout_s, self.wake)
        self.statefulsets.close(timeout_s)

    def _pods_changed(self) -> None:
        self.rescope.set()
        self.wake.set()

    def scope(self) -> None:
        """Watch the StatefulSets that own this node's pods, and those with an update in flight here (a
        recreated pod is gone until its successor runs), one object each. DaemonSets are not watched: their
        turns come on the pods (agent.rollout.handout)."""
        wanted: set[tuple[str, str]] = set()
        for p in self.ctx.pods():
            if p.owner is not None and p.owner[0] == "StatefulSet":
                wanted.add((p.namespace, p.owner[1]))
        for f in self.updates.flights.values():
            if f.workload.kind is WorkloadKind.STATEFUL_SET:
                wanted.add((f.workload.namespace, f.workload.name))
        self.statefulsets.want({
            f"{ns}/{name}": WatchSpec(path("apps/v1", "statefulsets", ns), field_selector=f"metadata.name={name}")
            for ns, name in wanted
        })

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.wake.wait(TICK_S)
            self.wake.clear()
            if stop.is_set():
                return
            try:
                if self.rescope.is_set():
                    self.rescope.clear()
                    self.scope()
                self.tick()
            except Exception as err:  # one bad pass must not end the rollouts: log, go on
                log.warning("rollout.tick_failed", error=f"{type(err).__name__}: {err}")

    # ---- one pass ----

    def workloads(self) -> list[Workload]:
        """The watched workloads that opt in (one whose policy is refused: an Event, once)."""
        out = []
        self._versions = {}
        for kind, cache in (("StatefulSet", self.statefulsets),):
            for raw in cache.values():
                meta = raw.get("metadata") or {}
                self._versions[f"{kind}/{meta.get('namespace') or 'default'}/{meta.get('name')}"] = str(meta.get("resourceVersion") or "")
                try:
                    w = parse_workload(kind, raw)
                except RolloutConfigError as err:
                    meta = raw.get("metadata") or {}
                    say = partial(self.notices.workload_event, raw_ref(kind, raw), "RolloutConfigInvalid", str(err), True)
                    self.notices.once(f"{kind}/{meta.get('namespace')}/{meta.get('name')}", str(err), say)
                    continue
                if w is not None:
                    out.append(w)
        return out

    def tick(self) -> None:
        mine = self.ctx.pods()
        workloads = self.workloads()
        self.updates.open_gates(workloads)
        self.daemonset_turns()
        flights = self.updates.flights
        for w in workloads:
            local = [p for p in mine if p.namespace == w.namespace and p.owner == (w.kind.value, w.name)]
            flying = [f for f in flights.values() if f.workload.key == w.key]
            if not local and not flying:
                continue
            update = self.reads.update_revision(w)
            if update is None:
                continue
            update_hash, update_rev = update
            if not flying and all(p.labels.get(REVISION_LABEL) == update_hash for p in local):
                continue  # this node's pods are all updated: nothing to read
            if not flying and not self._due(w, local):
                continue
            self._pass(w, update_hash, update_rev)

    def daemonset_turns(self) -> None:
        """This node's DaemonSet pods: take up each turn the keeper wrote, and take each update in flight a
        step further, from the node's own pod watch (no list of the DaemonSet's pods)."""
        raw = {str((p.get("metadata") or {}).get("uid")): p for p in self.ctx.raw_pods()}
        for f in [f for f in self.updates.flights.values() if f.workload.kind is WorkloadKind.DAEMON_SET]:
            pod = raw.get(f.uid)  # a DaemonSet's pod names are generated: none is ever the same pod again
            self.updates.advance(f, pod)
            self.notices.publish(f.workload, [pod] if pod is not None else [], f.update_hash, {}, self.updates.flights)
        for uid, pod in raw.items():
            meta = pod.get("metadata") or {}
            turn = turn_of(pod)
            owner = controller_owner(meta)
            if (turn is None or owner is None or owner[0] != "DaemonSet" or uid in self.updates.flights
                    or (meta.get("labels") or {}).get(REVISION_LABEL) == turn or meta.get("deletionTimestamp")):
                continue
            self._take_turn(pod, str(meta.get("namespace") or "default"), owner[1], turn)

    def _take_turn(self, pod: Mapping[str, Any], ns: str, name: str, turn: str) -> None:
        meta = pod["metadata"]
        seen = self._turns.get(str(meta["uid"]))
        if seen is None or seen[0] != turn:
            try:
                raw = self.api.get(path("apps/v1", "daemonsets", ns, name), timeout=(10, 30))
                w = parse_workload("DaemonSet", raw)
            except RolloutConfigError as err:
                problem = str(err)  # the keeper says it on the DaemonSet; here, once in the log
                self.notices.once(f"DaemonSet/{ns}/{name}", problem, lambda: log.warning("rollout.turn_refused", pod=meta["name"], error=problem))
                return
            if w is None:
                return  # no longer opts in: the keeper takes the turn back
            update = self.reads.update_revision(w)
            if update is None or update[0] != turn:
                return  # the keeper wrote it for another revision: its next pass rewrites it
            seen = (turn, w, update[1])
            self._turns[str(meta["uid"])] = seen
        _, w, update_rev = seen
        change = self.reads.change(w, pod, update_rev)
        if change is None:
            return
        f = Flight(w, str(meta["name"]), str(meta["uid"]), change, turn)
        state = pod_state(pod, self.node, False)
        if self.updates.begin(f, pod, w.rollout(turn, max(w.replicas, 1)), [state]):
            self._turns.pop(str(meta["uid"]), None)
            self.notices.publish(w, [pod], turn, {}, self.updates.flights)
        else:
            self.notices.publish(w, [pod], turn, {meta["name"]: "waiting for a free slot (another node is updating)"}, self.updates.flights)

    def _due(self, w: Workload, local: list[Any]) -> bool:
        """Whether a workload behind here is read again now (RECHECK_S)."""
        at = (self._versions.get(w.key), tuple(sorted((p.uid, p.labels.get(REVISION_LABEL), p.phase) for p in local)))
        seen = self._looked.get(w.key)
        now = time.monotonic()
        if seen is not None and seen[0] == at and now < seen[1]:
            return False
        self._looked[w.key] = (at, now + RECHECK_S * random.uniform(0.5, 1.5))
        return True

    def _pass(self, w: Workload, update_hash: str, update_rev: Mapping[str, Any]) -> None:
        flights = self.updates.flights
        pods = self.reads.pods(w)
        by_name = {str(p["metadata"]["name"]): p for p in pods}
        for f in [f for f in flights.values() if f.workload.key == w.key]:
            f.workload = w
            self.updates.advance(f, by_name.get(f.pod))
        now = time.time()
        states = []
        for p in pods:
            s = pod_state(p, str((p.get("spec") or {}).get("nodeName") or ""), is_failed(p, update_hash, now, self.settings.ready_timeout_s))
            if s.node == self.node and s.updating and str(p["metadata"]["uid"]) not in flights:
                s = replace(s, updating=False)  # left half-done by an earlier start of this agent: take it up
            states.append(s)
        rollout = w.rollout(update_hash, max(w.replicas, len(states)))
        waiting: dict[str, str] = {}
        for turn in turns(rollout, states, self.node):
            pod = by_name.get(turn.pod)
            if pod is None or str(pod["metadata"]["uid"]) in flights:
                continue
            if not turn.go:
                waiting[turn.pod] = turn.reason
                continue
            change = self.reads.change(w, pod, update_rev)
            if change is None:
                waiting[turn.pod] = "its revision is not readable"
                continue
            f = Flight(w, turn.pod, str(pod["metadata"]["uid"]), change, update_hash)
            if not self.updates.begin(f, pod, rollout, states):
                waiting[turn.pod] = "waiting for a free slot (another node is updating)"
        self.notices.publish(w, pods, update_hash, waiting, flights)


def admission_policy_api(api: Any) -> bool:
    """Whether the cluster serves ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, 1.30+)."""
    try:
        resources = (APIServer(api).get(path("admissionregistration.k8s.io/v1"), timeout=(10, 30)) or {}).get("resources") or []
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
