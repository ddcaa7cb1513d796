"""The cluster's objects through the admin's client: the agent installed as `deploy/` installs it (its
CRDs, ClusterRoles and bindings, admission policies, the keeper's RBAC; the workloads that would run it
are left out: the harness runs the processes), the VPA CRDs, and the harness's objects, created in owner
order (an ownerReference needs its owner's UID), pods with their status as a kubelet reports it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from bench.scale.api import MERGE, APIError, Client, in_parallel, url_of
from bench.scale.objects import pod_ip, pod_status, service_account, uid

ROOT = Path(__file__).resolve().parents[2]
VPA_CRD = ROOT / "tests" / "e2e_k8s" / "vpa-v1-crd.yaml"
NOT_APPLIED = {"DaemonSet", "Deployment", "ConfigMap"}  # the harness runs the agents and the keeper itself
OWNER_ORDER = ("Namespace", "ServiceAccount", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet",
               "ControllerRevision", "VerticalPodAutoscaler", "LimitRange")


def rendered(code: Path = ROOT) -> list[dict[str, Any]]:
    """deploy/'s objects as `kubectl apply -k deploy/` applies them (deploy/render.py of the code measured)."""
    out = subprocess.run([sys.executable, str(code / "deploy" / "render.py"), str(code / "deploy")],
                         capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def shipped_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The agent's config.yaml as deploy/base/configmap.yaml ships it."""
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kube-cgroup-agent")
    loaded = yaml.safe_load(cm["data"]["config.yaml"])
    assert isinstance(loaded, dict)
    return loaded


def _apply(client: Client, obj: dict[str, Any]) -> None:
    try:
        client.create(obj, exists_ok=False)
    except APIError as err:
        if err.status != 409:
            raise
        current = client.get(url_of(obj))
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        client.call("PUT", url_of(obj), obj)


def wait_crds(client: Client, names: Iterable[str], timeout_s: float = 60.0) -> None:
    for name in names:
        deadline = time.monotonic() + timeout_s
        while True:
            crd = client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
            if conds.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} not established in {timeout_s:.0f} s")
            time.sleep(0.2)


def install(client: Client, code: Path = ROOT) -> dict[str, Any]:
    """The VPA CRDs, then deploy/'s objects; returns the shipped agent config."""
    vpa_crds = [d for d in yaml.safe_load_all(VPA_CRD.read_text()) if d]
    for crd in vpa_crds:
        _apply(client, crd)
    objects = rendered(code)
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    for obj in crds:
        _apply(client, obj)
    wait_crds(client, [c["metadata"]["name"] for c in [*vpa_crds, *crds]])
    for obj in objects:
        if obj["kind"] not in NOT_APPLIED and obj["kind"] != "CustomResourceDefinition":
            _apply(client, obj)
    return shipped_config(objects)


class Loader:
    """Creates objects in owner order, filling each ownerReference's UID from its created owner."""

    def __init__(self, client: Client, threads: int = 6) -> None:
        self.client = client
        self.threads = threads
        self.uids: dict[tuple[str, str, str], str] = {}
        self.created = 0
        self.on_change: Callable[[int], None] | None = None

    def _fill(self, obj: dict[str, Any]) -> dict[str, Any]:
        refs = obj["metadata"].get("ownerReferences")
        if not refs:
            return obj
        ns = obj["metadata"].get("namespace", "")
        filled = [{**r, "uid": self.uids.get((r["kind"], ns, r["name"])) or uid("owner", r["kind"], ns, r["name"])}
                  for r in refs]
        return {**obj, "metadata": {**obj["metadata"], "ownerReferences": filled}}

    def create_one(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = self.client.create(self._fill(obj))
        m = out["metadata"]
        self.uids[(out.get("kind") or obj["kind"], m.get("namespace", ""), m["name"])] = m["uid"]
        return dict(out)

    def objects(self, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        rank = {k: i for i, k in enumerate(OWNER_ORDER)}
        for k in sorted({o["kind"] for o in objs}, key=lambda k: rank.get(k, len(rank))):
            batch = [o for o in objs if o["kind"] == k]
            if k == "Namespace":
                out += in_parallel(self.create_one, batch, self.threads)
                out += in_parallel(self.create_one, [service_account(o["metadata"]["name"]) for o in batch], self.threads)
            else:
                out += in_parallel(self.create_one, batch, self.threads)
        self.created += len(out)
        return out

    def pods(self, pods: list[dict[str, Any]], started: str, first_ip: int = 0) -> list[dict[str, Any]]:
        """Create each pod bound to its node, then report its status as the kubelet would."""

        def one(item: tuple[int, dict[str, Any]]) -> dict[str, Any]:
            n, p = item
            created = self.create_one(p)
            return dict(self.client.patch(created, pod_status(created, started, pod_ip(first_ip + n)), "status", MERGE))

        return in_parallel(one, list(enumerate(pods)), self.threads)
