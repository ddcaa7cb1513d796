"""The reconcile loop: a pod cache fed by a source, a work queue, workers, a resync timer.

Why this shape (kopf's reactor, the kubelet's QoS manager):
- the source (API watch, or a manifest directory) runs in its own thread and only updates the cache and
  enqueues keys; it never waits for a reconcile;
- a key is a pod UID or TIERS; the queue coalesces (latest state wins) and never hands one key to two
  workers, so a pod's passes never overlap; a pod's arrival, change or departure also enqueues TIERS;
- every `resyncPeriod` every pod and the tiers are enqueued again: missed events, drift and the tiers'
  qos-reserved retry are caught there (the kubelet does its QoS pass every 60 s);
- a pod that cannot be read or computed (or whose annotations are refused) gets an Event and a log line,
  nothing of it is changed, and the other pods go on;
- stopping: the source stops, the queue stops handing out work, each worker finishes its current step
  (never more), the checkpoint is flushed, queued reports are sent, and `run` returns.

What each pass tells (metrics, the log line, Events, resize conditions) is `agent.daemon.reporting`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from agent.core.compute.node import TERMINAL_PHASES
from agent.core.model import PodUID, PodView
from agent.daemon import heap
from agent.daemon.reconciler import Outcome, Reconciler, Report
from agent.daemon.reporting import PassReporting
from agent.infra.errors import PermanentError
from agent.infra.logging import get_logger
from agent.infra.metrics import Metrics
from agent.infra.queue import TIERS, ShutDown, WorkQueue
from agent.kube.status import PodRef, StatusReporter
from agent.kube.trim import without_managed_fields
from agent.kube.watch import PodSink, pod_identity
from agent.pods.parse import PodParseError, parse_pod
from agent.pods.sources import DEFAULT_SOURCES, Source
from agent.resize.checkpoint import CheckpointError
from agent.resize.types import ResizeStatus

log = get_logger("agent.daemon")


class PodSource(Protocol):
    def run(self, sink: PodSink, stop: threading.Event) -> None: ...

    def interrupt(self) -> None: ...


class RawsNotKept(PermanentError):
    """A daemon built without the pods' objects (`keep_raw=False`: no component) was asked for them."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} needs the pods' objects as the source sent them: a Daemon with keep_raw=True", what=what
        )


@dataclass(frozen=True, slots=True)
class _Entry:
    raw: Mapping[str, Any] | None  # None unless the daemon keeps the objects (`keep_raw`)
    ref: PodRef
    view: PodView | None  # None when the pod could not be read


def _membership(view: PodView | None) -> tuple[Any, ...] | None:
    """What the components that follow the node's pods read of one: where it belongs (its namespace,
    owner and labels), not its resources."""
    return None if view is None else (view.namespace, view.owner, view.labels)


