"""(e) A DaemonSet's rollout over every agent node: the shared DaemonSet (one pod on each agent node, opted in,
OnDelete) gets a new sidecar image; the keeper hands out the turns (agent.rollout.handout), each agent updates
its pod in place, the simulated kubelet restarts the changed container (kubelets.py), and a simulated
DaemonSet controller (below) writes the revisions and the status as the real one does. Measured: the time to
the last pod, what each agent received (watch events by kind) and sent (requests by verb and resource), the
keeper's, the slot Leases' writes, and the DaemonSet status changes, which with a DaemonSet watched by every
node would each have reached every agent.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.scale.api import MERGE, APIError, Client
from bench.scale.audit import tally
from bench.scale.harness import Harness, say
from bench.scale.objects import short_hash
from bench.scale.scenario import SHARED_DS, SHARED_NS

TURN = "kube-cgroup-agent.io/rollout-turn"
DS_URL = f"/apis/apps/v1/namespaces/{SHARED_NS}/daemonsets/{SHARED_DS}"
PODS_URL = f"/api/v1/namespaces/{SHARED_NS}/pods?labelSelector=app%3D{SHARED_DS}"


def revision(ds: dict[str, Any], number: int, hash_: str) -> dict[str, Any]:
    """A ControllerRevision as the DaemonSet controller writes it (its template under data.spec)."""
    meta = ds["metadata"]
    return {"apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": f"{SHARED_DS}-{hash_}", "namespace": SHARED_NS,
                         "labels": {**ds["spec"]["selector"]["matchLabels"], "controller-revision-hash": hash_},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": SHARED_DS,
                                              "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "data": {"spec": {"template": {**ds["spec"]["template"], "$patch": "replace"}}}, "revision": number}


class DaemonSetController(threading.Thread):
    """The DaemonSet controller's part a rollout needs: the status (observedGeneration, updated and ready
    pods) written whenever it changes, every 0.5 s at most."""

    def __init__(self, client: Client, hash_: str, desired: int) -> None:
        super().__init__(name="ds-controller", daemon=True)
        self.client, self.hash, self.desired = client, hash_, desired
        self.stop = threading.Event()
        self.status_writes = 0
        self.errors: list[str] = []
        self.last: dict[str, Any] = {}

    def status(self) -> dict[str, Any]:
        ds = self.client.get(DS_URL)
        pods = self.client.get(PODS_URL)["items"]
        updated = [p for p in pods if (p["metadata"].get("labels") or {}).get("controller-revision-hash") == self.hash]
        ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
        return {"observedGeneration": ds["metadata"]["generation"], "desiredNumberScheduled": self.desired,
                "currentNumberScheduled": len(pods), "numberMisscheduled": 0, "updatedNumberScheduled": len(updated),
                "numberReady": len(ready), "numberAvailable": len(ready), "numberUnavailable": self.desired - len(ready)}

    def run(self) -> None:
        while not self.stop.wait(0.5):
            try:
                st = self.status()
                if st != self.last:
                    self.client.call("PATCH", DS_URL + "/status", {"status": st}, MERGE)
                    self.last = st
                    self.status_writes += 1
            except (APIError, OSError) as err:
                self.errors.append(str(err)[:200])


def rollout_step(h: Harness, timeout_s: float) -> dict[str, Any]:
    """Roll the shared DaemonSet's sidecar image over the running agents' nodes; see the module."""
    assert h.audit is not None and h.kubelets is not None
    c = h.client
    ds = c.get(DS_URL)
    old = short_hash(SHARED_DS)  # what its pods were created at (scenario.own)
    c.create(revision(ds, 1, old))
    containers = ds["spec"]["template"]["spec"]["containers"]
    image = containers[-1]["image"] + "-2"
    patched = c.call("PATCH", DS_URL, {"spec": {"template": {"spec": {"containers": [
        {"name": containers[-1]["name"], "image": image}]}}}}, "application/strategic-merge-patch+json")
    new = short_hash(SHARED_DS, image)
    c.create(revision(patched, 2, new))
    nodes = sorted(h.agents)
    ctrl = DaemonSetController(c, new, len(h.sims))
    h.kubelets.restart_images = True
    say(f"DaemonSet rollout over {len(nodes)} agent nodes ...")
    a = h.snapshot()
    ctrl.start()
    t0 = time.time()
    done_at: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pods = c.get(PODS_URL)["items"]
        for p in pods:
            if p["metadata"]["labels"].get("controller-revision-hash") == new and p["spec"]["nodeName"] not in done_at:
                done_at[p["spec"]["nodeName"]] = time.time() - t0
        behind = [p for p in pods if p["spec"]["nodeName"] in h.agents and
                  (p["metadata"]["labels"].get("controller-revision-hash") != new or TURN in (p["metadata"].get("annotations") or {}))]
        if not behind:
            break
        time.sleep(0.5)
    took = time.time() - t0
    time.sleep(2.0)  # the last status write, the audit log's last lines
    b = h.snapshot()
    ctrl.stop.set()
    ctrl.join(5)
    h.kubelets.restart_images = False
    agents: dict[str, Any] = {}
    leases = 0
    for n in nodes:
        recs = h.audit.records(a.at, b.at, f"agent:{n}")
        slot = [r for r in recs if r.resource == "leases" and "kcg-rollout-" in r.target]
        leases += sum(1 for r in slot if r.verb in ("create", "update", "delete", "patch"))
        before = a.events.get(n, {})
        ev = {k: v - before.get(k, 0) for k, v in b.events.get(n, {}).items() if v - before.get(k, 0)}
        agents[n] = {"requests": len(recs), "by": tally(recs), "events": ev,
                     "change_events": sum(v for k, v in ev.items() if not k.startswith(("BOOKMARK", "ERROR"))),
                     "slot_requests": len(slot)}
    keeper = h.audit.records(a.at, b.at, "keeper")
    kb = a.events.get("keeper", {})
    kev = {k: v - kb.get(k, 0) for k, v in b.events.get("keeper", {}).items() if v - kb.get(k, 0)}
    updated = sorted(done_at.values())
    return {
        "nodes": len(nodes), "pods_updated": len([n for n in done_at if n in h.agents]), "complete": len(done_at) >= len(nodes),
        "took_s": round(took, 1), "per_pod_s": round(took / max(1, len(done_at)), 2),
        "updated_at_s": [round(x, 1) for x in updated],
        "ds_status_writes": ctrl.status_writes, "ds_controller_errors": ctrl.errors[:3],
        "agents": agents, "slot_lease_writes": leases,
        "keeper_requests": len(keeper), "keeper_by": tally(keeper), "keeper_events": kev,
        "kubelet_restarts": h.kubelets.images_restarted,
    }
