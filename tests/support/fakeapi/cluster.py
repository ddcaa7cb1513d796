"""The cluster's state behind the fake API server, and the test's controls over it beyond the objects:
`compact()` (older resourceVersions answer 410), `drop_watches()` (close every open stream mid-chunk: once
it returns, those streams send nothing more), `open_watches()` (streams a drop would close now; of one
resource when named), `dropped` (the last pod-watch resourceVersion each dropped stream delivered), the
recorded requests (`recorded`, `count`) and Events (`event_reasons`), and fault injection: `fail(method,
fragment, code, times)` makes matching requests answer an error status, `slow(...)` delays them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tests.support.fakeapi.objects import BUILTIN, ObjectStore
from tests.support.fakeapi.pods import PodRequests
from tests.support.fakeapi.protocol import Recorded


@dataclass
class FakeCluster(PodRequests, ObjectStore):
    """One cluster: its Node (and `other_nodes`), pods, Events and any served kind's objects, under one
    lock and one resourceVersion counter, as etcd gives the API server."""

    node: dict[str, Any]
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> pod
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)  # (rv, type, object)
    rv: int = 100
    compacted: int = 0
    requests: list[Recorded] = field(default_factory=list)
    events: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> event
    generation: int = 0  # bumped by drop_watches: open streams end abruptly
    streams: int = 0  # open watch streams that the next drop_watches ends
    streams_of: dict[str, int] = field(default_factory=dict)  # the same, by resource ("pods", "limitranges")
    dropped: list[str] = field(default_factory=list)  # per dropped stream, the last resourceVersion it sent
    bookmark_interval_s: float = 0.2
    lock: threading.Condition = field(default_factory=threading.Condition)
    other_nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # more Nodes (GET only), by name
    served: dict[str, tuple[str, bool]] = field(default_factory=dict)  # "group/version/resource" -> (kind, namespaced)
    objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)  # key -> (ns, name) -> obj
    ghistory: list[tuple[int, str, str, dict[str, Any]]] = field(default_factory=list)  # (rv, key, type, obj)
    faults: list[list[Any]] = field(default_factory=list)  # [method, fragment, code, times left]
    delays: list[list[Any]] = field(default_factory=list)  # [method, fragment, seconds, times left]
    # "group/version/resource" -> what the CRD's structural schema keeps of a written object (the API
    # server prunes unknown fields); none: everything is kept
    prunes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for group, version, resource, kind in BUILTIN:  # what every API server serves, without a CRD
            self.serve(group, version, resource, kind)

    def compact(self) -> None:
        with self.lock:
            self.compacted = self.rv
            self.history.clear()

    def drop_watches(self) -> int:
        """End every open watch stream; returns how many. Nothing is sent on them after this returns."""
        with self.lock:
            self.generation += 1
            self.lock.notify_all()
            return self.streams

    def open_watches(self, resource: str | None = None) -> int:
        """Open watch streams (of one resource, e.g. "pods", when named)."""
        with self.lock:
            return self.streams if resource is None else self.streams_of.get(resource, 0)

    def _stream(self, resource: str, delta: int) -> None:
        """Count a watch stream opened (+1) or ended (-1); under the lock."""
        self.streams += delta
        self.streams_of[resource] = self.streams_of.get(resource, 0) + delta

    def recorded(self, method: str, fragment: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and fragment in r.path]

    def event_reasons(self, uid: str) -> list[str]:
        with self.lock:
            items = [e for e in self.events.values() if e["involvedObject"]["uid"] == uid]
        return [e["reason"] for e in sorted(items, key=lambda e: e["_order"])]

    def fail(self, method: str, fragment: str, code: int, times: int = 1) -> None:
        """The next `times` requests with this method whose path contains `fragment` (ends with it, when it
        ends with `$`) answer `code`."""
        with self.lock:
            self.faults.append([method, fragment, code, times])

    def slow(self, method: str, fragment: str, seconds: float, times: int = 1) -> None:
        """The next `times` requests with this method whose path contains `fragment` wait `seconds`
        before they are answered (a slow or overloaded API server)."""
        with self.lock:
            self.delays.append([method, fragment, seconds, times])

    def _delay(self, method: str, path: str) -> float:
        with self.lock:
            for d in self.delays:
                if d[0] == method and d[1] in path and d[3] > 0:
                    d[3] -= 1
                    return float(d[2])
        return 0.0

    def count(self, method: str, fragment: str = "") -> int:
        return len(self.recorded(method, fragment))

    def _fault(self, method: str, path: str) -> int | None:
        with self.lock:
            for f in self.faults:
                where = urlsplit(path).path.endswith(f[1][:-1]) if f[1].endswith("$") else f[1] in path
                if f[0] == method and where and f[3] > 0:
                    f[3] -= 1
                    return int(f[2])
        return None