class Daemon:
    def __init__(
        self,
        reconciler: Reconciler,
        source: PodSource,
        reporter: StatusReporter,
        metrics: Metrics,
        *,
        node: str | None,
        resync_period_s: float,
        workers: int = 2,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        sources: Sequence[Source] = DEFAULT_SOURCES,
        keep_raw: bool = True,
    ) -> None:
        # `keep_raw`: each pod's object as the source sent it, for `refresh` and `raws` (the components'
        # need); without components nothing reads it again, and it is the largest thing per pod.
        self.keep_raw = keep_raw
        self.reconciler = reconciler
        self.sources = tuple(sources)
        self.source = source
        self.reporter = reporter
        self.metrics = metrics
        self.node = node
        self.resync_period_s = resync_period_s
        self.workers = workers
        self.clock = clock
        self.queue = WorkQueue()
        self.stop = stop or threading.Event()  # set by the signal handler: finish the step, then stop
        self._cache: dict[str, _Entry] = {}
        self._invalid: dict[str, str] = {}  # uid -> the parse error last reported
        self._lock = threading.Lock()
        self.reporting = PassReporting(metrics, reporter, self._ref)
        self._synced = threading.Event()
        self._tiers_done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._source_thread: threading.Thread | None = None
        self.status_hooks: list[Callable[[Sequence[ResizeStatus]], None]] = []  # components following resizes
        # outside state the first pass needs (the namespaces' LimitRanges): each waits until it is known
        self.before_first_pass: list[Callable[[threading.Event, list[Mapping[str, Any]]], None]] = []
        # components that follow which pods the node has (a pod arrived, left, or changed its owner or
        # labels): called from the watch's thread, so each only wakes its own
        self.membership_hooks: list[Callable[[], None]] = []

    # -- the sink the sources call -----------------------------------------------------------------

    def snapshot(self, pods: list[Mapping[str, Any]]) -> None:
        seen: set[str] = set()
        if not self._synced.is_set():
            for wait in self.before_first_pass:  # the list's resourceVersion is kept: nothing is missed
                wait(self.stop, pods)
            self._start_reconciler(pods)
        for raw in pods:
            uid = self._ingest(raw)
            if uid:
                seen.add(uid)
        with self._lock:
            gone = [uid for uid in self._cache if uid not in seen]
            for uid in gone:
                del self._cache[uid]
        for uid in gone:
            self.queue.add(uid)
        self.queue.add(TIERS)
        self._synced.set()
        self._membership_changed()

    def _membership_changed(self) -> None:
        for hook in self.membership_hooks:
            hook()

    def _start_reconciler(self, pods: list[Mapping[str, Any]]) -> None:
        """The reconciler sees the node's first full pod list before any pass (the resize engine admits
        every existing pod at its allocated values first)."""
        views = []
        for raw in pods:
            try:
                views.append(parse_pod({"kind": "Pod", **raw}, self.sources))
            except PodParseError:
                continue  # reported when the pod is ingested
        for warning in self.reconciler.start(views):
            log.warning("reconciler.start", message=warning)

    def behind(self, reason: str | None) -> None:
        self.reconciler.view_behind(reason)

    def upsert(self, pod: Mapping[str, Any]) -> None:
        self._ingest(pod)
        self.queue.add(TIERS)

    def removed(self, uid: str, key: str) -> None:
        with self._lock:
            self._cache.pop(uid, None)
            self._invalid.pop(uid, None)
        if uid:
            self.queue.add(uid)
        self.queue.add(TIERS)
        self._membership_changed()

    def _ingest(self, raw: Mapping[str, Any]) -> str | None:
        if self.keep_raw:
            raw = without_managed_fields(raw)  # kept for the pod's life: what re-deriving it reads
        uid, key = pod_identity(raw)
        namespace, _, name = key.partition("/")
        ref = PodRef(namespace, name, uid)
        node = (raw.get("spec") or {}).get("nodeName") if isinstance(raw.get("spec"), Mapping) else None
        if self.node is not None and node is not None and node != self.node:
            return None  # not ours (a manifest for another node)
        try:
            view: PodView | None = parse_pod({"kind": "Pod", **raw}, self.sources)
            self._invalid.pop(uid, None)  # readable again: a later refusal is reported again
        except PodParseError as err:
            view = None
            self.metrics.errors.labels("PodParseError").inc()
            if self._invalid.get(uid) != err.message:
                self._invalid[uid] = err.message
                log.warning("pod.invalid", pod=key, pod_uid=uid, reason=err.reason, error=err.message)
                if uid:
                    self.reporter.event(ref, err.reason, err.message, warning=True)
        if not uid:
            return None
        with self._lock:
            previous = self._cache.get(uid)
            self._cache[uid] = _Entry(raw if self.keep_raw else None, ref, view)
        if previous is None or previous.view != view or (self.keep_raw and previous.raw != raw):
            self.queue.add(uid)
        if previous is None or _membership(previous.view) != _membership(view):
            self._membership_changed()
        return uid

    def refresh(self, uids: Iterable[str] | None = None) -> None:
        """A source's outside state changed (a recommendation, a VPA): derive these pods' desired state
        again from their last known objects (every pod when `uids` is None); those whose view changed
        get a pass. Safe to call from any thread."""
        if not self.keep_raw:
            raise RawsNotKept("refresh")
        with self._lock:
            wanted = list(self._cache) if uids is None else [u for u in uids if u in self._cache]
            raws = [r for u in wanted if (r := self._cache[u].raw) is not None]
        for raw in raws:
            self._ingest(raw)
        if raws:
            self.queue.add(TIERS)

    # -- workers -------------------------------------------------------------------------------------

    def views(self) -> list[PodView]:
        """The node's pods as last seen (for components beside the loop)."""
        return self._views()

    def raws(self) -> list[Mapping[str, Any]]:
        """The node's pods as the API last sent them (for components that need more than the view)."""
        if not self.keep_raw:
            raise RawsNotKept("raws")
        with self._lock:
            return [e.raw for e in self._cache.values() if e.raw is not None]

    def pod_count(self) -> int:
        """How many pods the node has as last seen (unreadable ones too)."""
        with self._lock:
            return len(self._cache)

    def _views(self) -> list[PodView]:
        """Every pod bound here, terminal ones too: they count in the tiers until known gone."""
        with self._lock:
            return [e.view for e in self._cache.values() if e.view is not None]

    def _work(self) -> None:
        while True:
            try:
                key = self.queue.get()
            except ShutDown:
                return
            try:
                self._process(key)
            except Exception as err:  # a bug in one pass must not kill the worker
                self.metrics.errors.labels(type(err).__name__).inc()
                log.exception("reconcile.crashed", key=key)
                self.queue.add_after(key, 5.0)
            finally:
                self.queue.done(key)

    def _process(self, key: str) -> None:
        start = self.clock()
        if key == TIERS:
            with structlog.contextvars.bound_contextvars(scope="tiers"):
                report = self.reconciler.reconcile_tiers(self._views(), self.stop.is_set)
                self._finish(key, None, report, start)
            if report.outcome is not Outcome.INTERRUPTED and not self._tiers_done.is_set():
                self._tiers_done.set()
                heap.settle()  # what the first full pass built stays: out of the collector's way
            return
        with self._lock:
            entry = self._cache.get(key)
        if entry is None or entry.view is None or entry.view.phase in TERMINAL_PHASES:
            if entry is None:
                self.reconciler.forget_pod(PodUID(key))
                self.reporting.forget(key)
                log.debug("reconcile", scope="pod", pod_uid=key, outcome=Outcome.FORGOTTEN.value)
            return
        pod = entry.view
        with structlog.contextvars.bound_contextvars(pod=pod.key, namespace=pod.namespace, pod_uid=pod.uid):
            report = self.reconciler.reconcile_pod(pod, self.stop.is_set)
            self._finish(key, entry.ref, report, start)

    def _ref(self, uid: str) -> PodRef | None:
        with self._lock:
            entry = self._cache.get(uid)
        return entry.ref if entry is not None else None

    def _finish(self, key: str, ref: PodRef | None, report: Report, start: float) -> None:
        self.reporting.publish(key, ref, report, self.clock() - start)
        if report.statuses:
            self.metrics.set_resize_states(self.reconciler.states())
            for hook in self.status_hooks:
                hook(report.statuses)
        if report.retry_after_s is not None and report.outcome is not Outcome.INTERRUPTED:
            self.queue.add_after(key, report.retry_after_s)

    # -- lifecycle ---------------------------------------------------------------------------------

    def event(self, uid: str, reason: str, message: str, warning: bool = False) -> None:
        """An Event on the pod with this UID (for the components); nothing when the pod is gone."""
        ref = self._ref(uid)
        if ref is not None and ref.uid:
            self.reporter.event(ref, reason, message, warning)

    def healthy(self) -> tuple[bool, str]:
        dead = [t.name for t in self._threads if not t.is_alive()]
        if dead and not self.stop.is_set():
            return False, f"thread(s) {', '.join(dead)} stopped"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if not self._synced.is_set():
            return False, "the pod source has not delivered the node's pods yet"
        if not self._tiers_done.is_set():
            return False, "the QoS tiers have not been reconciled yet"
        return True, "ok"

    def _resync(self) -> None:
        while not self.stop.wait(self.resync_period_s):
            self.resync()

    def resync(self) -> None:
        """Catch drift and anything missed: the reconciler says which pods need a pass (one read of the
        node instead of a pass per pod); the tiers item always runs."""
        with self._lock:
            keys = list(self._cache)
        views = self._views()
        try:
            chosen: set[str] | list[str] = self.reconciler.stale(views)
        except Exception:  # a bug there must not stop the resync: pass every pod, as before
            log.exception("resync.stale_failed")
            chosen = keys
        for key in chosen:
            self.queue.add(key)
        self.queue.add(TIERS)
        self.metrics.pods.set(len(keys))
        log.debug("resync", pods=len(keys), passes=len(chosen))

    def start(self) -> None:
        self._source_thread = threading.Thread(
            target=self.source.run, args=(self, self.stop), name="pod-source", daemon=True
        )
        self._source_thread.start()
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        resync = threading.Thread(target=self._resync, name="resync", daemon=True)
        resync.start()
        self._threads.append(resync)

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Finish the current steps, flush the checkpoint, send queued reports."""
        self.stop.set()
        self.source.interrupt()
        self.queue.shutdown()
        deadline = self.clock() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - self.clock()))
        try:
            self.reconciler.flush()
        except CheckpointError as err:  # what was held back is redone from the durable records at start
            log.warning("state not flushed at shutdown", error=err.user_message())
        self.reporter.close(timeout=5.0)
        if self._source_thread is not None:
            self._source_thread.join(timeout=2.0)
