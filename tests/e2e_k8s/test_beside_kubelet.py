"""The agent beside a real v1.36 kubelet on the cgroup v1 node (make e2e-k8s; tests/e2e_k8s/cluster.sh).

The agent runs as users install it: the DaemonSet of deploy/overlays/realk8s, its pod's own ServiceAccount
token, the kubelet's config file through its mount. On this node the kubelet resizes containers and pod
cgroups (`pods/resize`); the agent owns the QoS tiers' cpu.shares and kubepods sizing, and the pod-level
values of its own annotation (the overlay opts the `default` namespace in, and turns VPA and rollouts on).
Every pod here is pinned to `realk8s-node`; checked on the real files under /sys/fs/cgroup/*/realk8s:

- a `pods/resize` of a running pod is applied by the kubelet; the agent moves the Burstable tier within
  seconds (the kubelet: up to a minute later) and never writes the kubelet's values (drift counters 0);
- a pod-level-annotation change is applied by the agent to the pod cgroup, and one beyond the namespace's
  LimitRange is refused with an Event;
- kill -9 of the agent's process in the middle of a resize loses nothing: the restarted container converges;
- VPA in place: a Deployment's pod and a VPA that opts in; a recommendation patched into the VPA's status
  is applied in place through pods/resize by the kubelet (limits proportional, restartCount 0, same pod
  UID); the panic button holds back a later one, and releasing it applies it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.utils import parse_quantity

from bench import provenance
from tests.e2e_k8s.nodes import (
    AGENT_CONFIG,
    AGENT_NS,
    RK,
    V1_NODE,
    NodeAgent,
    kubectl,
    needs_cluster,
    node_exec,
    wait_for,
)

KUBECTL = str(RK / "bin" / "kubectl")
NODE = V1_NODE
CPU = Path("/sys/fs/cgroup/cpu/realk8s/kubepods")
ROOT = Path(__file__).resolve().parents[2]
IMAGE = "docker.io/library/cri-e2e-busybox:1"
PIN = {"kubernetes.io/hostname": NODE}  # every pod of this module on the v1 node

pytestmark = needs_cluster


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


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    wait_for("node Ready", lambda: "True" in kubectl("get", "node", NODE, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"), 180)
    wait_for("the default ServiceAccount", lambda: "default" in kubectl("get", "sa", "-o", "name"), 60)
    wait_for("the VPA CRD", lambda: "verticalpodautoscalers" in kubectl("api-resources", "--api-group", "autoscaling.k8s.io"), 60)
    a = Agent(tmp_path_factory.mktemp("agent"))
    wait_for("the agent Ready on the v1 node", a.ready, 300)
    try:
        yield a
    finally:
        kubectl("delete", "deployment,statefulset,daemonset,pod", "--all", "--wait=false")


def _pod(name: str, cpu_request: str, cpu_limit: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": NODE,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "app",
                        "image": IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "1000000"],
                        "resources": {
                            "requests": {"cpu": cpu_request, "memory": "32Mi"},
                            "limits": {"cpu": cpu_limit, "memory": "64Mi"},
                        },
                    }
                ],
            },
        }
    )


def _running(name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        pod: dict[str, Any] = json.loads(kubectl("get", "pod", name, "-o", "json"))
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    return wait_for(f"pod {name} Running", probe, 120)


def _pod_dir(pod: dict[str, Any]) -> Path:
    return CPU / "burstable" / f"pod{pod['metadata']['uid']}"


def _resize(name: str, cpu_request: str, cpu_limit: str) -> float:
    patch = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu_request, "memory": "32Mi"}, "limits": {"cpu": cpu_limit, "memory": "64Mi"}}}]}}
    t0 = time.monotonic()
    kubectl("patch", "pod", name, "--subresource", "resize", "--type", "strategic", "-p", json.dumps(patch))
    return t0


def _others_milli(but: str = "web") -> int:
    """The CPU requests of the node's other Burstable pods (the agent's own among them), which the tier
    counts too; waits until no pod of the node is terminating, so the sum is what the kubelet counts."""
    def settled() -> list[dict[str, Any]] | None:
        # a namespace being deleted (another module's) marks its pods a moment later: wait for it to go
        if "Terminating" in kubectl("get", "namespaces", "-o", "jsonpath={.items[*].status.phase}"):
            return None
        pods = json.loads(kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={NODE}", "-o", "json"))["items"]
        return None if any(p["metadata"].get("deletionTimestamp") for p in pods) else (pods or None)

    total = 0
    for p in wait_for("no terminating pod on the node", settled, 120):
        if p["metadata"]["name"] == but or p.get("status", {}).get("qosClass") != "Burstable":
            continue
        if p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for c in p["spec"]["containers"]:
            total += int(parse_quantity(c.get("resources", {}).get("requests", {}).get("cpu", "0")) * 1000)
    return total


def _shares(milli: int) -> str:
    """The Burstable tier's cpu.shares with `milli` more than the other Burstable pods request."""
    return str(max(2, (OTHERS[0] + milli) * 1024 // 1000))


OTHERS = [0]  # _others_milli() when the module's first test starts


def test_a_pods_resize_is_the_kubelets_and_the_agent_moves_the_tier_without_reverting_anything(agent: Agent) -> None:
    OTHERS[0] = _others_milli()
    drift_before = agent.drift()  # the agent has run since the cluster came up: count this test's window
    kubectl("apply", "-f", "-", stdin=_pod("web", "100m", "200m"))
    pod = _running("web")
    burstable = CPU / "burstable" / "cpu.shares"
    wait_for("the Burstable tier at 100m", lambda: read(burstable) == _shares(100), 30)

    t0 = _resize("web", "300m", "400m")
    container_quota = None

    def kubelet_wrote() -> bool:
        nonlocal container_quota
        for d in _pod_dir(pod).iterdir():
            if d.is_dir() and (d / "cpu.cfs_quota_us").exists() and read(d / "cpu.cfs_quota_us") == "40000":
                container_quota = d / "cpu.cfs_quota_us"
                return True
        return False

    wait_for("the kubelet's container write", kubelet_wrote, 60)
    wait_for("the agent's tier write", lambda: read(burstable) == _shares(300), 30)
    tier_ms = [(time.monotonic() - t0) * 1000]
    assert read(_pod_dir(pod) / "cpu.cfs_quota_us") == "40000"  # the kubelet's pod value, kept
    for cpu in ("150m", "300m", "150m", "300m"):  # more resizes, for the figure
        t0 = _resize("web", cpu, "400m")
        wait_for(f"the agent's tier at {cpu}", lambda cpu=cpu: read(burstable) == _shares(int(cpu[:-1])), 30)  # type: ignore[misc]
        tier_ms.append((time.monotonic() - t0) * 1000)
    time.sleep(12)  # past one resync of the agent
    assert agent.drift() == drift_before, agent.counters("kube_cgroup_agent_drift_total")
    assert read(burstable) == _shares(300)
    assert [e for e in agent.lines() if e.get("event") == "reconcile"], "the agent logged no pass"
    print(f"\ne2e-k8s: pods/resize -> Burstable cpu.shares current after {', '.join(f'{t:.0f}' for t in tier_ms)} ms")
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        kubelet = kubectl("get", "node", NODE, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}")
        provenance.record(Path(out), "resize", lambda data: data.update(
            kubelet=kubelet, resize_to_tier_ms=tier_ms, cluster_up_s=float(os.environ.get("KCG_CLUSTER_UP_S", "0")),
            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())))


def test_a_pod_level_annotation_change_is_applied_by_the_agent(agent: Agent) -> None:
    pod = _running("web")
    quota = _pod_dir(pod) / "cpu.cfs_quota_us"
    kubelets = read(quota)
    # below the container's limit (400m): refused for that pod alone, with an Event; nothing written
    low = json.dumps({"limits": {"cpu": "300m"}})
    kubectl("annotate", "pod", "web", "--overwrite", f"kube-cgroup-agent.io/pod-resources={low}")
    wait_for(
        "the InvalidPodLevelLimits Event",
        lambda: "InvalidPodLevelLimits" in kubectl("get", "events", "--field-selector", "involvedObject.name=web", "-o", "json"),
        30,
    )
    assert read(quota) == kubelets
    value = json.dumps({"limits": {"cpu": "1"}})  # above every container limit this module sets
    kubectl("annotate", "pod", "web", "--overwrite", f"kube-cgroup-agent.io/pod-resources={value}")
    wait_for("the agent's pod-level quota", lambda: read(quota) == "100000", 30)


def test_a_pod_level_annotation_beyond_the_namespaces_limitrange_is_refused(agent: Agent) -> None:
    """The LimitRange bound against the real API server, with only deploy/'s RBAC (list/watch limitranges):
    a pod-level limit above `type: Pod` max is refused with a LimitRangeExceeded Event and nothing written;
    one within it is applied. The LimitRange is removed after, since the API server applies it at admission."""
    pod = _running("web")
    quota = _pod_dir(pod) / "cpu.cfs_quota_us"
    before = read(quota)
    lr = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "pod-max", "namespace": "default"},
          "spec": {"limits": [{"type": "Pod", "max": {"cpu": "1500m"}}]}}
    kubectl("apply", "-f", "-", stdin=json.dumps(lr))
    try:
        wait_for("the agent's LimitRange watch to see it",
                 lambda: [e for e in agent.lines() if e.get("event") == "limitranges.changed" and "default" in e.get("namespaces", [])], 30)
        kubectl("annotate", "pod", "web", "--overwrite", f"kube-cgroup-agent.io/pod-resources={json.dumps({'limits': {'cpu': '2'}})}")
        events = wait_for(
            "the LimitRangeExceeded Event",
            lambda: [e for e in json.loads(kubectl("get", "events", "--field-selector", "involvedObject.name=web", "-o", "json"))["items"]
                     if e.get("reason") == "LimitRangeExceeded"],
            30,
        )
        assert "LimitRange default/pod-max" in events[0]["message"] and "1500m" in events[0]["message"], events[0]["message"]
        time.sleep(2)
        assert read(quota) == before, "nothing of the refused pod is written"
        kubectl("annotate", "pod", "web", "--overwrite", f"kube-cgroup-agent.io/pod-resources={json.dumps({'limits': {'cpu': '1200m'}})}")
        wait_for("the pod-level quota within the bound", lambda: read(quota) == "120000", 30)
    finally:
        kubectl("delete", "limitrange", "pod-max", "--wait=false")


