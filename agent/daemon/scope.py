"""Watches that follow the node's pods: each feature says which objects its node needs now (one VPA
watch filtered by label, one watch per workload the node has pods of, one per namespace), and only those
are listed and watched.

Why: one agent runs on every node, so whatever one agent receives the API server sends once per node. A
watch of a whole kind would make every node pay for every object of the cluster; a watch narrowed by the
server (`fieldSelector`, `labelSelector`, a namespace) makes a node pay for its own pods. When the node's
needs change (a pod of a new workload arrives, the last one leaves) the set of watches changes with
them: a new one lists and watches, one no longer wanted is stopped and its objects dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.daemon.objects import ObjectCache
from agent.infra.apiserver import APIServer
from agent.infra.logging import get_logger
from agent.infra.metrics import BaseMetrics
from agent.kube.trim import without_managed_fields
from agent.kube.watch import Watcher

log = get_logger("agent.daemon.scope")


@dataclass(frozen=True, slots=True)
class WatchSpec:
    """One list/watch: a resource path (namespaced or not) and the server-side selectors narrowing it."""

    path: str
    field_selector: str | None = None
    label_selector: str | None = None


class _Cache(ObjectCache):
    """An object cache that knows when its first list has landed."""

    def __init__(self, changed: Callable[[], None], keep: Callable[[Mapping[str, Any]], Mapping[str, Any]],
                 on_listed: Callable[[], None]) -> None:
        super().__init__(changed, keep)
        self.listed = threading.Event()
        self.on_listed = on_listed
        self.failed: str | None = None  # why its first list fails, until it answers

    def behind(self, reason: str | None) -> None:
        """A list or watch failed (`reason`) or is current again (None): only a first list that fails
        matters here (the objects are not known), and the owner is told."""
        if self.listed.is_set() or reason == self.failed:
            return
        self.failed = reason
        self.changed()

    def snapshot(self, objs: list[Mapping[str, Any]]) -> None:
        first = not self.listed.is_set()
        with self.lock:
            self.items = {self._key(o): self.keep(o) for o in objs}
        self.failed = None
        self.listed.set()
        if first:
            self.on_listed()
        self.changed()


@dataclass(slots=True)
class _Running:
    spec: WatchSpec
    cache: _Cache
    watcher: Watcher
    stop: threading.Event
    thread: threading.Thread

    def end(self) -> None:
        self.stop.set()
        self.watcher.interrupt()


class ScopedWatches:
    """A set of watches, each into its own cache, that `want` replaces; `values` is the union of what they
    hold. `changed` is called after any of them changed (and when one is dropped)."""

    def __init__(
        self,
        api: APIServer,
        metrics: BaseMetrics,
        noun: str,
        changed: Callable[[], None],
        keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] = without_managed_fields,
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.noun = noun
        self.changed = changed
        self.keep = keep
        self._running: dict[str, _Running] = {}
        # a watch whose spec changed keeps serving its objects until its successor has listed: the union
        # never shows a VPA gone for the moment between two selectors
        self._retiring: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self._closed = False

    def want(self, specs: Mapping[str, WatchSpec]) -> bool:
        """Run exactly these watches (by key): start the new ones, replace those whose spec changed, stop
        the others. Returns whether anything changed."""
        ended: list[_Running] = []
        with self._lock:
            if self._closed:
                return False
            gone = [k for k in self._running if k not in specs]
            replaced = [k for k, r in self._running.items() if k in specs and specs[k] != r.spec]
            fresh = [k for k in specs if k not in self._running]
            for key in gone:
                ended.append(self._running.pop(key))
                if key in self._retiring:
                    ended.append(self._retiring.pop(key))
            for key in replaced:
                # the old one serves until its successor has listed, even one whose own first list is
                # landing right now (its objects may already be visible); one older still is no longer needed
                old = self._running.pop(key)
                if key in self._retiring:
                    ended.append(self._retiring.pop(key))
                self._retiring[key] = old
            for key in (*replaced, *fresh):
                self._running[key] = self._start(key, specs[key])
        for r in ended:
            r.end()
        if gone:
            self.changed()  # their objects are gone from the union
        if gone or replaced or fresh:
            log.info("scope.watches", what=self.noun, watches=len(specs), started=len(fresh),
                     replaced=len(replaced), stopped=len(gone))
        return bool(gone or replaced or fresh)

    def _start(self, key: str, spec: WatchSpec) -> _Running:
        cache = _Cache(self.changed, self.keep, lambda: self._listed(key))
        watcher = Watcher(self.api.lister(spec.path), f"{self.noun} {key}", self.metrics,
                          selector=spec.field_selector, label_selector=spec.label_selector)
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(cache, stop), name=f"{self.noun}:{key}"[:60], daemon=True)
        thread.start()
        return _Running(spec, cache, watcher, stop, thread)

    def _listed(self, key: str) -> None:
        """A watch's first list landed: the one it replaces stops now."""
        with self._lock:
            old = self._retiring.pop(key, None)
        if old is not None:
            old.end()

    def listed(self) -> bool:
        """Every wanted watch has listed once (what the node needs is known)."""
        with self._lock:
            return all(r.cache.listed.is_set() for r in self._running.values())

    def listed_keys(self) -> frozenset[str]:
        """The wanted watches whose objects are known (listed once, or served by the one they replace)."""
        with self._lock:
            return frozenset(k for k, r in self._running.items() if r.cache.listed.is_set() or k in self._retiring)

    def failures(self) -> dict[str, str]:
        """The wanted watches whose first list fails, and why."""
        with self._lock:
            return {k: r.cache.failed for k, r in self._running.items()
                    if r.cache.failed is not None and not r.cache.listed.is_set() and k not in self._retiring}

    def values(self) -> list[Mapping[str, Any]]:
        with self._lock:
            caches = [
                r.cache if r.cache.listed.is_set() or key not in self._retiring else self._retiring[key].cache
                for key, r in self._running.items()
            ]
        return [o for c in caches for o in c.values()]

    def keys(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._running)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop every watch and wait for their threads (at shutdown)."""
        with self._lock:
            self._closed = True
            running = [*self._running.values(), *self._retiring.values()]
            self._running.clear()
            self._retiring.clear()
        for r in running:
            r.end()
        for r in running:
            r.thread.join(timeout_s)
