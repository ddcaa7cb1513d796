"""The harness's own client of the API server: HTTPS with the admin's client certificate, JSON, one
keep-alive connection per thread. Deliberately small (http.client): the harness writes thousands of
objects and should cost the machine little beside the agents it measures."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

IRREGULAR = {"Endpoints": "endpoints"}


def plural(kind: str) -> str:
    """A kind's resource name, by the API's rule for every kind the harness writes."""
    if kind in IRREGULAR:
        return IRREGULAR[kind]
    low = kind.lower()
    if low.endswith("y"):
        return low[:-1] + "ies"
    return low + ("es" if low.endswith("s") else "s")


class APIError(RuntimeError):
    def __init__(self, status: int, method: str, url: str, body: str) -> None:
        super().__init__(f"{method} {url}: {status} {body[:300]}")
        self.status = status


def collection(api_version: str, kind: str, namespace: str | None) -> str:
    """The URL of a kind's collection (in a namespace when given)."""
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{plural(kind)}" if namespace else f"{prefix}/{plural(kind)}"


def url_of(obj: dict[str, Any], sub: str = "") -> str:
    m = obj["metadata"]
    base = collection(obj["apiVersion"], obj["kind"], m.get("namespace")) + "/" + quote(m["name"])
    return base + (f"/{sub}" if sub else "")


@dataclass(frozen=True)
class Credentials:
    host: str
    port: int
    ca: Path
    cert: Path
    key: Path


class Client:
    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.ctx = ssl.create_default_context(cafile=str(creds.ca))
        self.ctx.load_cert_chain(str(creds.cert), str(creds.key))
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = http.client.HTTPSConnection(self.creds.host, self.creds.port, context=self.ctx, timeout=60)
            self._local.conn = c
        return c

    def raw(self, method: str, url: str, body: Any = None, content_type: str = "application/json") -> tuple[int, bytes]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(3):
            conn = self._conn()
            try:
                conn.request(method, url, body=data, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                time.sleep(0.2)
        raise AssertionError("unreachable")

    def call(self, method: str, url: str, body: Any = None, content_type: str = "application/json",
             ok: Iterable[int] = ()) -> Any:
        for attempt in range(6):
            status, data = self.raw(method, url, body, content_type)
            if status in (429, 500, 503, 504) and attempt < 5:
                time.sleep(0.2 * (attempt + 1))
                continue
            if status >= 400 and status not in set(ok):
                raise APIError(status, method, url, data.decode(errors="replace"))
            return json.loads(data) if data else None
        raise AssertionError("unreachable")

    def get(self, url: str) -> Any:
        return self.call("GET", url)

    def create(self, obj: dict[str, Any], exists_ok: bool = True) -> Any:
        url = collection(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"))
        out = self.call("POST", url, obj, ok=(409,) if exists_ok else ())
        if out and out.get("kind") == "Status" and out.get("code") == 409:
            return self.get(url_of(obj))
        return out

    def patch(self, obj: dict[str, Any], body: Any, sub: str = "", content_type: str = MERGE) -> Any:
        return self.call("PATCH", url_of(obj, sub), body, content_type)

    def delete(self, obj: dict[str, Any]) -> Any:
        return self.call("DELETE", url_of(obj), ok=(404,))

    def text(self, url: str) -> str:
        status, data = self.raw("GET", url)
        if status >= 400:
            raise APIError(status, "GET", url, data.decode(errors="replace"))
        return data.decode()


def in_parallel(fn: Callable[[Any], Any], items: Iterable[Any], threads: int = 6) -> list[Any]:
    """`fn` over `items` on a few threads (each with its own connection); the first error is raised."""
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(fn, items))