def test_kill_9_mid_resize_loses_nothing(agent: Agent) -> None:
    _running("web")
    burstable = CPU / "burstable" / "cpu.shares"
    _resize("web", "500m", "600m")
    agent.kill9()
    wait_for("the tier after the restart", lambda: read(burstable) == _shares(500), 60)
    time.sleep(12)
    assert agent.drift() == 0, agent.counters("kube_cgroup_agent_drift_total")


def _vpa_status(cpu: str, lower: str, upper: str) -> str:
    return json.dumps({"status": {"recommendation": {"containerRecommendations": [
        {"containerName": "app", "target": {"cpu": cpu, "memory": "32Mi"}, "lowerBound": {"cpu": lower, "memory": "16Mi"},
         "upperBound": {"cpu": upper, "memory": "64Mi"}}]}}})


def _container_dir(pod: dict[str, Any], controller: str) -> Path | None:
    """The app container's cgroup (by its ID in the pod status; the sandbox has a directory there too)."""
    name = pod["metadata"]["name"]
    statuses = json.loads(kubectl("get", "pod", name, "-o", "json"))["status"].get("containerStatuses") or []
    cid = (statuses[0].get("containerID") or "").partition("://")[2] if statuses else ""
    d = Path(f"/sys/fs/cgroup/{controller}/realk8s/kubepods/burstable/pod{pod['metadata']['uid']}") / cid
    return d if cid and d.is_dir() else None


