"""Beside the real kubelet on the cgroup v1 node (tests/e2e_k8s/v1_node.py), one pod `web` resized:

- a `pods/resize` of a running pod is applied by the kubelet; the agent moves the Burstable tier within
  seconds (the kubelet: up to a minute later) and never writes the kubelet's values (drift counters 0);
- a pod-level-annotation change is applied by the agent to the pod cgroup, and one beyond the namespace's
  LimitRange is refused with an Event;
- kill -9 of the agent's process in the middle of a resize loses nothing: the restarted container converges.

The tests run in this order: the first creates `web` and counts the node's other Burstable pods.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.utils import parse_quantity

from bench import provenance
from tests.e2e_k8s.nodes import IMAGE, kubectl, needs_cluster, wait_for
from tests.e2e_k8s.v1_node import CPU, NODE, Agent, beside_the_kubelet, read, running

pytestmark = needs_cluster


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    yield from beside_the_kubelet(tmp_path_factory)


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
    pod = running("web")
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
    pod = running("web")
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
    pod = running("web")
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
    running("web")
    burstable = CPU / "burstable" / "cpu.shares"
    _resize("web", "500m", "600m")
    agent.kill9()
    wait_for("the tier after the restart", lambda: read(burstable) == _shares(500), 60)
    time.sleep(12)
    assert agent.drift() == 0, agent.counters("kube_cgroup_agent_drift_total")
