"""The simulated kubelets of every node: each node's Lease renewed every 10 s, its status posted every
5 minutes when nothing changed (the kubelet's documented periods), and, on an agent's node, a
`pods/resize` actuated as the kubelet does it: the container statuses report the new resources and the
allocation (what the agent then follows), read from the agent's PATCH in the audit log; and during a
rollout, a container whose image an agent's patch changed restarted with it."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from bench.scale.api import MERGE, APIError, Client
from bench.scale.audit import AuditTail
from bench.scale.objects import lease, node_status

LEASE_S = 10.0
STATUS_S = 300.0


def micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Kubelets(threading.Thread):
    def __init__(self, client: Client, nodes: list[str], audit: AuditTail) -> None:
        super().__init__(name="kubelets", daemon=True)
        self.client = client
        self.nodes = nodes
        self.audit = audit
        self.stop = threading.Event()
        self.resizes_actuated = 0
        self.restart_images = False  # during a rollout: a container whose image an agent changed runs anew
        self.images_restarted = 0
        self._since = time.time()
        self._done: set[tuple[float, str]] = set()
        self.errors: list[str] = []

    def _lease(self, name: str) -> None:
        body = lease(name, micro_now())
        out = self.client.call("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}",
                               {"spec": body["spec"]}, MERGE, ok=(404,))
        if out.get("kind") == "Status":
            self.client.create(body)

    def _status(self, name: str) -> None:
        beat = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.client.call("PATCH", f"/api/v1/nodes/{name}/status", {"status": node_status(name, 16, 64, beat)}, MERGE)

    def _actuate(self, target: str) -> None:
        ns, name = target.split("/", 1)
        url = f"/api/v1/namespaces/{ns}/pods/{name}"
        p: dict[str, Any] = self.client.get(url)
        by_name = {c["name"]: c.get("resources") or {} for c in p["spec"]["containers"]}
        statuses = p["status"].get("containerStatuses") or []
        for st in statuses:
            res = by_name.get(st["name"], {})
            st["resources"] = res
            if res.get("requests"):
                st["allocatedResources"] = res["requests"]
        self.client.call("PATCH", url + "/status", {"status": {"containerStatuses": statuses}}, MERGE)
        self.resizes_actuated += 1

    def _restart(self, target: str) -> None:
        """What the kubelet does when a running pod's container image changed: that container restarts with
        the new image (a new containerID, one restart more) and is ready again."""
        ns, name = target.split("/", 1)
        url = f"/api/v1/namespaces/{ns}/pods/{name}"
        p: dict[str, Any] = self.client.get(url)
        images = {c["name"]: c["image"] for c in p["spec"]["containers"]}
        statuses = p["status"].get("containerStatuses") or []
        changed = False
        for st in statuses:
            image = images.get(st["name"])
            if image is not None and image != st["image"]:
                n = int(st.get("restartCount") or 0) + 1
                st.update(image=image, imageID=f"{image}@sha256:{'0' * 64}", restartCount=n, ready=True, started=True,
                          containerID=st["containerID"][:-8] + f"{n:08x}", state={"running": {"startedAt": micro_now()[:19] + "Z"}})
                changed = True
        if changed:
            self.client.call("PATCH", url + "/status", {"status": {"containerStatuses": statuses}}, MERGE)
            self.images_restarted += 1

    def run(self) -> None:
        next_lease = dict.fromkeys(self.nodes, 0.0)
        next_status = {n: time.monotonic() + STATUS_S * (i + 1) / len(self.nodes) for i, n in enumerate(self.nodes)}
        while not self.stop.wait(0.2):
            now = time.monotonic()
            for i, n in enumerate(self.nodes):
                try:
                    if now >= next_lease[n]:
                        self._lease(n)
                        next_lease[n] = now + LEASE_S + (i % 10) * 0.01
                    if now >= next_status[n]:
                        self._status(n)
                        next_status[n] = now + STATUS_S
                except (APIError, OSError) as err:
                    self.errors.append(str(err)[:200])
            since, self._since = self._since, time.time()
            for r in self.audit.records(since - 1.0, float("inf"), "agent:"):
                if r.resource == "pods/resize" and r.code < 300 and (r.at, r.target) not in self._done:
                    self._done.add((r.at, r.target))
                    try:
                        self._actuate(r.target)
                    except (APIError, OSError) as err:
                        self.errors.append(str(err)[:200])
                elif (self.restart_images and r.resource == "pods" and r.verb == "patch" and r.code < 300
                      and (r.at, r.target) not in self._done):
                    self._done.add((r.at, r.target))
                    try:
                        self._restart(r.target)
                    except (APIError, OSError) as err:
                        self.errors.append(str(err)[:200])