def _container_quota(pod: dict[str, Any]) -> Path | None:
    d = _container_dir(pod, "cpu")
    return d / "cpu.cfs_quota_us" if d is not None else None


def test_vpa_in_place_through_the_kubelet_with_the_panic_button(agent: Agent) -> None:
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "shop"}}, "template": {
            "metadata": {"labels": {"app": "shop"}},
            "spec": {"nodeSelector": PIN, "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "app", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "1000000"],
                "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(deployment))
    name = wait_for("the Deployment's pod", lambda: kubectl("get", "pods", "-l", "app=shop", "-o", "jsonpath={.items[0].metadata.name}"), 60)
    pod = _running(name)
    uid = pod["metadata"]["uid"]
    quota = wait_for("the container cgroup", lambda: _container_quota(pod), 30)
    assert read(quota) == "20000"
    vpa = {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "shop", "namespace": "default", "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"}},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "shop"}, "updatePolicy": {"updateMode": "InPlace"}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(vpa))

    t0 = time.monotonic()
    kubectl("patch", "vpa", "shop", "--subresource", "status", "--type", "merge", "-p", _vpa_status("300m", "250m", "400m"))
    wait_for("the kubelet writing the recommended limit (600m)", lambda: read(quota) == "60000", 60)
    vpa_ms = (time.monotonic() - t0) * 1000
    after = json.loads(kubectl("get", "pod", name, "-o", "json"))
    assert after["metadata"]["uid"] == uid  # the same pod: in place, not evicted
    assert after["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "600m"  # ratio 2 kept
    assert after["status"]["containerStatuses"][0]["restartCount"] == 0

    kubectl("label", "node", NODE, "kube-cgroup-agent.io/vpa=off")
    wait_for("the panic button", lambda: [e for e in agent.lines() if e.get("event") == "vpa.panic_button" and e.get("enabled") is False], 10)
    kubectl("patch", "vpa", "shop", "--subresource", "status", "--type", "merge", "-p", _vpa_status("500m", "450m", "600m"))
    wait_for("the held-back decision", lambda: [e for e in agent.lines() if e.get("event") == "vpa.decision" and "panic" in str(e.get("reason"))], 30)
    time.sleep(2)
    assert read(quota) == "60000"
    kubectl("label", "node", NODE, "kube-cgroup-agent.io/vpa-")
    wait_for("the released recommendation (limit 1 CPU)", lambda: read(quota) == "100000", 60)
    assert json.loads(kubectl("get", "pod", name, "-o", "json"))["metadata"]["uid"] == uid
    print(f"\ne2e-k8s: VPA status patch -> container cgroup written by the kubelet after {vpa_ms:.0f} ms")
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        provenance.record(Path(out), "vpa", lambda data: data.update(vpa_to_cgroup_ms=vpa_ms))


def _memory_limit(pod: dict[str, Any]) -> Path | None:
    d = _container_dir(pod, "memory")
    return d / "memory.limit_in_bytes" if d is not None else None


def test_vpa_never_shrinks_memory_below_what_the_container_holds(agent: Agent) -> None:
    """The container really holds 150 MiB (tail keeping what head wrote); the recommendation would take
    its limit from 400Mi to 100Mi. The pods/resize the agent sends stops at the working set + 10 %."""
    hold = "(head -c 150m /dev/zero; sleep 1000000) | tail & sleep 1000000"
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "holder", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "holder"}}, "template": {
            "metadata": {"labels": {"app": "holder"}},
            "spec": {"nodeSelector": PIN, "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "app", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sh", "-c", hold],
                "resources": {"requests": {"cpu": "100m", "memory": "200Mi"}, "limits": {"cpu": "200m", "memory": "400Mi"}}}]}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(deployment))
    name = wait_for("the holder's pod", lambda: kubectl("get", "pods", "-l", "app=holder", "-o", "jsonpath={.items[0].metadata.name}"), 60)
    pod = _running(name)
    limit = wait_for("the container cgroup", lambda: _memory_limit(pod), 30)
    usage = limit.with_name("memory.usage_in_bytes")
    wait_for("150 MiB held", lambda: int(read(usage)) > 150 << 20, 30)
    vpa = {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "holder", "namespace": "default", "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"}},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "holder"}, "updatePolicy": {"updateMode": "InPlace"}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(vpa))
    status = {"status": {"recommendation": {"containerRecommendations": [
        {"containerName": "app", "target": {"cpu": "100m", "memory": "50Mi"}, "lowerBound": {"cpu": "50m", "memory": "20Mi"},
         "upperBound": {"cpu": "200m", "memory": "100Mi"}}]}}}
    kubectl("patch", "vpa", "holder", "--subresource", "status", "--type", "merge", "-p", json.dumps(status))

    def resized() -> int | None:
        spec = json.loads(kubectl("get", "pod", name, "-o", "json"))["spec"]["containers"][0]["resources"]
        lim = spec["limits"]["memory"]
        return int(lim) if lim.isdigit() and int(lim) != 400 << 20 else None

    new_limit = wait_for("the pods/resize with the held limit", resized, 60)
    held = [e for e in agent.lines() if e.get("event") == "vpa.decision" and e.get("pod") == f"default/{name}" and e.get("held")]
    assert held, "the decision names the held limit"
    assert new_limit > 150 << 20 and new_limit < 400 << 20  # above what it holds, below where it was
    wait_for("the kubelet's write", lambda: int(read(limit)) == new_limit - new_limit % 4096 or int(read(limit)) == new_limit, 60)
    assert int(read(usage)) <= int(read(limit))
    assert json.loads(kubectl("get", "pod", name, "-o", "json"))["status"]["containerStatuses"][0]["restartCount"] == 0


