"""The pods: what a test does to them (`apply`, `delete`, each a new resourceVersion and a watch event)
and what the API server does with a request about them — the node's list and a namespace's by labels,
PATCH of a pod and of its `resize` subresource (only container and pod-level resources may change), the `status`
subresource (a strategic merge of conditions by type, refused on a UID precondition that does not hold;
any other status field is a failure of the agent), DELETE, and a recorded `eviction`."""

from __future__ import annotations

import copy
import threading
from typing import Any

from tests.support.fakeapi.patches import apply_patch
from tests.support.fakeapi.protocol import labels_match, status


class PodRequests:
    """The pods' part of `FakeCluster`, over the cluster's lock and resourceVersion."""

    lock: threading.Condition
    rv: int
    pods: dict[str, dict[str, Any]]  # uid -> pod
    history: list[tuple[int, str, dict[str, Any]]]  # (rv, type, object): what a pod watch sends

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

    def condition(self, uid: str, ctype: str) -> dict[str, Any] | None:
        with self.lock:
            pod = self.pods.get(uid) or {}
            for c in pod.get("status", {}).get("conditions", []):
                if c.get("type") == ctype:
                    return dict(c)
        return None

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            pod = self._find_pod(namespace, name)
            return copy.deepcopy(pod) if pod is not None else None

    def _find_pod(self, ns: str, name: str) -> dict[str, Any] | None:
        return next(
            (p for p in self.pods.values() if p["metadata"]["name"] == name and p["metadata"]["namespace"] == ns),
            None,
        )

    # ---- server side ----

    def list_pods(self, node: str) -> dict[str, Any]:
        with self.lock:
            items = [copy.deepcopy(p) for p in self.pods.values() if p["spec"].get("nodeName") == node]
            return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def list_namespace_pods(self, ns: str, selector: str) -> dict[str, Any]:
        """Every node's pods of one namespace whose labels match (`k=v,...`)."""
        with self.lock:
            items = [copy.deepcopy(p) for p in self.pods.values() if p["metadata"].get("namespace") == ns and labels_match(p, selector)]
            return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}, "items": items}

    def pod_write(self, method: str, ns: str, name: str, sub: str | None, body: Any, ctype: str) -> tuple[int, dict[str, Any]]:
        """PATCH pods/{name} and pods/{name}/resize, DELETE pods/{name}, POST pods/{name}/eviction (recorded)."""
        with self.lock:
            pod = self._find_pod(ns, name)
            if pod is None:
                return 404, status(404, "NotFound", f'pods "{name}" not found')
            if method == "POST" and sub == "eviction":
                return 201, status(201, "Created", "eviction recorded")
            if method == "DELETE":
                uid = pod["metadata"]["uid"]
                self.pods.pop(uid)
                self._emit("DELETED", pod)
                return 200, copy.deepcopy(pod)
            want_rv = ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
            if want_rv is not None and want_rv != pod["metadata"]["resourceVersion"]:
                return 409, status(409, "Conflict", f'Operation cannot be fulfilled on pods "{name}": the object has been modified')
            try:
                new = apply_patch(pod, body, ctype)
            except (ValueError, KeyError, IndexError, TypeError) as err:
                return 422, status(422, "Invalid", f"patch: {err}")
            if sub == "resize":  # only container and pod-level resources may change through resize (v1.36)
                for c_new, c_old in zip(new["spec"]["containers"], pod["spec"]["containers"], strict=True):
                    if {k: v for k, v in c_new.items() if k != "resources"} != {k: v for k, v in c_old.items() if k != "resources"}:
                        return 422, status(422, "Invalid", "pods/resize may change only container resources")
                if {k: v for k, v in new["spec"].items() if k not in ("containers", "resources")} != {
                        k: v for k, v in pod["spec"].items() if k not in ("containers", "resources")}:
                    return 422, status(422, "Invalid", "pods/resize may change only container and pod-level resources")
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
                return 404, status(404, "NotFound", f'pods "{name}" not found')
            uid = (body.get("metadata") or {}).get("uid")
            if uid is not None and uid != pod["metadata"]["uid"]:
                return 409, status(409, "Conflict", "Precondition failed: UID in precondition")
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

