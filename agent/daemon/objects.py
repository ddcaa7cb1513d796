"""What the components beside the pod loop share: a watch sink keeping the latest objects of one kind in
memory, and the threads and watches of one component, started and stopped together."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.infra.metrics import BaseMetrics
from agent.kube.trim import without_managed_fields
from agent.kube.watch import Watcher


class ObjectCache:
    """A watch sink keeping the latest object of each (namespace, name) and calling `changed` after each
    update (a relist replaces the whole set). `keep` is what is kept of each object (agent.kube.trim):
    by default all but its managedFields."""

    def __init__(
        self,
        changed: Callable[[], None],
        keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] = without_managed_fields,
    ) -> None:
        self.items: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.changed = changed
        self.keep = keep
        self.lock = threading.Lock()

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return str(meta.get("namespace") or ""), str(meta.get("name") or "")

    def snapshot(self, objs: list[Mapping[str, Any]]) -> None:
        with self.lock:
            self.items = {self._key(o): self.keep(o) for o in objs}
        self.changed()

    def upsert(self, obj: Mapping[str, Any]) -> None:
        with self.lock:
            self.items[self._key(obj)] = self.keep(obj)
        self.changed()

    def removed(self, uid: str, key: str) -> None:
        ns, _, name = key.partition("/")
        with self.lock:
            self.items.pop((ns, name), None)
        self.changed()

    def behind(self, reason: str | None) -> None:
        """A cache of objects is read as it is: whether its watch is behind changes nothing here."""

    def values(self) -> list[Mapping[str, Any]]:
        with self.lock:
            return list(self.items.values())

    def by_key(self) -> dict[tuple[str, str], Mapping[str, Any]]:
        """The objects as they stand, by (namespace, name)."""
        with self.lock:
            return dict(self.items)


Loop = Callable[[threading.Event], None]


class Threads:
    """A component's threads (each runs until `stop` is set) and the watches they run."""

    def __init__(self, metrics: BaseMetrics) -> None:
        self.metrics = metrics
        self.threads: list[threading.Thread] = []
        self.watchers: list[Watcher] = []

    def start(self, loops: Sequence[tuple[str, Loop]], stop: threading.Event) -> None:
        for name, fn in loops:
            t = threading.Thread(target=fn, args=(stop,), name=name, daemon=True)
            t.start()
            self.threads.append(t)

    def watch(self, call: Any, noun: str, sink: ObjectCache, stop: threading.Event, selector: str | None = None) -> None:
        """List, then watch `call`'s objects into `sink` until `stop` (blocks: run it in one of the loops)."""
        w = Watcher(call, noun, self.metrics, selector=selector)
        self.watchers.append(w)
        w.run(sink, stop)

    def join(self, timeout_s: float, *wake: threading.Event) -> None:
        """After `stop` was set: end the watches' streams, wake the loops waiting on `wake`, wait for all."""
        for w in self.watchers:
            w.interrupt()
        for event in wake:
            event.set()
        for t in self.threads:
            t.join(timeout_s)