def test_vpa_infeasible_on_the_real_kubelet_is_reported_and_explained(agent: Agent) -> None:
    """A 64-CPU recommendation on this 2-CPU node: the pods/resize is sent, the kubelet marks it
    PodResizePending/Infeasible, the agent puts one VPAResizeInfeasible Event on the pod and holds a
    higher recommendation back; `explain`, reading the same objects from the API, says so."""
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "greedy", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "greedy"}}, "template": {
            "metadata": {"labels": {"app": "greedy"}},
            "spec": {"nodeSelector": PIN, "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "app", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "1000000"],
                "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}}]}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(deployment))
    name = wait_for("the Deployment's pod", lambda: kubectl("get", "pods", "-l", "app=greedy", "-o", "jsonpath={.items[0].metadata.name}"), 60)
    _running(name)
    vpa = {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "greedy", "namespace": "default", "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"}},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "greedy"}, "updatePolicy": {"updateMode": "InPlace"}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(vpa))
    kubectl("patch", "vpa", "greedy", "--subresource", "status", "--type", "merge", "-p", _vpa_status("64", "60", "70"))

    # v1.36 refuses it at the request (403 "node didn't have enough allocatable resources"); a kubelet
    # that takes it sets PodResizePending/Infeasible instead: either way, one Event naming the VPA
    events = wait_for("the VPAResizeInfeasible Event", lambda: json.loads(kubectl(
        "get", "events", "--field-selector", f"reason=VPAResizeInfeasible,involvedObject.name={name}", "-o", "json"))["items"], 60)
    assert len(events) == 1 and "VPA default/greedy" in events[0]["message"] and events[0]["type"] == "Warning"
    print(f"\ne2e-k8s: VPAResizeInfeasible: {events[0]['message']}")

    def attempts() -> int:
        return len([e for e in agent.lines() if e.get("event") == "vpa.resize_blocked" and e.get("pod") == f"default/{name}"])

    kubectl("patch", "vpa", "greedy", "--subresource", "status", "--type", "merge", "-p", _vpa_status("80", "75", "85"))
    wait_for("the higher one held back", lambda: [e for e in agent.lines() if e.get("event") == "vpa.decision"
                                                  and e.get("pod") == f"default/{name}" and "lowers" in str(e.get("reason"))], 30)
    time.sleep(2)
    assert attempts() == 1 and not [e for e in agent.lines() if e.get("event") == "vpa.resize_failed" and e.get("pod") == f"default/{name}"]
    explained = agent.exec("kube-cgroup-agent", "explain", f"default/{name}", "--config", AGENT_CONFIG)  # in its pod
    print(explained)
    assert "VPA default/greedy: targetRef Deployment/greedy, updateMode InPlace, opted in" in explained
    assert "last resize: Infeasible (" in explained and "lowers" in explained
    # a lower recommendation is sent, and applied in place by the kubelet
    kubectl("patch", "vpa", "greedy", "--subresource", "status", "--type", "merge", "-p", _vpa_status("300m", "250m", "400m"))
    wait_for("the lower recommendation in the spec", lambda: json.loads(kubectl("get", "pod", name, "-o", "json"))
             ["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "300m", 60)
    kubectl("delete", "deployment", "greedy", "--wait=false")
    kubectl("delete", "vpa", "greedy", "--wait=false")


def _api_requests() -> float:
    """Every request the API server has served so far but watches (apiserver_request_total)."""
    total = 0.0
    for line in kubectl("get", "--raw", "/metrics").splitlines():
        if line.startswith("apiserver_request_total{") and 'verb="WATCH"' not in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _downtime(pod: dict[str, Any], container: str) -> float:
    """Seconds between the container's previous run ending and its current one starting (1 s resolution)."""
    [cs] = [c for c in pod["status"]["containerStatuses"] if c["name"] == container]
    return _stamp(cs["state"]["running"]["startedAt"]) - _stamp(cs["lastState"]["terminated"]["finishedAt"])


def _new_revision(name: str, seen: tuple[str, ...]) -> str | None:
    """The StatefulSet's update revision once it differs from its current one and from `seen`."""
    st = json.loads(kubectl("get", "sts", name, "-o", "json")).get("status") or {}
    rev = st.get("updateRevision")
    return str(rev) if rev and rev != st.get("currentRevision") and rev not in seen else None


def _sts_pods(app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kubectl("get", "pods", "-l", f"app={app}", "-o", "json"))["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _runs(pod: dict[str, Any]) -> dict[str, tuple[str, int, str]]:
    return {c["name"]: (c.get("containerID", ""), c["restartCount"], c["image"]) for c in pod["status"].get("containerStatuses") or []}


def test_a_statefulset_sidecar_image_update_restarts_only_that_container(agent: Agent) -> None:
    """Seed 004 on the real cluster: an OnDelete StatefulSet that opts in; a new sidecar image is rolled out
    by the agent in place (web-1 then web-0), the app container never restarts, the pods keep their UIDs,
    the controller counts them updated; an env change then recreates them; the admission policy refuses
    the agent's token any other change."""
    second = IMAGE.rsplit(":", 1)[0] + ":2"
    sock = RK / "state" / "containerd" / "containerd.sock"
    subprocess.run(["ctr", "-a", str(sock), "-n", "k8s.io", "images", "tag", "--force", IMAGE, second], check=True, capture_output=True)

    def container(name: str, image: str) -> dict[str, Any]:
        return {"name": name, "image": image, "imagePullPolicy": "Never", "command": ["sleep", "1000000"]}

    sts = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "default", "annotations": {
            "kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible", "kube-cgroup-agent.io/grace-period-seconds": "1"}},
        "spec": {"replicas": 2, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}}, "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                     "nodeSelector": PIN, "terminationGracePeriodSeconds": 1, "readinessGates": [{"conditionType": "kube-cgroup-agent.io/InPlaceUpdateReady"}],
                     "containers": [container("app", IMAGE), container("side", IMAGE)]}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(sts))
    wait_for("both pods Ready (the agent opened the readiness gate)", lambda: len(pods := _sts_pods("web")) == 2 and all(_ready(p) for p in pods), 120)
    before = {p["metadata"]["name"]: (p["metadata"]["uid"], _runs(p)) for p in _sts_pods("web")}

    time.sleep(5)  # quiet: the pods' start-up writes are done
    r0 = _api_requests()
    t0 = time.monotonic()
    kubectl("patch", "statefulset", "web", "--type", "json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": second}]))
    update = wait_for("the update revision", lambda: _new_revision("web", ()), 30)

    def updated() -> bool:  # (the two tags name one image: the status may report either name)
        pods = _sts_pods("web")
        return all(p["metadata"]["labels"].get("controller-revision-hash") == update and _ready(p)
                   and p["spec"]["containers"][1]["image"] == second
                   and _runs(p)["side"][0] != before[p["metadata"]["name"]][1]["side"][0] for p in pods)

    wait_for("both pods updated in place and Ready", updated, 180)
    in_place_s = time.monotonic() - t0
    wait_for("the controller counting them updated", lambda: json.loads(kubectl("get", "sts", "web", "-o", "json"))["status"].get("updatedReplicas") == 2, 60)
    time.sleep(5)  # the writes that follow (status, endpoints) counted too
    in_place_requests = _api_requests() - r0
    for p in _sts_pods("web"):
        uid, runs_before = before[p["metadata"]["name"]]
        assert p["metadata"]["uid"] == uid  # patched, not recreated
        assert _runs(p)["app"][:2] == runs_before["app"][:2]  # the app: same container, no restart
        assert _runs(p)["side"][0] != runs_before["side"][0]  # the sidecar: a new container with the new image
    patched = [e["pod"] for e in agent.lines() if e.get("event") == "rollout.patched" and e.get("workload") == "StatefulSet/default/web"]
    assert patched == ["web-1", "web-0"]  # the highest ordinal first
    down = [_downtime(p, "side") for p in _sts_pods("web")]  # the sidecar's stop -> start, as the kubelet reports it

    # the admission policy: the agent's token may not change anything else on a pod
    agent_kubeconfig = agent.kubeconfig()
    denied = subprocess.run([KUBECTL, "--kubeconfig", agent_kubeconfig, "label", "pod", "web-0", "app=other", "--overwrite"],
                            capture_output=True, text=True, timeout=60)
    assert denied.returncode != 0 and "kube-cgroup-agent may change only the labels" in denied.stderr, denied.stderr
    denied = subprocess.run([KUBECTL, "--kubeconfig", agent_kubeconfig, "patch", "pod", "web-0", "-p", '{"spec":{"activeDeadlineSeconds":5}}'],
                            capture_output=True, text=True, timeout=60)
    assert denied.returncode != 0 and "only container images" in denied.stderr, denied.stderr

    # anything beyond images: Recreate (deleted, recreated by the controller at the update revision)
    time.sleep(5)
    r1 = _api_requests()
    t1 = time.monotonic()
    kubectl("patch", "statefulset", "web", "--type", "json", "-p", json.dumps(
        [{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [{"name": "MODE", "value": "fast"}]}]))
    update2 = wait_for("the next update revision", lambda: _new_revision("web", (update,)), 30)
    wait_for("both pods recreated and Ready", lambda: all(p["metadata"]["labels"].get("controller-revision-hash") == update2 and _ready(p)
                                                          for p in _sts_pods("web")) and len(_sts_pods("web")) == 2, 240)
    recreate_s = time.monotonic() - t1
    time.sleep(5)
    recreate_requests = _api_requests() - r1
    assert all(p["metadata"]["uid"] != before[p["metadata"]["name"]][0] for p in _sts_pods("web"))
    print(f"\ne2e-k8s: StatefulSet of 2, sidecar image: all pods updated in place in {in_place_s:.1f} s ({in_place_requests:.0f} API requests); "
          f"env change, recreated in {recreate_s:.1f} s ({recreate_requests:.0f} API requests)")
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        provenance.record(Path(out), "statefulset", lambda data: data.update(
            sts_in_place_s=in_place_s, sts_recreate_s=recreate_s, sts_sidecar_down_s=down,
            sts_in_place_api_requests=in_place_requests, sts_recreate_api_requests=recreate_requests))


