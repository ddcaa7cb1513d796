"""The cgroup v1 node as the tests beside its real v1.36 kubelet see it (make e2e-k8s; cluster.sh).

The agent runs as users install it: the DaemonSet of deploy/overlays/realk8s, its pod's own ServiceAccount
token, the kubelet's config file through its mount. On this node the kubelet resizes containers and pod
cgroups (`pods/resize`); the agent owns the QoS tiers' cpu.shares and kubepods sizing, and the pod-level
values of its own annotation (the overlay opts the `default` namespace in, and turns VPA and rollouts on).
Every pod of these tests is pinned to `realk8s-node`; checked on the real files under
/sys/fs/cgroup/*/realk8s. Each test module takes the agent from `beside_the_kubelet` as its own
module-scoped fixture, which removes the module's workloads when the module ends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e_k8s.nodes import AGENT_NS, RK, V1_NODE, NodeAgent, kubectl, node_exec, wait_for

NODE = V1_NODE
CPU = Path("/sys/fs/cgroup/cpu/realk8s/kubepods")
PIN = {"kubernetes.io/hostname": NODE}  # every pod of these tests on the v1 node


def read(path: Path) -> str:
    return path.read_text().strip()


class Agent(NodeAgent):
    """The DaemonSet's agent pod on the v1 node, and a kubeconfig with a token bound to it (what the agent
    itself holds: the admission policy reads the node from it)."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(NODE)
        self.tmp = tmp

    def kubeconfig(self) -> str:
        pod = self.pod()
        token = kubectl("create", "token", "kube-cgroup-agent", "-n", AGENT_NS, "--duration", "1h",
                        "--bound-object-kind", "Pod", "--bound-object-name", pod["metadata"]["name"],
                        "--bound-object-uid", pod["metadata"]["uid"]).strip()
        cluster = yaml.safe_load((RK / "kubeconfig").read_text())["clusters"][0]["cluster"]
        path = self.tmp / "agent-kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "agent", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "agent"}}], "current-context": "c"}))
        path.chmod(0o600)
        return str(path)

    def kill9(self) -> None:
        """kill -9 of the agent's processes from the node; the kubelet restarts the container."""
        restarts = self._restarts()
        pids = self.host_pids()
        assert pids, "no agent process found on the node"
        node_exec(self.node, "kill", "-9", *map(str, pids))
        wait_for("the agent container restarted", lambda: self._restarts() > restarts, 120)
        wait_for("the restarted agent Ready", self.ready, 120)

    def _restarts(self) -> int:
        statuses = self.pod()["status"].get("containerStatuses") or []
        return sum(int(s.get("restartCount", 0)) for s in statuses)


def beside_the_kubelet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """The agent Ready on the v1 node once the node, the default ServiceAccount and the VPA CRD are there;
    afterwards every Deployment, StatefulSet, DaemonSet and pod of the `default` namespace is deleted."""
    wait_for("node Ready", lambda: "True" in kubectl("get", "node", NODE, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"), 180)
    wait_for("the default ServiceAccount", lambda: "default" in kubectl("get", "sa", "-o", "name"), 60)
    wait_for("the VPA CRD", lambda: "verticalpodautoscalers" in kubectl("api-resources", "--api-group", "autoscaling.k8s.io"), 60)
    a = Agent(tmp_path_factory.mktemp("agent"))
    wait_for("the agent Ready on the v1 node", a.ready, 300)
    try:
        yield a
    finally:
        kubectl("delete", "deployment,statefulset,daemonset,pod", "--all", "--wait=false")


def running(name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        pod: dict[str, Any] = json.loads(kubectl("get", "pod", name, "-o", "json"))
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    return wait_for(f"pod {name} Running", probe, 120)
