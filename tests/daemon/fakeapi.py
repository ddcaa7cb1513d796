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
streams send nothing more), `open_watches()` (streams a drop would close now; of one resource when named),
`dropped` (the last pod-watch resourceVersion each dropped stream delivered), `restart()` (stop the server and start a new one on the same
port, state kept, history compacted as after an etcd restore).
The cluster state lives in `FakeCluster`, the sockets in `FakeAPIServer`.

Any other kind (custom resources such as VerticalPodAutoscalers, Leases, StatefulSets, ControllerRevisions;
core kinds too, group "": LimitRanges are registered from the start, as every API server serves them)
is served by a generic object store once registered with `serve(group, version, resource, kind)`: list
(all namespaces or one; `labelSelector` with `k=v` terms), watch (same semantics as the pods' watch: from a
resourceVersion, 410 when compacted, bookmarks), get, create (POST; 409 AlreadyExists; `generateName`), update
(PUT, 409 Conflict when `metadata.resourceVersion` is stale), patch (merge patch, or a strategic merge patch that
merges lists of objects by `name`/`type`, or a JSON patch; a `metadata.resourceVersion` in the patch is a
precondition), delete, and the `status` subresource. An unregistered kind answers 404, as a missing CRD does.
Pods also take PATCH (`/pods/{name}` and `/pods/{name}/resize`), DELETE and a recorded `/pods/{name}/eviction`.
`fail(method, fragment, code, times)` makes matching requests answer an error status (fault injection);
`count(method, fragment)` counts recorded requests.
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time
import uuid
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


