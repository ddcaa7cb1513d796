"""VPA in place beside the real kubelet on the cgroup v1 node (tests/e2e_k8s/v1_node.py): a Deployment's pod
and a VPA that opts in; a recommendation patched into the VPA's status is applied in place through
pods/resize by the kubelet (limits proportional, restartCount 0, same pod UID); the panic button holds back a
later one, and releasing it applies it. A memory recommendation never goes below what the container holds,
and one the node cannot fit is reported (an Event, `explain`) and holds a higher one back.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import provenance
from tests.e2e_k8s.nodes import AGENT_CONFIG, IMAGE, kubectl, needs_cluster, wait_for
from tests.e2e_k8s.v1_node import NODE, PIN, Agent, beside_the_kubelet, read, running

pytestmark = needs_cluster


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    yield from beside_the_kubelet(tmp_path_factory)


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


def _memory_limit(pod: dict[str, Any]) -> Path | None:
    d = _container_dir(pod, "memory")
    return d / "memory.limit_in_bytes" if d is not None else None



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
    pod = running(name)
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
    pod = running(name)
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
    running(name)
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
