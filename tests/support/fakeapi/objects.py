"""Every kind besides pods and Nodes — custom resources (VerticalPodAutoscalers), Leases, workloads
(StatefulSets, ControllerRevisions), core kinds (LimitRanges) — in one generic store: a kind answers 404
until it is registered with `serve`, as a cluster without the CRD does, and then behaves as the API
server does: list (all namespaces or one, `labelSelector`), get, create (409 AlreadyExists,
`generateName`), update (409 Conflict on a stale `metadata.resourceVersion`), patch (a resourceVersion in
the patch is a precondition), delete, and the `status` subresource. Its watch is in `watch`."""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable
from typing import Any

from tests.support.fakeapi.patches import apply_patch
from tests.support.fakeapi.protocol import fields_match, gkey, labels_match, now, status

BUILTIN = (("", "v1", "limitranges", "LimitRange"),)
"""Core kinds served by the generic store from the start (a real API server always has them): a test
`put`s and `remove`s their objects like any registered kind's."""


class ObjectStore:
    """The generic store's part of `FakeCluster`, over the cluster's lock and resourceVersion."""

    lock: threading.Condition
    rv: int
    served: dict[str, tuple[str, bool]]  # "group/version/resource" -> (kind, namespaced)
    objects: dict[str, dict[tuple[str, str], dict[str, Any]]]  # key -> (ns, name) -> obj
    ghistory: list[tuple[int, str, str, dict[str, Any]]]  # (rv, key, type, obj)
    prunes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]  # key -> what its schema keeps of an object

    # ---- test side ----

    def serve(self, group: str, version: str, resource: str, kind: str, namespaced: bool = True) -> None:
        """Register a kind: until then its paths answer 404, as a cluster without the CRD does."""
        key = gkey(group, version, resource)
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
        key = gkey(group, version, resource)
        with self.lock:
            kind, _ = self.served[key]
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("namespace", "")
            store = self.objects[key]
            old = store.get((meta["namespace"], meta["name"]))
            meta.setdefault("uid", (old or {}).get("metadata", {}).get("uid") or str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now())
            obj.setdefault("apiVersion", f"{group}/{version}" if group else version)
            obj.setdefault("kind", kind)
            store[(meta["namespace"], meta["name"])] = obj
            self._gemit(key, "MODIFIED" if old else "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, group: str, version: str, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get(gkey(group, version, resource), {}).get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def remove(self, group: str, version: str, resource: str, namespace: str, name: str) -> None:
        key = gkey(group, version, resource)
        with self.lock:
            obj = self.objects[key].pop((namespace, name))
            self._gemit(key, "DELETED", obj)

    # ---- server side ----

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

    def g_list(self, key: str, ns: str | None, selector: str, fields: str = "") -> dict[str, Any]:
        kind, _ = self.served[key]
        with self.lock:
            items = [
                copy.deepcopy(o)
                for (ons, _n), o in sorted(self.objects[key].items())
                if (ns is None or ons == ns) and labels_match(o, selector) and fields_match(o, fields)
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
                    return 409, status(409, "AlreadyExists", f'{key} "{meta.get("name")}" already exists')
                meta["uid"] = str(uuid.uuid4())
                meta["creationTimestamp"] = now()
                body.setdefault("kind", kind)
                store[(ns, meta["name"])] = body
                self._gemit(key, "ADDED", body)
                return 201, copy.deepcopy(body)
            old = store.get((ns, name or ""))
            applying = method == "PATCH" and ctype.startswith("application/apply-patch")
            if old is None and applying and isinstance(body, dict):  # server-side apply creates
                body = copy.deepcopy(body)
                meta = body.setdefault("metadata", {})
                meta.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
                body.setdefault("kind", kind)
                store[(ns, name or "")] = body
                self._gemit(key, "ADDED", body)
                return 201, copy.deepcopy(body)
            if old is None:
                return 404, status(404, "NotFound", f'{key} "{name}" not found')
            if method == "DELETE":
                del store[(ns, name or "")]
                self._gemit(key, "DELETED", old)
                return 200, copy.deepcopy(old)
            want_rv = ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if want_rv is not None and want_rv != old["metadata"]["resourceVersion"]:
                return 409, status(409, "Conflict", f'Operation cannot be fulfilled on {key} "{name}": the object has been modified')
            if method == "PUT" or applying:  # an applier that owns every field it sends: they replace the old
                new = copy.deepcopy(body)
                new["metadata"] = {**old["metadata"], **new.get("metadata", {})}
            else:
                try:
                    new = apply_patch(old, body, ctype)
                except (ValueError, KeyError, IndexError, TypeError) as err:
                    return 422, status(422, "Invalid", f"patch: {err}")
            if sub == "status":  # the status subresource changes only status
                new = {**old, "status": new.get("status")}
            elif sub is None and "status" in old:  # the main resource leaves status alone
                new = {**new, "status": old["status"]}
            new["metadata"]["uid"] = old["metadata"]["uid"]
            if key in self.prunes:
                new = self.prunes[key](new)
            store[(ns, name or "")] = new
            self._gemit(key, "MODIFIED", new)
            return 200, copy.deepcopy(new)