BUILTIN = (("", "v1", "limitranges", "LimitRange"),)
"""Core kinds served by the generic store from the start (a real API server always has them): a test
`put`s and `remove`s their objects like any registered kind's."""


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

    def __post_init__(self) -> None:
        for group, version, resource, kind in BUILTIN:  # what every API server serves, without a CRD
            self.serve(group, version, resource, kind)

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


    # ---- generic objects (custom resources, leases, workloads) ----

    def serve(self, group: str, version: str, resource: str, kind: str, namespaced: bool = True) -> None:
        """Register a kind: until then its paths answer 404, as a cluster without the CRD does."""
        key = _gkey(group, version, resource)
        with self.lock:
            self.served[key] = (kind, namespaced)
            self.objects.setdefault(key, {})

    def _gemit(self, key: str, kind: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.ghistory.append((self.rv, key, kind, copy.deepcopy(obj)))
        self.lock.notify_all()

    def put(self, group: str, version: str, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object from the test side (a watch event, a new resourceVersion)."""
        key = _gkey(group, version, resource)
        with self.lock:
            kind, _ = self.served[key]
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("namespace", "")
            store = self.objects[key]
            old = store.get((meta["namespace"], meta["name"]))
            meta.setdefault("uid", (old or {}).get("metadata", {}).get("uid") or str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            obj.setdefault("apiVersion", f"{group}/{version}" if group else version)
            obj.setdefault("kind", kind)
            store[(meta["namespace"], meta["name"])] = obj
            self._gemit(key, "MODIFIED" if old else "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, group: str, version: str, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get(_gkey(group, version, resource), {}).get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def remove(self, group: str, version: str, resource: str, namespace: str, name: str) -> None:
        key = _gkey(group, version, resource)
        with self.lock:
            obj = self.objects[key].pop((namespace, name))
            self._gemit(key, "DELETED", obj)

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

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            pod = self._find_pod(namespace, name)
            return copy.deepcopy(pod) if pod is not None else None

    def _find_pod(self, ns: str, name: str) -> dict[str, Any] | None:
        return next(
            (p for p in self.pods.values() if p["metadata"]["name"] == name and p["metadata"]["namespace"] == ns),
            None,
        )

    def _fault(self, method: str, path: str) -> int | None:
        with self.lock:
            for f in self.faults:
                where = urlsplit(path).path.endswith(f[1][:-1]) if f[1].endswith("$") else f[1] in path
                if f[0] == method and where and f[3] > 0:
                    f[3] -= 1
                    return int(f[2])
        return None

    # ---- server side ----

    def list_pods(self, node: str) -> dict[str, Any]:
        with self.lock:
            items = [copy.deepcopy(p) for p in self.pods.values() if p["spec"].get("nodeName") == node]
            return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def list_namespace_pods(self, ns: str, selector: str) -> dict[str, Any]:
        """Every node's pods of one namespace whose labels match (`k=v,...`)."""
        with self.lock:
            items = [copy.deepcopy(p) for p in self.pods.values() if p["metadata"].get("namespace") == ns and _labels_match(p, selector)]
            return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def discovery(self, group: str, version: str) -> dict[str, Any] | None:
        """The APIResourceList of a group/version: the kinds served there (None: the group is not served)."""
        with self.lock:
            resources = [
                {"name": key.rsplit("/", 1)[1], "singularName": kind.lower(), "kind": kind, "namespaced": namespaced,
                 "verbs": ["get", "list", "watch"]}
                for key, (kind, namespaced) in self.served.items()
                if key.startswith(f"{group}/{version}/")
            ]
        if not resources:
            return None
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}", "resources": resources}

    def g_list(self, key: str, ns: str | None, selector: str) -> dict[str, Any]:
        kind, _ = self.served[key]
        with self.lock:
            items = [
                copy.deepcopy(o)
                for (ons, _n), o in sorted(self.objects[key].items())
                if (ns is None or ons == ns) and _labels_match(o, selector)
            ]
            return {"kind": kind + "List", "apiVersion": key.rsplit("/", 1)[0].lstrip("/"),
                    "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def g_write(
        self, method: str, key: str, ns: str, name: str | None, sub: str | None, body: Any, ctype: str
    ) -> tuple[int, dict[str, Any]]:
        """POST / PUT / PATCH / DELETE of a generic object, with the API server's preconditions."""
        kind, _ = self.served[key]
        with self.lock:
            store = self.objects[key]
            if method == "POST":
                meta = body.setdefault("metadata", {})
                if not meta.get("name") and meta.get("generateName"):
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                meta["namespace"] = ns
                if (ns, meta.get("name")) in store:
                    return 409, _status(409, "AlreadyExists", f'{key} "{meta.get("name")}" already exists')
                meta["uid"] = str(uuid.uuid4())
                meta["creationTimestamp"] = _now()
                body.setdefault("kind", kind)
                store[(ns, meta["name"])] = body
                self._gemit(key, "ADDED", body)
                return 201, copy.deepcopy(body)
            old = store.get((ns, name or ""))
            if old is None:
                return 404, _status(404, "NotFound", f'{key} "{name}" not found')
            if method == "DELETE":
                del store[(ns, name or "")]
                self._gemit(key, "DELETED", old)
                return 200, copy.deepcopy(old)
            want_rv = ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if want_rv is not None and want_rv != old["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on {key} "{name}": the object has been modified')
            if method == "PUT":
                new = copy.deepcopy(body)
                new["metadata"] = {**old["metadata"], **new.get("metadata", {})}
            else:
                try:
                    new = apply_patch(old, body, ctype)
                except (ValueError, KeyError, IndexError, TypeError) as err:
                    return 422, _status(422, "Invalid", f"patch: {err}")
            if sub == "status":  # the status subresource changes only status
                new = {**old, "status": new.get("status")}
            elif sub is None and "status" in old:  # the main resource leaves status alone
                new = {**new, "status": old["status"]}
            new["metadata"]["uid"] = old["metadata"]["uid"]
            store[(ns, name or "")] = new
            self._gemit(key, "MODIFIED", new)
            return 200, copy.deepcopy(new)

    def pod_write(self, method: str, ns: str, name: str, sub: str | None, body: Any, ctype: str) -> tuple[int, dict[str, Any]]:
        """PATCH pods/{name} and pods/{name}/resize, DELETE pods/{name}, POST pods/{name}/eviction (recorded)."""
        with self.lock:
            pod = self._find_pod(ns, name)
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            if method == "POST" and sub == "eviction":
                return 201, _status(201, "Created", "eviction recorded")
            if method == "DELETE":
                uid = pod["metadata"]["uid"]
                self.pods.pop(uid)
                self._emit("DELETED", pod)
                return 200, copy.deepcopy(pod)
            want_rv = ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if want_rv is not None and want_rv != pod["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on pods "{name}": the object has been modified')
            try:
                new = apply_patch(pod, body, ctype)
            except (ValueError, KeyError, IndexError, TypeError) as err:
                return 422, _status(422, "Invalid", f"patch: {err}")
            if sub == "resize":  # only container resources may change through resize
                for c_new, c_old in zip(new["spec"]["containers"], pod["spec"]["containers"], strict=True):
                    if {k: v for k, v in c_new.items() if k != "resources"} != {k: v for k, v in c_old.items() if k != "resources"}:
                        return 422, _status(422, "Invalid", "pods/resize may change only container resources")
            new["metadata"]["uid"] = pod["metadata"]["uid"]
            self.pods[new["metadata"]["uid"]] = new
            self._emit("MODIFIED", new)
            return 200, copy.deepcopy(new)

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


def _gkey(group: str, version: str, resource: str) -> str:
    return f"{group}/{version}/{resource}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge(target: Any, patch: Any) -> Any:
    """A strategic merge patch as far as the agent's objects need it: maps merge, lists of objects merge by
    their `name` (containers, volumes) or `type` (conditions) key, other lists are replaced."""
    if isinstance(patch, dict):
        out = dict(target) if isinstance(target, dict) else {}
        for k, v in patch.items():
            if k.startswith("$"):
                continue
            if v is None:
                out.pop(k, None)
            else:
                out[k] = strategic_merge(out.get(k), v)
        return out
    if isinstance(patch, list) and patch and all(isinstance(x, dict) for x in patch) and isinstance(target, list):
        key = "name" if all("name" in x for x in patch) else "type" if all("type" in x for x in patch) else None
        if key is not None:
            merged = [copy.deepcopy(x) for x in target]
            for item in patch:
                for i, old in enumerate(merged):
                    if isinstance(old, dict) and old.get(key) == item[key]:
                        merged[i] = strategic_merge(old, item)
                        break
                else:
                    merged.append(copy.deepcopy(item))
            return merged
    return copy.deepcopy(patch)


def json_patch(target: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 (add, replace, remove, test)."""
    doc = copy.deepcopy(target)
    for op in ops:
        path = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent = doc
        for p in path[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last: Any = path[-1]
        if isinstance(parent, list):
            last = len(parent) if last == "-" else int(last)
        if op["op"] == "test":
            if parent[last] != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif op["op"] == "remove":
            del parent[last]
        elif op["op"] == "add" and isinstance(parent, list):
            parent.insert(last, op["value"])
        else:
            parent[last] = op["value"]
    return doc


def apply_patch(target: dict[str, Any], body: Any, content_type: str) -> dict[str, Any]:
    if content_type.startswith("application/json-patch+json"):
        out: dict[str, Any] = json_patch(target, body)
        return out
    if content_type.startswith("application/strategic-merge-patch+json"):
        return dict(strategic_merge(target, body))
    return dict(merge_patch(target, body))


def _labels_match(obj: dict[str, Any], selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term not in labels:
            return False
    return True


def _route(path: str) -> tuple[str, str, str | None, str | None, str | None, str | None] | None:
    """(group, version, namespace, resource, name, subresource) of an API path."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    resource = rest[0] if rest else None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return group, version, ns, resource, name, sub


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

        def _faulted(self) -> bool:
            delay = cluster._delay(self.command, self.path)
            if delay:
                time.sleep(delay)
            code = cluster._fault(self.command, self.path)
            if code is None:
                return False
            self._send(code, _status(code, "Injected", f"injected {code}"))
            return True

        def _generic(self, body: Any) -> bool:
            """Serve a registered kind (or a pod write); False when the path is not one."""
            url = urlsplit(self.path)
            route = _route(url.path)
            if route is None:
                return False
            group, version, ns, resource, name, sub = route
            if group == "" and resource == "pods" and ns is not None and name is None and self.command == "GET":
                q = {k: v[-1] for k, v in parse_qs(url.query).items()}
                self._send(200, cluster.list_namespace_pods(ns, q.get("labelSelector", "")))
                return True
            if group == "" and resource == "pods" and ns is not None and name is not None:
                if self.command == "GET" and sub is None:
                    with cluster.lock:
                        found = cluster._find_pod(ns, name)
                        self._send(200 if found else 404, copy.deepcopy(found) if found else _status(404, "NotFound", f'pods "{name}" not found'))
                    return True
                if (self.command in ("PATCH", "DELETE") and sub in (None, "resize")) or sub == "eviction":
                    code, out = cluster.pod_write(self.command, ns, name, sub, body, self.headers.get("Content-Type", ""))
                    self._send(code, out)
                    return True
                return False
            key = _gkey(group, version, resource or "")
            if key not in cluster.served:
                return False
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if self.command == "GET" and name is None:
                if q.get("watch") in ("true", "1", "True"):
                    self._gwatch(key, ns, q)
                else:
                    self._send(200, cluster.g_list(key, ns, q.get("labelSelector", "")))
                return True
            if self.command == "GET":
                g, v, r = key.split("/")
                obj = cluster.get(g, v, r, ns or "", name or "")
                self._send(200 if obj else 404, obj or _status(404, "NotFound", f'{resource} "{name}" not found'))
                return True
            code, out = cluster.g_write(self.command, key, ns or "", name, sub, body, self.headers.get("Content-Type", ""))
            self._send(code, out)
            return True

        def _gwatch(self, key: str, ns: str | None, q: dict[str, str]) -> None:
            since = int(q.get("resourceVersion") or 0)
            timeout = float(q.get("timeoutSeconds") or 300)
            bookmarks = q.get("allowWatchBookmarks") in ("true", "True", "1")
            selector = q.get("labelSelector", "")
            kind, _ = cluster.served[key]
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
                cluster._stream(key.rsplit("/", 1)[-1], 1)
            sent = since
            last_bookmark = time.monotonic()
            try:
                while time.monotonic() < end and not server_stopping.is_set():
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
                        if k == key and (ns is None or obj["metadata"].get("namespace") == ns) and _labels_match(obj, selector):
                            self._chunk({"type": t, "object": obj})
                    if bookmarks and time.monotonic() - last_bookmark >= cluster.bookmark_interval_s:
                        sent = max(sent, current)
                        self._chunk({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": key.rsplit("/", 1)[0].lstrip("/"), "metadata": {"resourceVersion": str(sent)}}})
                        last_bookmark = time.monotonic()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                return
            finally:
                with cluster.lock:
                    cluster._stream(key.rsplit("/", 1)[-1], -1)

        def do_PUT(self) -> None:
            body = self._body()
            self._record(body)
            if self._faulted() or self._generic(body):
                return
            self._send(404, _status(404, "NotFound", self.path))

        def do_DELETE(self) -> None:
            body = self._body() if int(self.headers.get("Content-Length") or 0) else None
            self._record(body)
            if self._faulted() or self._generic(body):
                return
            self._send(404, _status(404, "NotFound", self.path))

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
                    return self._send(404, _status(404, "NotFound", f'nodes "{parts[3]}" not found'))
                return self._send(200, node)
            if url.path == "/api/v1/pods":
                node = q.get("fieldSelector", "").removeprefix("spec.nodeName=")
                if q.get("watch") in ("true", "1", "True"):
                    return self._watch(node, q)
                return self._send(200, cluster.list_pods(node))
            if self._generic(None):
                return
            if len(parts) == 3 and parts[0] == "apis":
                found = cluster.discovery(parts[1], parts[2])
                if found is not None:
                    return self._send(200, found)
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
                cluster._stream("pods", 1)  # from here on, drop_watches ends this stream
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
                    cluster._stream("pods", -1)

        def do_PATCH(self) -> None:
            body = self._body()
            self._record(body)
            if self._faulted():
                return
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
            if self._generic(body):
                return
            self._send(404, _status(404, "NotFound", self.path))

        def do_POST(self) -> None:
            body = self._body()
            self._record(body)
            if self._faulted():
                return
            parts = urlsplit(self.path).path.strip("/").split("/")
            if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "events":
                with cluster.lock:
                    if body["metadata"]["name"] in cluster.events:  # as the API server: names are unique
                        return self._send(409, _status(409, "AlreadyExists", body["metadata"]["name"]))
                    body["_order"] = len(cluster.events)
                    cluster.events[body["metadata"]["name"]] = body
                    out = {k: v for k, v in body.items() if k != "_order"}
                return self._send(201, out)
            if self._generic(body):
                return
            self._send(404, _status(404, "NotFound", self.path))

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
