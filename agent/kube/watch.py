"""List, then watch, the pods bound to this node: kopf's list -> watch -> 410 -> relist, never missing an update.

Why not `kubernetes.watch.Watch`: it retries a 410 once from the same (expired) resourceVersion and then
raises, and it deserializes every pod into models the agent does not use. Here:
  1. list (paged) with the field selector spec.nodeName, hand the whole set to the sink as a snapshot
     (the sink reconciles every difference, including pods deleted meanwhile), remember its resourceVersion;
  2. watch from that resourceVersion with allowWatchBookmarks, moving the resourceVersion with every
     event and bookmark;
  3. a normal end of the stream (the server's timeout) or a dropped connection resumes the watch from the
     last resourceVersion, after a backoff for errors; a 410 Gone relists. The backoff grows only with
     failures in a row: a list that answered, or a stream that delivered before it broke, starts it over
     (else a few drops spread over minutes add up to a 30 s wait, the node's events unseen meanwhile);
  4. unknown event types are logged and skipped.
Pods travel as the API's JSON dicts (agent.pods.parse reads them), never as client models. The parsing of
one stream line is a pure function (`parse_line`), separate from the socket loop (lightkube's WatchDriver).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agent.infra.apiserver import APIServer, path
from agent.infra.logging import get_logger
from agent.infra.metrics import BaseMetrics
from agent.infra.queue import Backoff
from agent.kube.errors import APIError, APIGone, from_status, wrap

log = get_logger("agent.kube.watch")


class PodSink(Protocol):
    """Where pod sources deliver: a full set (after a (re)list), one pod's new state, a pod's removal."""

    def snapshot(self, pods: list[Mapping[str, Any]]) -> None: ...

    def upsert(self, pod: Mapping[str, Any]) -> None: ...

    def removed(self, uid: str, key: str) -> None: ...

    def behind(self, reason: str | None) -> None:
        """The delivered view may be behind (the list or watch failed: `reason`), or is current (None)."""
        ...


# -- one line of a watch stream (pure) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    type: str  # ADDED | MODIFIED | DELETED
    obj: Mapping[str, Any]
    resource_version: str | None


@dataclass(frozen=True, slots=True)
class Bookmark:
    resource_version: str | None


@dataclass(frozen=True, slots=True)
class Failure:
    code: int | None
    message: str


@dataclass(frozen=True, slots=True)
class Unknown:
    text: str


WatchItem = Change | Bookmark | Failure | Unknown


def _rv(obj: object) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return rv if isinstance(rv, str) and rv else None


def parse_line(line: str) -> WatchItem | None:
    """One JSON line of a watch stream; None for a blank keep-alive line."""
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return Unknown(line[:200])
    if not isinstance(event, Mapping):
        return Unknown(line[:200])
    kind, obj = event.get("type"), event.get("object")
    if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, Mapping):
        return Change(kind, obj, _rv(obj))
    if kind == "BOOKMARK":
        return Bookmark(_rv(obj))
    if kind == "ERROR":
        code = obj.get("code") if isinstance(obj, Mapping) else None
        message = obj.get("message") if isinstance(obj, Mapping) else None
        return Failure(code if isinstance(code, int) else None, str(message or "watch error"))
    return Unknown(str(kind))


def pod_identity(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(uid, namespace/name) of a raw pod, with placeholders when the API sent something odd."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    uid = meta.get("uid")
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or '<unnamed>'}"
    return (uid if isinstance(uid, str) else ""), key


def _lines(resp: Any) -> Iterator[str]:
    from kubernetes.watch.watch import iter_resp_lines

    yield from iter_resp_lines(resp)


# -- the loop (imperative shell) -----------------------------------------------------------------


class Watcher:
    """Runs list/watch of one kind of object forever in the calling thread until `stop` is set. `call` is
    the list function for it in the typed client's convention (agent.infra.apiserver's `lister`: the same
    function lists and, with watch=True, watches)."""

    def __init__(
        self,
        call: Callable[..., Any],
        noun: str,
        metrics: BaseMetrics,
        *,
        selector: str | None = None,
        label_selector: str | None = None,
        watch_timeout_s: int | None = None,
        page_size: int = 500,
        backoff: Backoff | None = None,
    ) -> None:
        self.call = call
        self.noun = noun  # "pods of node n1": in errors and logs
        self.metrics = metrics
        # client-go's reflector: a random timeout between 5 and 10 minutes, so that the watches of many
        # agents started together do not all reconnect together (each reconnect is one request)
        self.watch_timeout_s = watch_timeout_s if watch_timeout_s is not None else random.randint(300, 599)
        self.page_size = page_size
        self.backoff = backoff or Backoff(base=0.5, cap=30.0)
        self.selector = selector
        self.label_selector = label_selector
        self._resp: Any = None
        self._lock = threading.Lock()
        self._delivered = False  # the current (or last) stream sent an event or a bookmark

    def _selected(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.selector:
            out["field_selector"] = self.selector
        if self.label_selector:
            out["label_selector"] = self.label_selector
        return out

    def list(self) -> tuple[list[Mapping[str, Any]], str]:
        """Every object (paged) and the list's resourceVersion."""
        pods: list[Mapping[str, Any]] = []
        token: str | None = None
        while True:
            try:
                resp = self.call(
                    **self._selected(),
                    limit=self.page_size,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=(10, 60),
                )
                data = json.loads(resp.data)
            except Exception as err:  # every transport and API error becomes an APIError
                raise wrap(f"list {self.noun}", err) from err
            items = data.get("items") or []
            pods.extend(i for i in items if isinstance(i, Mapping))
            meta = data.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                return pods, str(meta.get("resourceVersion") or "")

    def watch(self, rv: str, sink: PodSink, stop: threading.Event) -> str:
        """Stream changes after `rv` until the server ends the stream; return the last resourceVersion.
        Raises APIGone (relist) or another APIError (back off, resume)."""
        what = f"watch {self.noun}"
        self._delivered = False
        try:
            resp = self.call(
                **self._selected(),
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=rv,
                timeout_seconds=self.watch_timeout_s,
                _preload_content=False,
                _request_timeout=(10, self.watch_timeout_s + 30),
            )
        except Exception as err:
            raise wrap(what, err) from err
        with self._lock:
            self._resp = resp
        sink.behind(None)  # connected from `rv`: what happened meanwhile streams in first
        try:
            for line in _lines(resp):
                if stop.is_set():
                    return rv
                item = parse_line(line)
                if item is None:
                    continue
                if isinstance(item, Failure):
                    raise from_status(what, item.code, item.message)
                if isinstance(item, Unknown):
                    log.warning("watch.unknown_event", line=item.text)
                    continue
                self._delivered = True
                if item.resource_version:
                    rv = item.resource_version
                if isinstance(item, Change):
                    if item.type == "DELETED":
                        uid, key = pod_identity(item.obj)
                        sink.removed(uid, key)
                    else:
                        sink.upsert(item.obj)
            return rv
        except APIError:
            raise
        except Exception as err:  # a connection closed mid-stream, a read timeout
            if stop.is_set():
                return rv
            raise wrap(what, err) from err
        finally:
            with self._lock:
                self._resp = None
            resp.release_conn()

    def run(self, sink: PodSink, stop: threading.Event, listed_at: str | None = None) -> None:
        """List (unless the caller just did, at `listed_at`) and watch until `stop`."""
        rv: str | None = listed_at or None
        while not stop.is_set():
            try:
                if rv is None:
                    pods, rv = self.list()
                    self.backoff.forget("watch")  # a list that answered ends a run of failures
                    sink.snapshot(pods)
                    sink.behind(None)
                    log.info("watch.listed", what=self.noun, objects=len(pods), resource_version=rv)
                rv = self.watch(rv, sink, stop)
                self.backoff.forget("watch")
                if not stop.is_set():
                    self.metrics.watch_restarts.labels("closed").inc()
                    log.debug("watch.resumed", resource_version=rv)
            except APIGone as err:
                self.metrics.watch_restarts.labels("gone").inc()
                log.info("watch.relist", reason=str(err))
                rv = None
            except APIError as err:
                self.metrics.watch_restarts.labels("error").inc()
                self.metrics.errors.labels(type(err).__name__).inc()
                if self._delivered:  # the stream worked until it broke: not one more failure in a row
                    self.backoff.forget("watch")
                delay = self.backoff.next("watch")
                if not self._delivered:  # not a stream that simply ended: the view may be behind
                    sink.behind(str(err))
                log.warning("watch.error", what=self.noun, error=str(err), retry_in_s=delay, resource_version=rv)
                stop.wait(delay)

    def interrupt(self) -> None:
        """Unblock a watch waiting for data (called from another thread at shutdown)."""
        import socket

        with self._lock:
            resp = self._resp
        sock = getattr(getattr(resp, "connection", None), "sock", None) if resp is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class PodWatcher(Watcher):
    """The pods bound to this node (field selector spec.nodeName)."""

    def __init__(self, api: APIServer, node: str, metrics: BaseMetrics, **kw: Any) -> None:
        super().__init__(
            api.lister(path("v1", "pods")), f"pods of node {node}", metrics, selector=f"spec.nodeName={node}", **kw
        )
        self.node = node
