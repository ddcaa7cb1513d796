"""Watch streams as the API server sends them: chunked JSON lines of every change after the client's
resourceVersion, then live changes; BOOKMARKs when asked (allowWatchBookmarks); an ERROR 410 when that
resourceVersion is older than the compacted history; the end at timeoutSeconds. `drop_watches` ends a
stream mid-chunk, without the terminating chunk, as a broken connection does."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.protocol import fields_match, labels_match, status


class Stream:
    """One watch response: its headers sent at once, then one chunk per JSON line."""

    def __init__(self, handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        handler.close_connection = True
        self._out = handler.wfile

    def send(self, obj: Any) -> None:
        data = json.dumps(obj).encode() + b"\n"
        self._out.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self._out.flush()

    def end(self) -> None:
        """The terminating chunk: the stream ended as the server meant it to."""
        self._out.write(b"0\r\n\r\n")


def _open(cluster: FakeCluster, stream: Stream, since: int, resource: str) -> int | None:
    """The generation the stream belongs to, counted open (from here on `drop_watches` ends it); None,
    the stream answered 410 and ended, when `since` is older than the compacted history."""
    with cluster.lock:
        if since < cluster.compacted:
            stream.send({"type": "ERROR", "object": status(410, "Expired", f"too old resource version: {since} ({cluster.compacted})")})
            stream.end()
            return None
        cluster._stream(resource, 1)
        return cluster.generation


def watch_pods(
    cluster: FakeCluster, stopping: threading.Event, handler: BaseHTTPRequestHandler, node: str | None, q: dict[str, str],
    namespace: str | None = None,
) -> None:
    """GET /api/v1/pods?watch=true&fieldSelector=spec.nodeName=`node`: the node's pods; with `namespace`
    (node None), GET /api/v1/namespaces/`namespace`/pods?watch=true&labelSelector=...: a workload's pods. A
    dropped stream records in `cluster.dropped` the last resourceVersion it delivered."""
    selector = q.get("labelSelector", "")
    since = int(q.get("resourceVersion") or 0)
    timeout = float(q.get("timeoutSeconds") or 300)
    bookmarks = q.get("allowWatchBookmarks") in ("true", "True", "1")
    stream = Stream(handler)
    end = time.monotonic() + timeout
    generation = _open(cluster, stream, since, "pods")
    if generation is None:
        return
    sent = since
    delivered = q.get("resourceVersion") or ""  # the client's resourceVersion: the last one it was sent
    last_bookmark = time.monotonic()
    try:
        while time.monotonic() < end and not stopping.is_set():
            with cluster.lock:  # the generation is checked under the same lock as `pending` is read
                if cluster.generation != generation:
                    cluster.dropped.append(delivered)
                    return  # drop the connection mid-stream: no terminating chunk
                pending = [(rv, k, o) for rv, k, o in cluster.history if rv > sent]
                if not pending:
                    cluster.lock.wait(timeout=cluster.bookmark_interval_s)
                    if cluster.generation != generation:  # dropped while waiting
                        cluster.dropped.append(delivered)
                        return
                    pending = [(rv, k, o) for rv, k, o in cluster.history if rv > sent]
                current = cluster.rv
            for rv, kind, obj in pending:
                sent = rv
                if (obj["spec"].get("nodeName") == node if node is not None
                        else obj["metadata"].get("namespace") == namespace and labels_match(obj, selector)):
                    stream.send({"type": kind, "object": obj})
                    delivered = str(rv)
            if bookmarks and time.monotonic() - last_bookmark >= cluster.bookmark_interval_s:
                sent = max(sent, current)
                stream.send({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(sent)}}})
                delivered = str(sent)
                last_bookmark = time.monotonic()
        stream.end()
    except (BrokenPipeError, ConnectionResetError):
        return
    finally:
        with cluster.lock:
            cluster._stream("pods", -1)


def watch_objects(
    cluster: FakeCluster,
    stopping: threading.Event,
    handler: BaseHTTPRequestHandler,
    key: str,
    ns: str | None,
    q: dict[str, str],
) -> None:
    """A watch of a served kind (`key`), in one namespace or all, filtered by `labelSelector`."""
    since = int(q.get("resourceVersion") or 0)
    timeout = float(q.get("timeoutSeconds") or 300)
    bookmarks = q.get("allowWatchBookmarks") in ("true", "True", "1")
    selector = q.get("labelSelector", "")
    fields = q.get("fieldSelector", "")
    kind, _ = cluster.served[key]
    resource = key.rsplit("/", 1)[-1]
    stream = Stream(handler)
    end = time.monotonic() + timeout
    generation = _open(cluster, stream, since, resource)
    if generation is None:
        return
    sent = since
    last_bookmark = time.monotonic()
    try:
        while time.monotonic() < end and not stopping.is_set():
            with cluster.lock:
                if cluster.generation != generation:
                    return
                pending = [(rv, k, t, o) for rv, k, t, o in cluster.ghistory if rv > sent]
                if not pending:
                    cluster.lock.wait(timeout=cluster.bookmark_interval_s)
                    if cluster.generation != generation:
                        return
                    pending = [(rv, k, t, o) for rv, k, t, o in cluster.ghistory if rv > sent]
                current = cluster.rv
            for rv, k, t, obj in pending:
                sent = rv
                if (k == key and (ns is None or obj["metadata"].get("namespace") == ns) and labels_match(obj, selector)
                        and fields_match(obj, fields)):
                    stream.send({"type": t, "object": obj})
            if bookmarks and time.monotonic() - last_bookmark >= cluster.bookmark_interval_s:
                sent = max(sent, current)
                api_version = key.rsplit("/", 1)[0].lstrip("/")
                stream.send({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(sent)}}})
                last_bookmark = time.monotonic()
        stream.end()
    except (BrokenPipeError, ConnectionResetError):
        return
    finally:
        with cluster.lock:
            cluster._stream(resource, -1)
