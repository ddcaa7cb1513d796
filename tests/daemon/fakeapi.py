"""A fake Kubernetes API server on 127.0.0.1 that speaks real HTTP/1.1 to the real kubernetes client.

It serves what the daemon uses, the way the API server does:
- GET  /api/v1/nodes/{name}
- GET  /api/v1/pods?fieldSelector=spec.nodeName=X            a list, with the store's resourceVersion
- GET  /api/v1/pods?watch=true&resourceVersion=N&...          a chunked stream of JSON lines: every change
       after N, then live changes, BOOKMARKs when asked (allowWatchBookmarks), an ERROR 410 when N is older
       than the compacted history; the stream ends at timeoutSeconds
- PATCH /api/v1/namespaces/{ns}/pods/{name}/status            strategic merge of status.conditions by type,
       refused (409) when metadata.uid does not match; recorded
- POST /api/v1/namespaces/{ns}/events, PATCH .../events/{name} recorded

Test controls: `apply`/`delete` pods (each a new resourceVersion and a watch event), `compact()` (older
resourceVersions answer 410), `drop_watches()` (close every open stream mid-chunk: once it returns, those
streams send nothing more), `open_watches()` (streams a drop would close now), `dropped` (the last
resourceVersion each dropped stream delivered), `restart()` (stop the server and start a new one on the same
port, state kept, history compacted as after an etcd restore).
The cluster state lives in `FakeCluster`, the sockets in `FakeAPIServer`.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Recorded:
    method: str
    path: str
    content_type: str
    body: Any


@dataclass
class FakeCluster:
    node: dict[str, Any]
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> pod
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)  # (rv, type, object)
    rv: int = 100
    compacted: int = 0
    requests: list[Recorded] = field(default_factory=list)
    events: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> event
    generation: int = 0  # bumped by drop_watches: open streams end abruptly
    streams: int = 0  # open watch streams that the next drop_watches ends
    dropped: list[str] = field(default_factory=list)  # per dropped stream, the last resourceVersion it sent
    bookmark_interval_s: float = 0.2
    lock: threading.Condition = field(default_factory=threading.Condition)

    # ---- test side ----

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, copy.deepcopy(obj)))
        self.lock.notify_all()

    def apply(self, pod: dict[str, Any]) -> None:
        with self.lock:
            pod = copy.deepcopy(pod)
            uid = pod["metadata"]["uid"]
            old = self.pods.get(uid)
            if old is not None:  # the kubelet's and our conditions survive a spec update
                pod.setdefault("status", {}).setdefault("conditions", old.get("status", {}).get("conditions", []))
            self.pods[uid] = pod
            self._emit("MODIFIED" if old else "ADDED", pod)

    def delete(self, uid: str) -> None:
        with self.lock:
            pod = self.pods.pop(uid)
            self._emit("DELETED", pod)

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

    def open_watches(self) -> int:
        with self.lock:
            return self.streams

    def recorded(self, method: str, fragment: str = "") -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method == method and fragment in r.path]

    def condition(self, uid: str, ctype: str) -> dict[str, Any] | None:
        with self.lock:
            pod = self.pods.get(uid) or {}
            for c in pod.get("status", {}).get("conditions", []):
                if c.get("type") == ctype:
                    return dict(c)
        return None

    def event_reasons(self, uid: str) -> list[str]:
        with self.lock:
            items = [e for e in self.events.values() if e["involvedObject"]["uid"] == uid]
        return [e["reason"] for e in sorted(items, key=lambda e: e["_order"])]

    # ---- server side ----

    def list_pods(self, node: str) -> dict[str, Any]:
        with self.lock:
            items = [copy.deepcopy(p) for p in self.pods.values() if p["spec"].get("nodeName") == node]
            return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def patch_status(self, ns: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            pod = next(
                (p for p in self.pods.values() if p["metadata"]["name"] == name and p["metadata"]["namespace"] == ns),
                None,
            )
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            uid = (body.get("metadata") or {}).get("uid")
            if uid is not None and uid != pod["metadata"]["uid"]:
                return 409, _status(409, "Conflict", "Precondition failed: UID in precondition")
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            for new in (body.get("status") or {}).get("conditions", []):  # merge key: type
                for i, old in enumerate(conditions):
                    if old.get("type") == new.get("type"):
                        conditions[i] = {**old, **new}
                        break
                else:
                    conditions.append(dict(new))
            for key in body.get("status") or {}:
                if key != "conditions":
                    raise AssertionError(f"the agent patched status.{key}, which it does not own")
            self._emit("MODIFIED", pod)
            return 200, copy.deepcopy(pod)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}


def _handler(cluster: FakeCluster, server_stopping: threading.Event) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n) or b"null")

        def _record(self, body: Any) -> None:
            with cluster.lock:
                cluster.requests.append(Recorded(self.command, self.path, self.headers.get("Content-Type", ""), body))

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            self._record(None)
            parts = url.path.strip("/").split("/")
            if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
                node = cluster.node
                if node["metadata"]["name"] != parts[3]:
                    return self._send(404, _status(404, "NotFound", f'nodes "{parts[3]}" not found'))
                return self._send(200, node)
            if url.path == "/api/v1/pods":
                node = q.get("fieldSelector", "").removeprefix("spec.nodeName=")
                if q.get("watch") in ("true", "1", "True"):
                    return self._watch(node, q)
                return self._send(200, cluster.list_pods(node))
            self._send(404, _status(404, "NotFound", url.path))

        def _chunk(self, obj: Any) -> None:
            data = json.dumps(obj).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _watch(self, node: str, q: dict[str, str]) -> None:
            since = int(q.get("resourceVersion") or 0)
            timeout = float(q.get("timeoutSeconds") or 300)
            bookmarks = q.get("allowWatchBookmarks") in ("true", "True", "1")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.close_connection = True
            end = time.monotonic() + timeout
            with cluster.lock:
                generation = cluster.generation
                if since < cluster.compacted:
                    self._chunk({"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {since} ({cluster.compacted})")})
                    self.wfile.write(b"0\r\n\r\n")
                    return
                cluster.streams += 1  # from here on, drop_watches ends this stream
            sent = since
            delivered = q.get("resourceVersion") or ""  # the client's resourceVersion: the last one it was sent
            last_bookmark = time.monotonic()
            try:
                while time.monotonic() < end and not server_stopping.is_set():
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
                        if obj["spec"].get("nodeName") == node:
                            self._chunk({"type": kind, "object": obj})
                            delivered = str(rv)
                    if bookmarks and time.monotonic() - last_bookmark >= cluster.bookmark_interval_s:
                        sent = max(sent, current)
                        self._chunk({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(sent)}}})
                        delivered = str(sent)
                        last_bookmark = time.monotonic()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                return
            finally:
                with cluster.lock:
                    cluster.streams -= 1

        def do_PATCH(self) -> None:
            body = self._body()
            self._record(body)
            parts = urlsplit(self.path).path.strip("/").split("/")
            ctype = self.headers.get("Content-Type", "")
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 7 and parts[4] == "pods" and parts[6] == "status":
                if ctype != "application/strategic-merge-patch+json":
                    return self._send(415, _status(415, "UnsupportedMediaType", ctype))
                code, out = cluster.patch_status(parts[3], parts[5], body)
                return self._send(code, out)
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "events":
                with cluster.lock:
                    event = cluster.events.get(parts[5])
                    if event is None:
                        return self._send(404, _status(404, "NotFound", parts[5]))
                    event.update(body)
                    return self._send(200, {k: v for k, v in event.items() if k != "_order"})
            self._send(404, _status(404, "NotFound", self.path))

        def do_POST(self) -> None:
            body = self._body()
            self._record(body)
            parts = urlsplit(self.path).path.strip("/").split("/")
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "events":
                with cluster.lock:
                    body["_order"] = len(cluster.events)
                    cluster.events[body["metadata"]["name"]] = body
                    out = {k: v for k, v in body.items() if k != "_order"}
                return self._send(201, out)
            self._send(404, _status(404, "NotFound", self.path))

    return Handler


class FakeAPIServer:
    def __init__(self, cluster: FakeCluster, port: int = 0) -> None:
        self.cluster = cluster
        self.port = port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._stopping = threading.Event()
        ThreadingHTTPServer.allow_reuse_address = True
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self.cluster, self._stopping))
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fake-apiserver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        self.cluster.drop_watches()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def restart(self, changes: Any = None) -> None:
        """Stop; apply `changes(cluster)` while the API is down; compact history; start on the same port."""
        self.stop()
        if changes is not None:
            changes(self.cluster)
        self.cluster.compact()
        self.start()

    def kubeconfig(self) -> str:
        return (
            "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
            f"clusters:\n- name: fake\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: agent\n  user:\n    token: fake-token\n"
            "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: agent\n"
        )
