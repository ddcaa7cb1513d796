"""A StatefulSet, its revisions and pods as the API server holds them, and a fake kubelet + StatefulSet
controller acting on a FakeCluster: shared by the rollout tests and the rollout benchmark."""

from __future__ import annotations

import copy
import hashlib
import threading
import time
import uuid
from typing import Any

from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.node import NODE

STS_API = ("apps", "v1", "statefulsets")
DS_API = ("apps", "v1", "daemonsets")
REV_API = ("apps", "v1", "controllerrevisions")
LEASE_API = ("coordination.k8s.io", "v1", "leases")
VAP_API = ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies")
GATE = "kube-cgroup-agent.io/InPlaceUpdateReady"
STS_UID = "sts-uid-1"


def sts_template(proxy: str = "proxy:1", env: str = "") -> dict[str, Any]:
    app: dict[str, Any] = {"name": "app", "image": "app:1", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    if env:
        app["env"] = [{"name": "MODE", "value": env}]
    return {
        "metadata": {"labels": {"app": "db"}},
        "spec": {"containers": [app, {"name": "proxy", "image": proxy}], "readinessGates": [{"conditionType": GATE}]},
    }


def sts_revision(name: str, template: dict[str, Any], number: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "db", "controller-revision-hash": name},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": STS_UID, "controller": True}]},
        "data": {"spec": {"template": {**template, "$patch": "replace"}}},
        "revision": number,
    }


def sts_object(update: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "db", "namespace": "default", "uid": STS_UID, "generation": 2,
                     "annotations": {"kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible", **(annotations or {})}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "db"}}, "updateStrategy": {"type": "OnDelete"},
                 "template": sts_template()},
        "status": {"currentRevision": "db-1", "updateRevision": update},
    }


def container_id(seed: str) -> str:
    return "containerd://" + hashlib.sha256(seed.encode()).hexdigest()


def sts_pod(i: int, node: str, revision: str, template: dict[str, Any]) -> dict[str, Any]:
    name = f"db-{i}"
    spec = copy.deepcopy(template["spec"])
    spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": str(uuid.uuid4()), "resourceVersion": "1",
                     "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "labels": {"app": "db", "controller-revision-hash": revision},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": STS_UID, "controller": True}]},
        "spec": spec,
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, {"type": GATE, "status": "True"}],
                   "containerStatuses": [
                       {"name": c["name"], "image": c["image"], "imageID": "sha256:" + c["image"], "containerID": container_id(f"{name}-{c['name']}-0"),
                        "restartCount": 0, "ready": True, "state": {"running": {}}}
                       for c in spec["containers"]]},
    }


class FakeKubelet:
    """Every 50 ms, what the kubelet and the StatefulSet controller would do to the cluster's pods."""

    def __init__(self, cluster: FakeCluster, update_template: dict[str, Any], update: str, start_new: bool = True,
                 nodes: dict[str, str] | None = None) -> None:
        self.cluster, self.template, self.update, self.start_new = cluster, update_template, update, start_new
        self.nodes = nodes or {"db-0": "node-2", "db-1": NODE, "db-2": NODE}  # pod -> node, for recreating
        self.restarts: list[tuple[str, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeKubelet:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            with self.cluster.lock:  # read-modify-write in one step, as the API server's resourceVersion would ensure
                self._step()

    def _step(self) -> None:
        cluster = self.cluster
        pods = [copy.deepcopy(p) for p in cluster.pods.values()]
        present = {p["metadata"]["name"] for p in pods}
        for name in sorted(set(self.nodes) - present):  # the controller recreates a deleted pod
            cluster.apply(sts_pod(int(name.rsplit("-", 1)[1]), self.nodes[name], self.update, self.template))
        for pod in pods:
            changed = False
            for c, st in zip(pod["spec"]["containers"], pod["status"]["containerStatuses"], strict=True):
                if c["image"] != st["image"]:  # the kubelet restarts a container whose image changed
                    if not self.start_new:
                        changed = changed or st["ready"]
                        st["ready"] = False
                        continue
                    self.restarts.append((pod["metadata"]["name"], c["name"]))
                    st.update(image=c["image"], imageID="sha256:" + c["image"], ready=True,
                              containerID=container_id(f"{pod['metadata']['name']}-{c['name']}-{len(self.restarts)}"))
                    changed = True
            conds = {c["type"]: c for c in pod["status"]["conditions"]}
            ready = all(s["ready"] for s in pod["status"]["containerStatuses"]) and conds.get(GATE, {}).get("status", "True") == "True"
            if conds["Ready"]["status"] != ("True" if ready else "False"):
                conds["Ready"]["status"] = "True" if ready else "False"
                changed = True
            if changed:
                cluster.apply(pod)


def serve_rollout_kinds(cluster: FakeCluster) -> None:
    """Register the kinds the rollout reads and writes (a cluster with the admission policy API)."""
    for api, kind in ((STS_API, "StatefulSet"), (DS_API, "DaemonSet"), (REV_API, "ControllerRevision"), (LEASE_API, "Lease"),
                      (VAP_API, "ValidatingAdmissionPolicy")):
        cluster.serve(*api, kind=kind, namespaced=kind != "ValidatingAdmissionPolicy")
