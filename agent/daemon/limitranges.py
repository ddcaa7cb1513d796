"""The namespaces' LimitRanges beside the pod loop, bounding the resize and pod-level annotations
(agent.pods.sources.limitrange) and, where the VPA component runs, capping the pod-level values VPA
gives a pod that sets them (LimitRange type Pod: agent.vpa.podlevel.pod_bounds).

Only the namespaces this node needs are read: those of its pods that carry an annotation where annotations
are honoured (`annotationNamespaces`), and (VPA on) of its pods that set pod-level resources in any namespace
(LimitRange type Pod caps what VPA gives them), one list/watch of `limitranges` per namespace
(agent.daemon.scope), added when such a pod arrives and stopped when the last one leaves. A node never
receives the LimitRanges of namespaces it has no annotated pod in, however many the cluster holds.

The daemon's first pass waits (FIRST_LIST_S at most) until the namespaces of the annotated pods it lists
first have answered; an annotation-driven change in a namespace not listed yet (or whose list fails) is refused
until it is (fail closed: it cannot be checked), and its pods are derived again the moment it is. When a
namespace's LimitRanges change, its pods carrying an annotation are derived again: one now beyond a bound
is refused (an Event; nothing of it changes), one now within applies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from agent.daemon.components import Component, DaemonContext
from agent.daemon.scope import ScopedWatches, WatchSpec
from agent.infra.apiserver import APIServer, path
from agent.infra.logging import get_logger
from agent.pods.sources.limitrange import LimitRanges
from agent.pods.sources.pod_level_annotation import POD_RESOURCES_ANNOTATION
from agent.pods.sources.resize_annotation import RESIZE_ANNOTATION

log = get_logger("agent.daemon.limitranges")

ANNOTATIONS: Final = (RESIZE_ANNOTATION, POD_RESOURCES_ANNOTATION)
FIRST_LIST_S: Final = 10.0  # the first pass waits this long at most for the namespaces it needs
SETTLE_S: Final = 0.2


def annotated(raw: Mapping[str, Any]) -> bool:
    meta = raw.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return isinstance(annotations, Mapping) and any(a in annotations for a in ANNOTATIONS)


def pod_level(raw: Mapping[str, Any]) -> bool:
    """The pod sets pod-level resources (`spec.resources`): a VPA sizes them within LimitRange type Pod."""
    spec = raw.get("spec")
    return isinstance(spec, Mapping) and spec.get("resources") is not None


def needed(raws: Iterable[Mapping[str, Any]], allowed: frozenset[str] | None, vpa: bool = False) -> frozenset[str]:
    """The namespaces whose LimitRanges the node needs: those of its annotated pods where annotations are
    honoured (`allowed`; None: everywhere), and (`vpa`) of its pods that set pod-level resources, wherever
    they run (VPA's pod-level values are capped by type Pod in any namespace). Pure."""
    out = set()
    for raw in raws:
        ns = str((raw.get("metadata") or {}).get("namespace") or "default")
        if (annotated(raw) and (allowed is None or ns in allowed)) or (vpa and pod_level(raw)):
            out.add(ns)
    return frozenset(out)


def wait_settled(ranges: LimitRanges) -> Callable[[threading.Event, list[Mapping[str, Any]]], None]:
    """The daemon's wait before its first pass on a node whose pods come from a directory: until the
    directory's LimitRanges are read or the daemon stops."""

    def wait(stop: threading.Event, pods: list[Mapping[str, Any]]) -> None:
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
        self.watches = ScopedWatches(self.api, ctx.metrics, "limitranges", self._changed)
        self.wake = threading.Event()
        ctx.on_pods.append(self.wake.set)
        self._lock = threading.Lock()
        self._reported: set[str] = set()  # problems already logged
        self._failing: dict[str, str] = {}  # namespaces whose first list fails, and why (logged once each)
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(target=self._loop, args=(stop,), name="limitranges", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.watches.close(timeout_s)

    def scope(self, raws: Iterable[Mapping[str, Any]]) -> None:
        """Watch the LimitRanges of the namespaces the node's annotated (or, VPA on, pod-level) pods are in,
        and only those."""
        namespaces = needed(raws, self.ctx.settings.annotation_namespaces, self.ctx.vpas is not None)
        self.watches.want({ns: WatchSpec(path("v1", "limitranges", ns)) for ns in namespaces})

    def wait_first(self, stop: threading.Event, pods: list[Mapping[str, Any]]) -> None:
        """Before the daemon's first pass: the namespaces of the first listed pods, known (or FIRST_LIST_S)."""
        self.scope(pods)
        self._changed()
        if self.watches.listed():
            return
        log.info("limitranges.waiting", message="the first pass waits for the LimitRanges of its annotated pods' namespaces")
        deadline = time.monotonic() + FIRST_LIST_S
        while not stop.is_set() and not self._answered() and time.monotonic() < deadline:
            stop.wait(0.1)

    def _answered(self) -> bool:
        """Every namespace needed has answered its first list, with its objects or an error."""
        wanted = self.watches.keys()
        return wanted <= (self.watches.listed_keys() | self.watches.failures().keys())

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.wake.wait()
            if stop.wait(SETTLE_S):
                return
            self.wake.clear()
            try:
                self.scope(self.ctx.raw_pods())
            except Exception as err:  # one bad pass must not end the bounds: log, go on
                log.warning("limitranges.scope_failed", error=f"{type(err).__name__}: {err}")

    def _changed(self) -> None:
        with self._lock:  # each namespace's watch calls it from its own thread
            failing = self.watches.failures()
            changed, problems = self.ranges.replace_objects(self.watches.values(), self.watches.listed_keys(), failing)
            new_failures = {ns: why for ns, why in failing.items() if self._failing.get(ns) != why}
            self._failing = failing
        for ns, why in sorted(new_failures.items()):
            self.ctx.metrics.errors.labels("LimitRangesUnavailable").inc()
            log.warning("limitranges.unavailable", namespace=ns, error=why,
                        message=f"annotation-driven changes in {ns} are refused until its LimitRanges can be listed")
        for problem in problems:
            if problem not in self._reported:
                self._reported.add(problem)
                self.ctx.metrics.errors.labels("LimitRangeParseError").inc()
                log.warning("limitrange.invalid", message=problem)
        if changed is None or changed:
            log.info("limitranges.changed", namespaces=sorted(changed) if changed is not None else "all")
            self._refresh(changed)

    def _refresh(self, namespaces: frozenset[str] | None) -> None:
        """Derive again the pods carrying an annotation (or, VPA on, setting pod-level resources) in
        `namespaces` (None: every namespace)."""
        uids = []
        vpa = self.ctx.vpas is not None
        for raw in self.ctx.raw_pods():
            meta = raw.get("metadata") or {}
            if (annotated(raw) or (vpa and pod_level(raw))) and (namespaces is None or (meta.get("namespace") or "default") in namespaces):
                uids.append(str(meta.get("uid") or ""))
        if uids:
            self.ctx.refresh(uids)


def limitrange_component(ctx: DaemonContext) -> Component | None:
    """On when an annotation can be honoured here, or VPA in place is on, and the pods come from the API (on a
    bare node the manifest directory holds the LimitRanges: agent.daemon.directory)."""
    if ctx.limit_ranges is None or ctx.api is None:
        return None
    return LimitRangeComponent(ctx, ctx.limit_ranges)
