"""The reference watcher: one client that watches, cluster-wide, every kind the churn changes (as the
agents of issue 41 did), through a byte-counting proxy port of its own. What it receives during the churn
is "the bytes the churn served" to one watcher of everything; an agent's share is its own bytes over
that. Watches start at the collection's current resourceVersion (no initial list in the count)."""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import threading

from bench.scale.api import Client, Credentials

KINDS = {
    "replicasets": "/apis/apps/v1/replicasets",
    "statefulsets": "/apis/apps/v1/statefulsets",
    "daemonsets": "/apis/apps/v1/daemonsets",
    "limitranges": "/api/v1/limitranges",
    "verticalpodautoscalers": "/apis/autoscaling.k8s.io/v1/verticalpodautoscalers",
    "pods": "/api/v1/pods",
}


class ReferenceWatcher:
    def __init__(self, admin: Client, via: Credentials) -> None:
        self.admin = admin
        self.via = via
        self.stop = threading.Event()
        self.events: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._watch, args=(k, u), name=f"ref-{k}", daemon=True)
                         for k, u in KINDS.items()]
        self._conns: list[http.client.HTTPSConnection] = []

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def _watch(self, kind: str, url: str) -> None:
        ctx = ssl.create_default_context(cafile=str(self.via.ca))
        ctx.load_cert_chain(str(self.via.cert), str(self.via.key))
        while not self.stop.is_set():
            rv = self.admin.get(url + "?limit=1")["metadata"]["resourceVersion"]
            conn = http.client.HTTPSConnection(self.via.host, self.via.port, context=ctx, timeout=None)
            self._conns.append(conn)
            try:
                conn.request("GET", f"{url}?watch=1&resourceVersion={rv}&timeoutSeconds=3600",
                             headers={"Accept": "application/json"})
                resp = conn.getresponse()
                buf = b""
                while not self.stop.is_set():
                    chunk = resp.read1(1 << 16)
                    if not chunk:
                        break
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if line and json.loads(line).get("type") != "BOOKMARK":
                            self.events[kind] += 1
            except (OSError, http.client.HTTPException, ValueError) as err:
                if not self.stop.is_set():
                    self.errors.append(f"{kind}: {err}")
            finally:
                conn.close()

    def close(self) -> None:
        self.stop.set()
        for c in self._conns:
            if c.sock is not None:
                with contextlib.suppress(OSError):
                    c.sock.shutdown(2)
        for t in self._threads:
            t.join(5)
