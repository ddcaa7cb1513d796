"""The namespaces' LimitRanges beside the pod loop, bounding the resize and pod-level annotations
(agent.pods.sources.limitrange).

One cluster-wide list/watch of `limitranges` (RBAC cannot grant them per namespace); only those of the
namespaces where annotations are honoured are kept. It runs whenever an annotation can be honoured
(`annotationNamespaces` not `[]`): that is known from the settings alone, and whether some pod carries an
annotation is not known before the first pass that must already be bounded. The daemon's first pass waits
until the first list has answered; when it fails, annotation-driven changes are refused (they cannot be
checked) until a list succeeds. When a namespace's LimitRanges change, its pods carrying an annotation are
derived again: one now beyond a bound is refused (an Event; nothing of it changes), one now within applies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from agent.daemon.components import Component, DaemonContext
from agent.daemon.objects import ObjectCache, Threads
from agent.infra.apiserver import APIServer, path
from agent.infra.logging import get_logger
from agent.infra.queue import Backoff
from agent.kube.errors import APIError
from agent.kube.watch import Watcher
from agent.pods.sources.limitrange import LimitRanges
from agent.pods.sources.pod_level_annotation import POD_RESOURCES_ANNOTATION
from agent.pods.sources.resize_annotation import RESIZE_ANNOTATION

log = get_logger("agent.daemon.limitranges")

ANNOTATIONS: Final = (RESIZE_ANNOTATION, POD_RESOURCES_ANNOTATION)


def annotated(raw: Mapping[str, Any]) -> bool:
    meta = raw.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return isinstance(annotations, Mapping) and any(a in annotations for a in ANNOTATIONS)


def wait_settled(ranges: LimitRanges) -> Callable[[threading.Event], None]:
    """The daemon's wait before its first pass: until the LimitRanges are known (listed, or the list failed)
    or the daemon stops."""

    def wait(stop: threading.Event) -> None:
        if not ranges.settled.is_set():
            log.info("limitranges.waiting", message="the first pass waits for the namespaces' LimitRanges")
        while not stop.is_set() and not ranges.settled.wait(0.5):
            pass

    return wait


class LimitRangeComponent:
    name = "limitranges"

    def __init__(self, ctx: DaemonContext, ranges: LimitRanges) -> None:
        self.ctx = ctx
        self.ranges = ranges
        self.api = APIServer(ctx.api)
        self.cache = ObjectCache(self._changed)
        self._threads = Threads(ctx.metrics)
        self._reported: set[str] = set()  # problems already logged

    def start(self, stop: threading.Event) -> None:
        self._threads.start([("limitranges", self._loop)], stop)

    def join(self, timeout_s: float) -> None:
        self._threads.join(timeout_s)

    def _loop(self, stop: threading.Event) -> None:
        """List until one list answers (each failure: the LimitRanges are unavailable), then watch from it."""
        watcher = Watcher(self.api.lister(path("v1", "limitranges")), "limitranges", self.ctx.metrics)
        self._threads.watchers.append(watcher)
        backoff = Backoff(base=1.0, cap=30.0)
        while not stop.is_set():
            try:
                objects, rv = watcher.list()
            except APIError as err:
                self.ctx.metrics.errors.labels(type(err).__name__).inc()
                if self.ranges.unavailable(str(err)):
                    log.warning("limitranges.unavailable", error=str(err),
                                message="annotation-driven changes are refused until the LimitRanges can be listed")
                    self._refresh(None)
                stop.wait(backoff.next("list"))
                continue
            self.cache.snapshot(objects)
            watcher.run(self.cache, stop, listed_at=rv)
            return

    def _changed(self) -> None:
        changed, problems = self.ranges.replace_objects(self.cache.values())
        for problem in problems:
            if problem not in self._reported:
                self._reported.add(problem)
                self.ctx.metrics.errors.labels("LimitRangeParseError").inc()
                log.warning("limitrange.invalid", message=problem)
        if changed is None or changed:
            log.info("limitranges.changed", namespaces=sorted(changed) if changed is not None else "all")
            self._refresh(changed)

    def _refresh(self, namespaces: frozenset[str] | None) -> None:
        """Derive again the pods carrying an annotation in `namespaces` (None: every namespace)."""
        uids = []
        for raw in self.ctx.raw_pods():
            meta = raw.get("metadata") or {}
            if annotated(raw) and (namespaces is None or (meta.get("namespace") or "default") in namespaces):
                uids.append(str(meta.get("uid") or ""))
        if uids:
            self.ctx.refresh(uids)


def limitrange_component(ctx: DaemonContext) -> Component | None:
    """On when an annotation can be honoured here and the pods come from the API (on a bare node the
    manifest directory holds the LimitRanges: agent.daemon.directory)."""
    if ctx.limit_ranges is None or ctx.api is None:
        return None
    return LimitRangeComponent(ctx, ctx.limit_ranges)
