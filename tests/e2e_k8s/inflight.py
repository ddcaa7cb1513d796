"""Work in flight on both nodes while something happens to the cluster (the agent's upgrade, a fault):
a StatefulSet of 4 that opts in to in-place rollouts (two pods a node) and, on each node, a Deployment's pod
whose VPA the agent actuates in place. `start` begins a rollout (a new sidecar image) and a resize (a new
VPA recommendation) at once; `converged` says when every pod is at its spec and its VPA decision.

What is watched meanwhile, to count what the tables report:
- the StatefulSet's pods from a watch (tests/e2e_k8s/watching.py): most unavailable at once, deletions,
  app containers run anew;
- each VPA pod's CPU request, sampled: a value that reached the decision and then left it is *reverted*;
- the cgroup tree of each node, sampled from the node: a child's limit above its parent's (memory limit,
  CPU quota per period; the containers' memory limits summed within the pod) is an *invariant violation*.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config

from tests.e2e_k8s.nodes import (
    IMAGE,
    NODES,
    RK,
    NodeAgent,
    agent_ready,
    container_value,
    kubectl,
    node_exec,
    pod_uid,
    short,
    wait_for,
)
from tests.e2e_k8s.watching import GATE, PodWatch, Seen, ready, statefulset_unavailable

STS = "wheel"
REPLICAS = 4
SECOND = IMAGE.rsplit(":", 1)[0] + ":2"
CPU_ROUNDS = ("150m", "250m")  # the VPA targets `start` alternates between (limits twice that)


def _container(name: str) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "1000000"],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}


def _statefulset(ns: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": STS, "namespace": ns, "annotations": {
                "kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible", "kube-cgroup-agent.io/grace-period-seconds": "3"}},
            "spec": {"replicas": REPLICAS, "serviceName": STS, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": {"app": STS}}, "updateStrategy": {"type": "OnDelete"},
                     "template": {"metadata": {"labels": {"app": STS}}, "spec": {
                         "terminationGracePeriodSeconds": 1, "readinessGates": [{"conditionType": GATE}],
                         "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                                        "whenUnsatisfiable": "DoNotSchedule",
                                                        "labelSelector": {"matchLabels": {"app": STS}}}],
                         "containers": [_container("app"), _container("side")]}}}}


def _resized(ns: str, node: str) -> list[dict[str, Any]]:
    name = f"sized-{short(node)}"
    labels = {"app": name}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "1000000"],
                            "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                                          "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}}}
    vpa = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
           "metadata": {"name": name, "namespace": ns, "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"}},
           "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                    "updatePolicy": {"updateMode": "InPlace"}}}
    return [deployment, vpa]


def _milli(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)


class InFlight:
    def __init__(self, ns: str) -> None:
        self.ns = ns
        self.round = 0
        self.target = "100m"
        self.image = IMAGE

    def create(self) -> None:
        kubectl("delete", "namespace", self.ns, "--ignore-not-found", "--wait=true", "--timeout=180s", timeout=200)  # an earlier run's
        kubectl("create", "namespace", self.ns)
        kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            _statefulset(self.ns), *(o for node in NODES for o in _resized(self.ns, node))]}))
        self.wait(lambda: len(self.sts_pods()) == REPLICAS and all(ready(p) for p in self.sts_pods())
                  and all(self.vpa_pod(n) is not None for n in NODES), 300, "the StatefulSet and the VPA pods Ready")
        placed = sorted(p["spec"]["nodeName"] for p in self.sts_pods())
        assert placed == sorted(NODES * 2), placed

    def delete(self) -> None:
        kubectl("delete", "namespace", self.ns, "--wait=false", ok=(0, 1))

    @staticmethod
    def wait(probe: Callable[[], bool], timeout_s: float, what: str) -> float:
        t0 = time.monotonic()
        while not probe():
            if time.monotonic() - t0 > timeout_s:
                raise AssertionError(f"gave up waiting for {what}")
            time.sleep(1)
        return time.monotonic() - t0

    # ---- the workload's state ----

    def sts_pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(kubectl("get", "pods", "-n", self.ns, "-l", f"app={STS}", "-o", "json"))["items"]
        return items

    def vpa_pod(self, node: str) -> dict[str, Any] | None:
        """The VPA'd Deployment's pod on `node`, Running and Ready (None otherwise)."""
        items = json.loads(kubectl("get", "pods", "-n", self.ns, "-l", f"app=sized-{short(node)}", "-o", "json"))["items"]
        live = [p for p in items if not p["metadata"].get("deletionTimestamp") and ready(p)]
        return dict(live[0]) if len(live) == 1 else None

    def update_revision(self) -> str | None:
        st = json.loads(kubectl("get", "sts", STS, "-n", self.ns, "-o", "json")).get("status") or {}
        return st.get("updateRevision")

    def _at_decision(self, node: str) -> bool:
        pod = self.vpa_pod(node)
        if pod is None:
            return False
        res = pod["spec"]["containers"][0]["resources"]
        if _milli(res["requests"]["cpu"]) != _milli(self.target) or _milli(res["limits"]["cpu"]) != 2 * _milli(self.target):
            return False
        quota = container_value(node, pod["metadata"]["name"], "cpu_quota", self.ns)
        return quota == 2 * _milli(self.target) * 100  # µs per 100 ms period

    def converged(self) -> bool:
        rev = self.update_revision()
        pods = self.sts_pods()
        return (len(pods) == REPLICAS and all(p["metadata"]["labels"].get("controller-revision-hash") == rev and ready(p)
                                              and p["spec"]["containers"][1]["image"] == self.image for p in pods)
                and all(self._at_decision(n) for n in NODES))

    # ---- a rollout and a resize, started together ----

    def start(self) -> None:
        self.round += 1
        self.target = CPU_ROUNDS[self.round % 2]
        self.image = SECOND if self.image == IMAGE else IMAGE
        status = json.dumps({"status": {"recommendation": {"containerRecommendations": [
            {"containerName": "app", "target": {"cpu": self.target, "memory": "32Mi"},
             "lowerBound": {"cpu": self.target, "memory": "32Mi"}, "upperBound": {"cpu": self.target, "memory": "32Mi"}}]}}})
        for node in NODES:
            kubectl("patch", "vpa", f"sized-{short(node)}", "-n", self.ns, "--subresource", "status", "--type", "merge", "-p", status)
        kubectl("patch", "statefulset", STS, "-n", self.ns, "--type", "json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": self.image}]))

    def in_flight_at(self, t: float, seen: Seen, reverts: Reverts) -> tuple[int, int]:
        """(rollout pods, resizes) still to happen at `t` (monotonic), known afterwards from when each pod was
        first seen at its update revision (the watch) and at its decision (the sampler): asking the API at
        the moment of a fault would take longer than the agents take."""
        rev = self.update_revision()
        rollout = sum(1 for (r, _), when in seen.reached_at.items() if r == rev and when > t)
        resizes = sum(1 for when in reverts.reached_at.values() if when > t) + (len(NODES) - len(reverts.reached_at))
        return rollout, resizes

    def watch(self) -> PodWatch:
        return PodWatch(self.ns, f"app={STS}", statefulset_unavailable(STS, REPLICAS))


def in_flight(ns: str) -> Iterator[InFlight]:
    """The workload in namespace `ns` once both agents are Ready (a module's fixture); deleted afterwards."""
    for node in NODES:
        wait_for(f"the agent on {node} Ready", lambda n=node: agent_ready(n), 300, 2)  # type: ignore[misc]
    f = InFlight(ns)
    f.create()
    try:
        yield f
    finally:
        f.delete()


@dataclass
class Reverts:
    """Each VPA pod's CPU request sampled four times a second: once at the decision, never away from it again."""

    flight: InFlight
    samples: int = 0
    reverted: list[str] = field(default_factory=list)
    reached_at: dict[str, float] = field(default_factory=dict)  # pod: when its request was first seen at the decision
    _reached: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Reverts:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        config.load_kube_config(str(RK / "kubeconfig"))
        core = client.CoreV1Api()
        last = None
        while not self._stop.wait(0.25):
            target = _milli(self.flight.target)
            if target != last:  # a new decision: reached afresh
                last, self._reached, self.reached_at = target, set(), {}
            try:
                got = core.list_namespaced_pod(self.flight.ns, label_selector="app in (sized-v1,sized-v2)",
                                               _preload_content=False, _request_timeout=5)
                items = json.loads(got.data)["items"]
            except Exception:  # the API server away: nothing to sample
                continue
            self.samples += 1
            for p in items:
                name = p["metadata"]["name"]
                cpu = _milli(p["spec"]["containers"][0]["resources"]["requests"]["cpu"])
                if cpu == target:
                    self._reached.add(name)
                    self.reached_at.setdefault(name, time.monotonic())
                elif name in self._reached:
                    self.reverted.append(f"{name}: {cpu}m after {target}m")
                    self._reached.discard(name)


_INVARIANT = r"""
import json, os, re, sys
v2 = sys.argv[1] == "v2"
POD = re.compile(r"(^|-)pod[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}(\.slice)?$")
def read(d, f):
    try:
        with open(os.path.join(d, f)) as h:
            return h.read().split()
    except OSError:
        return None
def memory(d):
    v = read(d, "memory.max" if v2 else "memory.limit_in_bytes")
    if not v or v[0] == "max" or int(v[0]) >= 1 << 62:
        return None
    return int(v[0])
def cpu(d):
    if v2:
        v = read(d, "cpu.max")
        return None if not v or v[0] == "max" else int(v[0]) / int(v[1])
    q, p = read(d, "cpu.cfs_quota_us"), read(d, "cpu.cfs_period_us")
    return None if not q or not p or int(q[0]) < 0 else int(q[0]) / int(p[0])
bad, dirs = [], 0
for kind, root in json.loads(sys.argv[2]):
    get = memory if kind == "memory" else cpu
    for d, subdirs, _ in os.walk(root):
        dirs += 1
        mine = get(d)
        children = [get(os.path.join(d, s)) for s in subdirs]
        for s, c in zip(subdirs, children):
            if mine is not None and c is not None and c > mine * 1.0001:
                bad.append(f"{kind} {os.path.join(d, s)}: {c} above its parent's {mine}")
        # a pod's containers together within the pod (a limited pod's containers are all limited; the
        # sandbox's cgroup is not)
        held = sum(c for c in children if c is not None)
        if kind == "memory" and mine is not None and POD.search(os.path.basename(d)) and held > mine:
            bad.append(f"memory {d}: its containers' {held} above its {mine}")
print(json.dumps({"dirs": dirs, "bad": bad}))
"""
ROOTS = {
    "v1": [["memory", "/sys/fs/cgroup/memory/realk8s/kubepods"], ["cpu", "/sys/fs/cgroup/cpu/realk8s/kubepods"]],
    "v2": [["memory", "/sys/fs/cgroup/kubepods.slice"], ["cpu", "/sys/fs/cgroup/kubepods.slice"]],
}


@dataclass
class Invariant:
    """The nodes' cgroup trees sampled from the nodes every `every_s`: no child above its parent."""

    every_s: float = 2.0
    samples: dict[str, int] = field(default_factory=lambda: {n: 0 for n in NODES})
    violations: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Invariant:
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in NODES]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _run(self, node: str) -> None:
        kind = short(node)
        while not self._stop.wait(self.every_s):
            try:
                got = json.loads(node_exec(node, "python3", "-c", _INVARIANT, kind, json.dumps(ROOTS[kind]), timeout=30))
            except Exception:  # the node away (a reboot): nothing to sample
                continue
            self.samples[node] += 1
            self.violations.extend(f"{node}: {b}" for b in got["bad"])


