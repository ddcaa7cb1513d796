"""The API server over HTTP through the kubernetes client's `ApiClient` (its configuration, credentials,
TLS and connection pool), without the client's typed API classes.

Why: `CoreV1Api`, `AppsV1Api`, `CustomObjectsApi`... and the model modules they import cost ~26 MiB of a
DaemonSet pod that reads and writes the API's JSON as dicts anyway. A request here is the one the typed
call builds (its path, its query string in the client's spelling and order, `Accept: application/json`,
the `BearerToken` auth setting, the same `_request_timeout`) handed to `ApiClient.call_api`; an answer
outside 2xx raises the client's `ApiException` (the subclass for its status, with status, reason and
body) exactly as the typed calls with `_preload_content=False` do, so agent.kube.errors classifies both.

A patch names its content type: the typed calls chose it by the API, never by the caller's intent (a
built-in kind: strategic merge for an object body, JSON patch for a list; a custom resource: JSON merge
patch), and a silent change between them changes what the patch does to lists. Nothing here knows pods
or cgroups: paths, queries, HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import quote

JSON: Final = "application/json"
STRATEGIC_MERGE: Final = "application/strategic-merge-patch+json"  # built-in kinds, an object body
MERGE_PATCH: Final = "application/merge-patch+json"  # custom resources (what CustomObjectsApi sends)
JSON_PATCH: Final = "application/json-patch+json"  # a list of operations
# an object's metadata alone (names, labels, owners), without its spec and status: what an owner link reads
METADATA: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

Query = Mapping[str, str | int | bool | None]
Timeout = float | tuple[float, float] | None

# the typed list calls' keyword arguments -> the API's query parameters (for `APIServer.lister`)
CLIENT_QUERY: Final = {
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "_continue": "continue",
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "limit": "limit",
    "resource_version": "resourceVersion",
    "timeout_seconds": "timeoutSeconds",
    "watch": "watch",
}


def path(api_version: str, resource: str | None = None, namespace: str | None = None, name: str | None = None,
         sub: str | None = None) -> str:
    """The API path of a kind ("v1" is the core group, else "group/version"), in a namespace or not, of
    one object and its subresource; without a resource, the group version's discovery document."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if resource is None:
        return f"{base}/"
    parts = [base]
    if namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(resource)
    if name is not None:
        parts.append(quote(name, safe=""))
        if sub is not None:
            parts.append(sub)
    return "/".join(parts)


def _written(data: bytes) -> Any:
    """The answer to a write, when it is JSON (callers rarely read it; a write that landed stays landed)."""
    try:
        return json.loads(data) if data.strip() else None
    except ValueError:
        return None


LIMITER_ATTRIBUTE: Final = "kcg_limiter"


def limit(client: Any, limiter: Any) -> Any:
    """Every APIServer over `client` takes a token of `limiter` (agent.infra.ratelimit) before each request:
    one limit for the process, however many parts make their own APIServer over its one client."""
    setattr(client, LIMITER_ATTRIBUTE, limiter)
    return client


class APIServer:
    """Requests to the API server through one `kubernetes.client.ApiClient`. Reads return the parsed JSON,
    writes the parsed answer (None when it is not JSON); `request` and `lister` hand out the unread
    response for streaming."""

    def __init__(self, client: Any) -> None:
        self.client = client  # kubernetes.client.ApiClient
        self.limiter = getattr(client, LIMITER_ATTRIBUTE, None)  # set by `limit`, or none

    def request(self, method: str, resource_path: str, *, query: Query | None = None, body: Any = None,
                content_type: str | None = None, timeout: Timeout = None, accept: str = JSON) -> Any:
        """The urllib3 response of a 2xx answer, unread (the caller reads or streams it, then releases it);
        raises ApiException for any other status."""
        from kubernetes.client.exceptions import ApiException

        if self.limiter is not None:
            self.limiter.wait()
        headers: dict[str, str] = {"Accept": accept}
        if content_type is not None:
            headers["Content-Type"] = content_type
        params = sorted(((k, v) for k, v in (query or {}).items() if v is not None), key=lambda kv: kv[0])  # the typed calls' order
        method, url, headers, body, post = self.client.param_serialize(
            method=method, resource_path=resource_path, query_params=params, header_params=headers, body=body,
            auth_settings=["BearerToken"],
        )
        resp = self.client.call_api(method, url, header_params=headers, body=body, post_params=post,
                                    _request_timeout=timeout)
        if not 200 <= resp.status <= 299:
            try:
                resp.read()
            finally:
                resp.response.release_conn()
            raise ApiException.from_response(http_resp=resp, body=None, data=None)  # raises its status's subclass
        return resp.response

    def _read(self, method: str, resource_path: str, **kw: Any) -> bytes:
        resp = self.request(method, resource_path, **kw)
        try:
            data: bytes = resp.data
        finally:
            resp.release_conn()
        return data

    def get(self, resource_path: str, query: Query | None = None, *, timeout: Timeout = None,
            accept: str = JSON) -> Any:
        """One object (or any GET answer) as parsed JSON; ValueError when it is not JSON. `accept=METADATA`:
        its metadata alone."""
        return json.loads(self._read("GET", resource_path, query=query, timeout=timeout, accept=accept))

    def list(self, resource_path: str, query: Query | None = None, *, timeout: Timeout = None) -> Any:
        """A list (`items`, `metadata.continue`, `metadata.resourceVersion`) as parsed JSON."""
        return self.get(resource_path, query, timeout=timeout)

    def create(self, resource_path: str, body: Any, *, timeout: Timeout = None) -> Any:
        return _written(self._read("POST", resource_path, body=body, content_type=JSON, timeout=timeout))

    def replace(self, resource_path: str, body: Any, *, timeout: Timeout = None) -> Any:
        return _written(self._read("PUT", resource_path, body=body, content_type=JSON, timeout=timeout))

    def patch(self, resource_path: str, body: Any, content_type: str, *, timeout: Timeout = None) -> Any:
        return _written(self._read("PATCH", resource_path, body=body, content_type=content_type, timeout=timeout))

    def delete(self, resource_path: str, body: Any = None, *, timeout: Timeout = None) -> Any:
        """`body`: DeleteOptions (preconditions, grace period), or None."""
        content_type = JSON if body is not None else None
        return _written(self._read("DELETE", resource_path, body=body, content_type=content_type, timeout=timeout))

    def lister(self, resource_path: str) -> Callable[..., Any]:
        """`resource_path`'s list in the typed list calls' convention (field_selector=, _continue=,
        watch=True..., _request_timeout=), which agent.kube.watch drives: with `_preload_content=False` the
        unread response (a page, or a watch stream), else the parsed list."""

        def call(*, _preload_content: bool = True, _request_timeout: Timeout = None, **kw: Any) -> Any:
            query = {CLIENT_QUERY[k]: v for k, v in kw.items()}
            if _preload_content:
                return self.list(resource_path, query, timeout=_request_timeout)
            return self.request("GET", resource_path, query=query, timeout=_request_timeout)

        return call
