"""The fake API server's sockets and routing: a threading HTTP/1.1 server on 127.0.0.1 whose handler sends
each request to what answers it. Served paths:
- GET  /api/v1/nodes/{name}; GET /api/v1/pods?fieldSelector=spec.nodeName=X (a list, or a watch)
- PATCH /api/v1/namespaces/{ns}/pods/{name}/status (strategic merge only, else 415)
- POST /api/v1/namespaces/{ns}/events, PATCH .../events/{name} (recorded; names are unique)
- a namespace's pods by label, a pod's GET, PATCH, /resize, DELETE and /eviction (`pods`)
- any registered kind (`objects`), and the discovery of a group/version's kinds.
Every request is recorded first, and may be delayed or failed by the test (`FakeCluster.slow`, `fail`).
`restart()` stops the server and starts a new one on the same port, state kept, history compacted as
after an etcd restore.
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.protocol import Recorded, gkey, route, status
from tests.support.fakeapi.watch import watch_objects, watch_pods


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
                cluster.requests.append(Recorded(self.command, self.path, self.headers.get("Content-Type", ""), body,
                                                 self.headers.get("User-Agent", "")))

        def _faulted(self) -> bool:
            delay = cluster._delay(self.command, self.path)
            if delay:
                time.sleep(delay)
            code = cluster._fault(self.command, self.path)
            if code is None:
                return False
            self._send(code, status(code, "Injected", f"injected {code}"))
            return True

        def _generic(self, body: Any) -> bool:
            """Serve a registered kind (or a pod write); False when the path is not one."""
            url = urlsplit(self.path)
            parts = route(url.path)
            if parts is None:
                return False
            group, version, ns, resource, name, sub = parts
            if group == "" and resource == "pods" and ns is not None and name is None and self.command == "GET":
                q = {k: v[-1] for k, v in parse_qs(url.query).items()}
                if q.get("watch") in ("true", "1", "True"):
                    watch_pods(cluster, server_stopping, self, None, q, namespace=ns)
                    return True
                self._send(200, cluster.list_namespace_pods(ns, q.get("labelSelector", "")))
                return True
            if group == "" and resource == "pods" and ns is not None and name is not None:
                if self.command == "GET" and sub is None:
                    with cluster.lock:
                        found = cluster._find_pod(ns, name)
                        self._send(200 if found else 404, copy.deepcopy(found) if found else status(404, "NotFound", f'pods "{name}" not found'))
                    return True
                if (self.command in ("PATCH", "DELETE") and sub in (None, "resize")) or sub == "eviction":
                    code, out = cluster.pod_write(self.command, ns, name, sub, body, self.headers.get("Content-Type", ""))
                    self._send(code, out)
                    return True
                return False
            key = gkey(group, version, resource or "")
            if key not in cluster.served:
                return False
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if self.command == "GET" and name is None:
                if q.get("watch") in ("true", "1", "True"):
                    watch_objects(cluster, server_stopping, self, key, ns, q)
                else:
                    self._send(200, cluster.g_list(key, ns, q.get("labelSelector", ""), q.get("fieldSelector", "")))
                return True
            if self.command == "GET":
                g, v, r = key.split("/")
                obj = cluster.get(g, v, r, ns or "", name or "")
                self._send(200 if obj else 404, obj or status(404, "NotFound", f'{resource} "{name}" not found'))
                return True
            code, out = cluster.g_write(self.command, key, ns or "", name, sub, body, self.headers.get("Content-Type", ""))
            self._send(code, out)
            return True

        def do_PUT(self) -> None:
            body = self._body()
            self._record(body)
            if self._faulted() or self._generic(body):
                return
            self._send(404, status(404, "NotFound", self.path))

        def do_DELETE(self) -> None:
            body = self._body() if int(self.headers.get("Content-Length") or 0) else None
            self._record(body)
            if self._faulted() or self._generic(body):
                return
            self._send(404, status(404, "NotFound", self.path))

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            self._record(None)
            if self._faulted():
                return
            parts = url.path.strip("/").split("/")
            if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
                node = cluster.node if cluster.node["metadata"]["name"] == parts[3] else cluster.other_nodes.get(parts[3], cluster.node)
                if node["metadata"]["name"] != parts[3]:
                    return self._send(404, status(404, "NotFound", f'nodes "{parts[3]}" not found'))
                return self._send(200, node)
            if url.path == "/api/v1/pods":
                node = q.get("fieldSelector", "").removeprefix("spec.nodeName=")
                if q.get("watch") in ("true", "1", "True"):
                    return watch_pods(cluster, server_stopping, self, node, q)
                return self._send(200, cluster.list_pods(node))
            if self._generic(None):
                return
            if len(parts) == 3 and parts[0] == "apis":
                found = cluster.discovery(parts[1], parts[2])
                if found is not None:
                    return self._send(200, found)
            self._send(404, status(404, "NotFound", url.path))

        def do_PATCH(self) -> None:
            body = self._body()
            self._record(body)
            if self._faulted():
                return
            parts = urlsplit(self.path).path.strip("/").split("/")
            ctype = self.headers.get("Content-Type", "")
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 7 and parts[4] == "pods" and parts[6] == "status":
                if ctype != "application/strategic-merge-patch+json":
                    return self._send(415, status(415, "UnsupportedMediaType", ctype))
                code, out = cluster.patch_status(parts[3], parts[5], body)
                return self._send(code, out)
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "events":
                with cluster.lock:
                    event = cluster.events.get(parts[5])
                    if event is None:
                        return self._send(404, status(404, "NotFound", parts[5]))
                    event.update(body)
                    return self._send(200, {k: v for k, v in event.items() if k != "_order"})
            if self._generic(body):
                return
            self._send(404, status(404, "NotFound", self.path))

        def do_POST(self) -> None:
            body = self._body()
            self._record(body)
            if self._faulted():
                return
            parts = urlsplit(self.path).path.strip("/").split("/")
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "events":
                with cluster.lock:
                    if body["metadata"]["name"] in cluster.events:  # as the API server: names are unique
                        return self._send(409, status(409, "AlreadyExists", body["metadata"]["name"]))
                    body["_order"] = len(cluster.events)
                    cluster.events[body["metadata"]["name"]] = body
                    out = {k: v for k, v in body.items() if k != "_order"}
                return self._send(201, out)
            if self._generic(body):
                return
            self._send(404, status(404, "NotFound", self.path))

    return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that reset its connection (a daemon stopped, a stream dropped) is not an error of the
        server: no traceback on stderr for it, as the API server logs none."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeAPIServer:
    def __init__(self, cluster: FakeCluster, port: int = 0) -> None:
        self.cluster = cluster
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._stopping = threading.Event()
        _Server.allow_reuse_address = True
        server = _Server(("127.0.0.1", self.port), _handler(self.cluster, self._stopping))
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