def kubelet_owned_writes(agent: NodeAgent, since_s: float) -> list[str]:
    """Pod and container paths among what the agent logged it changed (the kubelet owns them here)."""
    try:
        lines = agent.lines(since_s)
    except AssertionError:  # no agent pod on the node right now
        return []
    return [p for line in lines if line.get("event") == "reconcile" for p in line.get("changed", []) if pod_uid(p) is not None]


@dataclass
class Drift:
    """Values someone else changed and the agents put back, from their logs: *restored* once (a
    restarting kubelet resets the tiers to its start-up values once), or *fought* over (put back again
    after a second change, or given up on: two writers going back and forth)."""

    restored: list[str] = field(default_factory=list)
    fought: list[str] = field(default_factory=list)
    _seen: set[tuple[str, str, str]] = field(default_factory=set)

    def add(self, lines: list[dict[str, Any]]) -> None:
        for line in lines:
            key = (str(line.get("timestamp")), str(line.get("path")), str(line.get("event")))
            if key in self._seen:  # read twice (overlapping reads of one agent's log)
                continue
            self._seen.add(key)
            if line.get("event") == "drift.reapplied":
                (self.fought if int(line.get("reverts") or 0) >= 2 else self.restored).append(str(line.get("path")))
            elif line.get("event") == "drift.yielded":
                self.fought.append(str(line.get("path")))

    def read(self, since_s: float) -> None:
        """Both agents' lines of the last `since_s` seconds."""
        for node in NODES:
            try:
                self.add(NodeAgent(node).lines(since_s))
            except AssertionError:  # no agent pod on the node right now
                continue