def test_a_daemonset_sidecar_image_update_is_in_place_and_an_env_change_recreates(agent: Agent) -> None:
    """The same for a DaemonSet (its one pod on this node): a new sidecar image in place, the pod's UID and
    its app container kept, the controller counting it updated; an env change recreates the pod."""
    second = IMAGE.rsplit(":", 1)[0] + ":2"
    sock = RK / "state" / "containerd" / "containerd.sock"
    subprocess.run(["ctr", "-a", str(sock), "-n", "k8s.io", "images", "tag", "--force", IMAGE, second], check=True, capture_output=True)

    def container(name: str, image: str) -> dict[str, Any]:
        return {"name": name, "image": image, "imagePullPolicy": "Never", "command": ["sleep", "1000000"]}

    ds = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "logd", "namespace": "default", "annotations": {"kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible"}},
        "spec": {"selector": {"matchLabels": {"app": "logd"}}, "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"app": "logd"}}, "spec": {
                     "nodeSelector": PIN, "terminationGracePeriodSeconds": 1, "readinessGates": [{"conditionType": "kube-cgroup-agent.io/InPlaceUpdateReady"}],
                     "containers": [container("app", IMAGE), container("side", IMAGE)]}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(ds))
    wait_for("the DaemonSet's pod Ready", lambda: len(pods := _sts_pods("logd")) == 1 and _ready(pods[0]), 120)
    [before] = _sts_pods("logd")
    kubectl("patch", "daemonset", "logd", "--type", "json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": second}]))

    def status() -> dict[str, Any]:
        got: dict[str, Any] = json.loads(kubectl("get", "ds", "logd", "-o", "json"))
        return got

    wait_for("the controller counting it updated", lambda: (st := status()["status"]).get("updatedNumberScheduled") == 1
             and status()["metadata"]["generation"] == st.get("observedGeneration") and _ready(_sts_pods("logd")[0])
             and _sts_pods("logd")[0]["spec"]["containers"][1]["image"] == second
             and _runs(_sts_pods("logd")[0])["side"][0] != _runs(before)["side"][0], 120)
    wait_for("the agent's update done", lambda: [e for e in agent.lines() if e.get("event") == "rollout.done" and e.get("workload") == "DaemonSet/default/logd"], 60)
    [after] = _sts_pods("logd")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert _runs(after)["app"][:2] == _runs(before)["app"][:2]
    assert _runs(after)["side"][0] != _runs(before)["side"][0]
    assert after["metadata"]["labels"]["pod-template-generation"] == str(status()["metadata"]["generation"])
    kubectl("patch", "daemonset", "logd", "--type", "json", "-p", json.dumps(
        [{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [{"name": "MODE", "value": "fast"}]}]))
    wait_for("the pod recreated and Ready", lambda: len(pods := _sts_pods("logd")) == 1 and pods[0]["metadata"]["uid"] != after["metadata"]["uid"]
             and _ready(pods[0]) and any(c.get("env") for c in pods[0]["spec"]["containers"]), 120)
    kubectl("delete", "daemonset", "logd", "--wait=false")
