"""The tiny fake Prometheus of the history tests (tests/recommender/test_history.py): `/api/v1/query_range`
answered with the series of `KEY` (and some the node must ignore), or as its `mode` breaks it; and the
matrices those tests' fake fetches answer with."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from agent.recommender.state import Key

NOW = 1_764_000_000.0
HOUR = 3600.0
KEY: Key = ("shop/api", "app")
MAX_SERIES, MAX_BYTES = 5, 4096


def series(key: Key, values: list[tuple[float, float]], **labels: str) -> dict[str, Any]:
    """`key`'s series as the kubelet's cAdvisor labels it (a pod cgroup's, POD, without a container label:
    Prometheus keeps no empty label)."""
    namespace, _, pod = key[0].partition("/")
    metric = {"job": "kubernetes-cadvisor", "namespace": namespace, "pod": pod, "container": key[1],
              "id": f"/kubepods/{pod}/{key[1]}".rstrip("/"), **labels}
    return {"metric": {k: v for k, v in metric.items() if v}, "values": [[t, repr(v)] for t, v in values]}


CPU = [(NOW - HOUR * i, 0.1 + 0.05 * (i % 5)) for i in range(48, -1, -1)]
MEMORY = [(NOW - HOUR * i, 1e8 + 1e6 * (i % 9)) for i in range(48, -1, -1)]


def matrix(items: list[dict[str, Any]]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": items}}).encode()


class FakePrometheus:
    """`/api/v1/query_range` answered as `mode` says; each request's form kept."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.forms: list[dict[str, str]] = []
        self.release = threading.Event()  # ends what `slow` and `drip` hold open
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
                fake.forms.append(form)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a bounded client stopped reading
                    fake.answer(self, form)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def answer(self, h: BaseHTTPRequestHandler, form: dict[str, str]) -> None:
        cpu = form["query"].startswith("rate(")
        ok = matrix([series(KEY, CPU if cpu else MEMORY),
                     series(("shop/api", "debug"), [(NOW, 1.0)]),  # a container the node does not run
                     series(("web/api", "app"), [(NOW, 9e9)])])  # the same pod name in another namespace
        mode = self.mode
        if mode == "slow":
            self.release.wait(10)
        status, body, headers = 200, ok, {"Content-Type": "application/json"}
        if mode == "garbage":
            body = b"<html><body>502 Bad Gateway</body></html>"
        elif mode == "http500":
            status, body = 500, b'{"status":"error","errorType":"internal","error":"out of memory"}'
        elif mode == "wrong_type":
            body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
        elif mode == "many_series":
            body = matrix([series((f"shop/p{i}", "app"), [(NOW, 1.0)]) for i in range(MAX_SERIES + 1)])
        elif mode == "big_declared":
            headers["Content-Length"] = str(10**9)
            body = b"{}"
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        if mode == "big_body":  # a valid answer, only too big: no Content-Length, read until closed
            h.end_headers()
            h.wfile.write(b'{"status":"success","data":{"resultType":"matrix","result":[]}}')
            for _ in range(64):
                h.wfile.write(b" " * 1024)
            return
        if mode == "drip":  # a byte at a time, never done within the timeout
            h.end_headers()
            while not self.release.wait(0.05):
                h.wfile.write(b" ")
                h.wfile.flush()
            return
        if "Content-Length" not in headers:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
