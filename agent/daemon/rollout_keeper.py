"""The keeper's part of DaemonSet rollouts: it hands each pod its turn (agent.rollout.handout says why one
place does it and not every node).

What it reads: one watch of DaemonSets (those that opt in kept whole, the others as their name), and only
while one of them rolls out (a generation not yet observed, pods not at the update revision, or a turn still
written), a watch of that one's pods by its selector, trimmed to what a turn needs; its revisions once per
generation. What it writes: the turn annotation on a pod (granted, cleared), confined by its
ValidatingAdmissionPolicy to that one annotation; an Event on a DaemonSet whose opt-in is wrong.

Restart: nothing is kept but the pods' annotations — a keeper that starts again reads the turns written and
counts a turn it did not give from its own start.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from agent.daemon.objects import ObjectCache, Threads
from agent.daemon.rollout import kept_workload
from agent.daemon.rollout.revisions import Revisions
from agent.daemon.rollout.status import raw_ref, workload_ref
from agent.daemon.scope import ScopedWatches, WatchSpec
from agent.infra.apiserver import MERGE_PATCH, APIServer, path
from agent.infra.logging import get_logger
from agent.infra.metrics import KeeperMetrics
from agent.kube.errors import wrap
from agent.kube.status import PodRef, event_body, now_rfc3339
from agent.rollout.config import RolloutSettings
from agent.rollout.handout import START_S, TURN, handout, turn_of
from agent.rollout.workload import RolloutConfigError, Workload, owned_by, parse_workload

log = get_logger("agent.daemon.rollout_keeper")

RECHECK_S: Final = 10.0  # a rollout in flight is looked at again at least this often (a turn's start timeout)
READY_TIMEOUT_S: Final = 300.0  # a pod not Ready at the update revision this long halts it (rollout.readyTimeout)


def kept_pod(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """What a turn reads of a pod: its identity, labels, owner, the turn, its node, gates and conditions."""
    meta = raw.get("metadata") or {}
    kept = {k: meta[k] for k in ("namespace", "name", "uid", "labels", "ownerReferences", "deletionTimestamp", "creationTimestamp")
            if k in meta}
    turn = (meta.get("annotations") or {}).get(TURN)
    if turn is not None:
        kept["annotations"] = {TURN: turn}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    return {"metadata": kept, "spec": {k: spec[k] for k in ("nodeName", "readinessGates") if k in spec},
            "status": {"conditions": status.get("conditions") or []}}


def rolling(raw: Mapping[str, Any]) -> bool:
    """A DaemonSet whose status says it is not all at its update revision (or not observed yet)."""
    meta = raw.get("metadata") or {}
    status = raw.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return True
    return int(status.get("updatedNumberScheduled") or 0) < int(status.get("desiredNumberScheduled") or 0)


class TurnKeeper:
    """`threads` are its loops (the keeper's /healthz checks them)."""

    def __init__(
        self,
        api: APIServer,
        metrics: KeeperMetrics,
        ready_timeout_s: float = READY_TIMEOUT_S,
        settle_s: float = 0.2,
        start_s: float = START_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.ready_timeout_s = ready_timeout_s
        self.start_s = start_s
        self.settle_s = settle_s
        self.clock = clock
        self.wake = threading.Event()
        self.daemonsets = ObjectCache(self.wake.set, kept_workload)
        self.pods = ScopedWatches(api, metrics, "rollout pods", self.wake.set, keep=kept_pod)
        self.revisions = Revisions(api, RolloutSettings())
        self.threads = Threads(metrics)
        self.granted: dict[str, float] = {}  # pod uid -> when this keeper gave its turn
        self.resting: dict[str, float] = {}  # pod uid -> when its turn was taken back
        self._said: set[tuple[str, str]] = set()

    def start(self, stop: threading.Event) -> None:
        def watch(stop: threading.Event) -> None:
            self.threads.watch(self.api.lister(path("apps/v1", "daemonsets")), "DaemonSets", self.daemonsets, stop)

        self.threads.start([("DaemonSets", watch), ("rollout-turns", self._loop)], stop)

    def join(self, timeout_s: float) -> None:
        self.threads.join(timeout_s, self.wake)
        self.pods.close(timeout_s)

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.wake.wait(RECHECK_S)
            if stop.is_set():
                return
            stop.wait(self.settle_s)  # a burst of pod changes in one pass
            self.wake.clear()
            try:
                self.step()
            except Exception as err:  # one bad pass must not end the rollouts: log, go on
                log.warning("rollout_keeper.pass_failed", error=f"{type(err).__name__}: {err}")

    def _workloads(self) -> list[tuple[Workload, Mapping[str, Any]]]:
        out = []
        for raw in self.daemonsets.values():
            meta = raw.get("metadata") or {}
            try:
                w = parse_workload("DaemonSet", raw)
            except RolloutConfigError as err:
                self._event(raw_ref("DaemonSet", raw), "RolloutConfigInvalid", str(err))
                continue
            if w is not None:
                out.append((w, raw))
            else:
                self._said = {s for s in self._said if s[0] != str(meta.get("uid"))}
        return out

    def step(self) -> None:
        """One pass over the DaemonSets that opt in: watch the pods of those rolling out, write their turns."""
        workloads = self._workloads()
        turns = [p for p in self.pods.values() if turn_of(p) is not None]
        active = [(w, raw) for w, raw in workloads if rolling(raw) or any(owned_by(p, w.uid) for p in turns)]
        self.pods.want({w.key: WatchSpec(path("v1", "pods", w.namespace), label_selector=w.label_selector) for w, _ in active})
        self.metrics.rollouts.set(len(active))
        listed = self.pods.listed_keys()
        pods = self.pods.values()
        for w, _ in active:
            if w.key in listed:
                self._handout(w, [p for p in pods if owned_by(p, w.uid)])
        live = {str((p.get("metadata") or {}).get("uid")) for p in pods}
        for table in (self.granted, self.resting):  # pods gone, or of a rollout no longer watched
            for uid in [u for u in table if u not in live]:
                del table[uid]

    def _handout(self, w: Workload, pods: list[Mapping[str, Any]]) -> None:
        update = self.revisions.update_revision(w)
        if update is None:
            return  # the controller has not written this generation's revision yet
        update_hash, _ = update
        now = self.clock()
        uid_of = {str(p["metadata"]["name"]): str(p["metadata"]["uid"]) for p in pods}
        granted_at = {name: self.granted[uid] for name, uid in uid_of.items() if uid in self.granted}
        resting = frozenset(name for name, uid in uid_of.items() if now - self.resting.get(uid, -1e18) < self.ready_timeout_s)
        h = handout(w.rollout(update_hash, max(w.replicas, len(pods))), pods, now, granted_at, resting, self.ready_timeout_s,
                    self.start_s)
        for name in h.taken_back:
            self.resting[uid_of[name]] = now
            self.metrics.rollout_turns.labels("taken_back").inc()
            log.warning("rollout_keeper.turn_taken_back", workload=w.key, pod=name,
                        message="the pod's agent did not begin its update in time: the others go first")
        for name in h.clear:
            if self._write(w, name, None):
                self.granted.pop(uid_of[name], None)
                self.metrics.rollout_turns.labels("cleared").inc()
        for name in h.grant:
            if self._write(w, name, update_hash):
                self.granted[uid_of[name]] = now
                self.metrics.rollout_turns.labels("given").inc()
                log.info("rollout_keeper.turn", workload=w.key, pod=name, revision=update_hash)
        if h.halted:
            self._event(workload_ref(w), "RolloutHalted", f"pods {', '.join(h.halted)} are not Ready at revision {update_hash}: no further turn is handed out until the template changes")

    def _write(self, w: Workload, pod: str, value: str | None) -> bool:
        try:
            self.api.patch(path("v1", "pods", w.namespace, pod), {"metadata": {"annotations": {TURN: value}}}, MERGE_PATCH,
                           timeout=(10, 30))
        except Exception as err:
            log.warning("rollout_keeper.write_failed", workload=w.key, pod=pod, error=str(wrap(f"annotate pod {w.namespace}/{pod}", err)))
            self.metrics.rollout_turns.labels("failed").inc()
            self.wake.set()
            return False
        return True

    def _event(self, ref: PodRef, reason: str, message: str) -> None:
        """A Warning Event on the DaemonSet, once per message (and logged)."""
        if (ref.uid, message) in self._said:
            return
        self._said.add((ref.uid, message))
        log.warning("rollout_keeper.event", object=f"DaemonSet/{ref.namespace}/{ref.name}", reason=reason, message=message)
        body = event_body(ref, reason, message, True, "keeper", f"{ref.name}.{uuid.uuid4().hex[:16]}", now_rfc3339())
        try:
            self.api.create(path("v1", "events", ref.namespace), body, timeout=(10, 30))
        except Exception as err:
            log.warning("rollout_keeper.event_failed", object=f"DaemonSet/{ref.namespace}/{ref.name}", error=str(wrap("post event", err)))

