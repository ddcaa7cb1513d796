"""VPA for pod-level resources on both real nodes (docs/vpa-pod-level.md), the agent as its DaemonSet: a Deployment
of two-container pods with only pod-level resources (`spec.resources`; the containers set none) and a VPA that opts
in, its pod-level recommendation in the annotation kube-cgroup-agent.io/vpa-pod-recommendation (the test CRD,
like every VPA CRD today, has no `podRecommendations` field).

- in place: the recommendation outside the pod's range → the agent's pods/resize of `spec.resources` (limits
  proportional), the pod UID and restart counts kept; timed from the VPA's update to the pod cgroup's CPU
  limit written by the kubelet (figure 8); then every value `diff --all` computes for the pod cgroup and the
  tiers equals the node's file (0 disagreements; the containers' are the kubelet's own difference, below);
- mode Off: a later recommendation leaves the pod alone; the panic button too, and once released a lowering
  recommendation stops the pod-level memory limit above what the pod cgroup holds;
- at creation (mode Initial): the Deployment's next pod is created with the recommendation by the admission
  policy, before any resize.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.pods.parse import resource_list
from bench import provenance
from tests.e2e_k8s.nodes import (
    IMAGE,
    NODES,
    V2_NODE,
    Comparison,
    NodeAgent,
    compare,
    kubectl,
    needs_cluster,
    read_files,
    short,
    vpa_agents,
    wait_for,
)

pytestmark = needs_cluster
SLOW = 3
ANNOTATION = "kube-cgroup-agent.io/vpa-pod-recommendation"


@pytest.fixture(scope="module")
def agents() -> Iterator[dict[str, NodeAgent]]:
    yield from vpa_agents("kcg-e2e=podlevel")


def _deployment(name: str, node: str) -> dict[str, Any]:
    def ctr(n: str) -> dict[str, Any]:
        return {"name": n, "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "1000000"]}

    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"kcg-e2e": "podlevel"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
                     "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"cpu": "400m", "memory": "128Mi"}},
                     "containers": [ctr("a"), ctr("b")]}}},
    }


def _recommendation(cpu: str, lower: str, upper: str, memory: str = "96Mi") -> str:
    return json.dumps({"target": {"cpu": cpu, "memory": memory}, "lowerBound": {"cpu": lower, "memory": "80Mi"},
                       "upperBound": {"cpu": upper, "memory": "128Mi"}})


def _vpa(name: str, mode: str, recommendation: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
        "metadata": {"name": name, "namespace": "default", "labels": {"kcg-e2e": "podlevel"},
                     "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node", ANNOTATION: recommendation}},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                 "updatePolicy": {"updateMode": mode}},
    }


def _pod(name: str, node: str, not_uid: str = "", ns: str = "default") -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        pods = json.loads(kubectl("get", "pods", "-n", ns, "-l", f"app={name}", "-o", "json"))["items"]
        return next((p for p in pods if p["status"].get("phase") == "Running" and p["metadata"]["uid"] != not_uid
                     and not p["metadata"].get("deletionTimestamp")), None)

    return wait_for(f"{name} Running", probe, 90 * (SLOW if node == V2_NODE else 1))


def _pod_cpu_quota(node: str, uid: str) -> int | None:
    """The pod cgroup's CFS quota (µs a period; -1 unlimited) as the node's file holds it."""
    return _pod_file(node, uid, "cpu.cfs_quota_us", "cpu.max")


def _values(res: dict[str, Any]) -> tuple[int | None, ...]:
    """(CPU request, memory request, CPU limit, memory limit) in millicores and bytes, however the API wrote them."""
    req, lim = resource_list(res.get("requests") or {}, "requests"), resource_list(res.get("limits") or {}, "limits")
    return req.cpu_milli, req.memory, lim.cpu_milli, lim.memory


def _resources(name: str, uid: str) -> dict[str, Any]:
    pod = json.loads(kubectl("get", "pod", name, "-o", "json"))
    assert pod["metadata"]["uid"] == uid
    return dict(pod["spec"].get("resources") or {})


@pytest.mark.parametrize("node", NODES)
def test_pod_level_vpa_in_place_off_and_at_creation(agents: dict[str, NodeAgent], node: str) -> None:
    agent, name, slow = agents[node], f"pl-{short(node)}", SLOW if node == V2_NODE else 1
    kubectl("apply", "-f", "-", stdin=json.dumps(_deployment(name, node)))
    pod = _pod(name, node)
    pname, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    wait_for("the pod cgroup's quota (400m)", lambda: _pod_cpu_quota(node, uid) == 40000, 30 * slow)

    tier = _tier_file(node)
    tier_before = read_files(node, [tier])[tier]
    t0 = time.monotonic()
    kubectl("apply", "-f", "-", stdin=json.dumps(_vpa(name, "InPlace", _recommendation("300m", "250m", "400m"))))
    seen: dict[str, float] = {}

    def both_moved() -> bool:
        """The pod cgroup's CPU limit and the Burstable tier's CPU share, read together: when each moved."""
        files = read_files(node, [tier, _pod_path(node, uid, "cpu.cfs_quota_us", "cpu.max")])
        at = (time.monotonic() - t0) * 1000
        if files[tier] != tier_before:
            seen.setdefault("tier", at)
        if _number(files[_pod_path(node, uid, "cpu.cfs_quota_us", "cpu.max")]) == 60000:
            seen.setdefault("pod", at)
        return len(seen) == 2

    wait_for("the pod-level limit (600m) in the pod cgroup and the Burstable tier moved", both_moved, 60 * slow, 0.05)
    to_cgroup_ms, tier_ms = seen["pod"], seen["tier"]
    res = _resources(pname, uid)
    assert _values(res) == (300, 96 << 20, 600, 192 << 20), res  # VPA's target; the pod's ratio 2 kept
    after = json.loads(kubectl("get", "pod", pname, "-o", "json"))
    assert all(c["restartCount"] == 0 for c in after["status"]["containerStatuses"])
    assert all(not c.get("resources") for c in after["spec"]["containers"])  # the containers still set none
    def pod_and_tiers() -> Comparison:
        """The pod cgroup and the tiers; not its containers': after a pod-level resize the kubelet writes a
        container without a CPU request of its own cpu.shares 2 (its resize path), where at creation it wrote
        the shares of the pod limit it inherits (docs/kubelet-differences.md)."""
        return compare(node, {**agent.diff(), "containers": []}, {uid})

    deadline, comparison = time.monotonic() + 60 * slow, pod_and_tiers()
    while comparison.disagreements and time.monotonic() < deadline:
        time.sleep(2.0)
        comparison = pod_and_tiers()
    assert comparison.disagreements == (), "\n".join(map(str, comparison.disagreements))
    assert comparison.compared > 0 and comparison.pods == 1

    kubectl("patch", "vpa", name, "--type", "merge", "-p", json.dumps({
        "spec": {"updatePolicy": {"updateMode": "Off"}},
        "metadata": {"annotations": {ANNOTATION: _recommendation("500m", "450m", "600m")}}}))
    time.sleep(10 * slow)
    assert _values(_resources(pname, uid))[0] == 300  # mode Off: left alone

    kubectl("patch", "vpa", name, "--type", "merge", "-p", json.dumps({"spec": {"updatePolicy": {"updateMode": "Initial"}}}))
    wait_for("the admission parameters holding the pod level", lambda: "500m" in kubectl(
        "get", "vpaadmissionparams", "vpa-admission", "-o", "json", "--ignore-not-found"), 60)
    kubectl("delete", "pod", pname, "--wait=false")
    fresh = _pod(name, node, not_uid=uid)
    created = fresh["spec"]["resources"]
    assert _values(created)[::2] == (500, 1000), created  # at creation: 500m, its limit in proportion
    assert all(not c.get("resources") for c in fresh["spec"]["containers"])
    print(f"\ne2e-k8s: {node}: pod-level VPA annotation -> pod cgroup written by the kubelet after {to_cgroup_ms:.0f} ms; "
          f"the Burstable tier's CPU share moved by the agent after {tier_ms:.0f} ms")
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        def put(data: dict[str, Any]) -> None:
            data.setdefault("pod_level_vpa_to_cgroup_ms", {})[node] = to_cgroup_ms
            data.setdefault("pod_level_tier_ms", {})[node] = tier_ms
            data.get("pod_level_tiers_agree_ms", {}).pop(node, None)

        provenance.record(Path(out), f"pod-level {node}", put)
    kubectl("delete", "deployment,vpa", name, "--wait=false")


def _pod_path(node: str, uid: str, v1: str, v2: str) -> str:
    """A Burstable pod's cgroup file on the node (v1: in the file's controller's hierarchy)."""
    if node == V2_NODE:
        return f"/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/{v2}"
    return f"/sys/fs/cgroup/{v1.split('.')[0]}/realk8s/kubepods/burstable/pod{uid}/{v1}"


def _tier_file(node: str) -> str:
    """The Burstable tier's CPU share (v1 cpu.shares, v2 cpu.weight)."""
    if node == V2_NODE:
        return "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/cpu.weight"
    return "/sys/fs/cgroup/cpu/realk8s/kubepods/burstable/cpu.shares"


def _number(text: str | None) -> int | None:
    return None if text is None else (-1 if text.split()[0] == "max" else int(text.split()[0]))


def _pod_file(node: str, uid: str, v1: str, v2: str) -> int | None:
    """A pod cgroup file's number as the node holds it (max: -1)."""
    path = _pod_path(node, uid, v1, v2)
    return _number(read_files(node, [path])[path])


@pytest.mark.parametrize("node", NODES)
def test_pod_level_panic_button_and_memory_held_at_what_the_pod_uses(agents: dict[str, NodeAgent], node: str) -> None:
    """The pod really holds 150 MiB (a file in its tmpfs); with the panic button on, a recommendation of 50Mi
    changes nothing; released, the pod-level memory limit goes down from 400Mi but stops above what the pod
    cgroup holds (its working set + 10 %)."""
    name, slow = f"plh-{short(node)}", SLOW if node == V2_NODE else 1
    d = _deployment(name, node)
    spec = d["spec"]["template"]["spec"]
    spec["resources"] = {"requests": {"cpu": "100m", "memory": "200Mi"}, "limits": {"cpu": "200m", "memory": "400Mi"}}
    spec["volumes"] = [{"name": "hold", "emptyDir": {"medium": "Memory"}}]
    spec["containers"][0]["command"] = ["sh", "-c", "head -c 150m /dev/zero > /hold/x && sleep 1000000"]
    spec["containers"][0]["volumeMounts"] = [{"name": "hold", "mountPath": "/hold"}]
    kubectl("apply", "-f", "-", stdin=json.dumps(d))
    pod = _pod(name, node)
    pname, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    wait_for("150 MiB held in the pod cgroup", lambda: (_pod_file(node, uid, "memory.usage_in_bytes", "memory.current") or 0) > 150 << 20,
             60 * slow)
    low = json.dumps({"target": {"cpu": "100m", "memory": "50Mi"}, "lowerBound": {"cpu": "50m", "memory": "20Mi"},
                      "upperBound": {"cpu": "200m", "memory": "100Mi"}})
    kubectl("label", "node", node, "kube-cgroup-agent.io/vpa=off")
    try:
        kubectl("apply", "-f", "-", stdin=json.dumps(_vpa(name, "InPlace", low)))
        time.sleep(10 * slow)
        assert _values(_resources(pname, uid)) == (100, 200 << 20, 200, 400 << 20)  # the panic button: nothing
    finally:
        kubectl("label", "node", node, "kube-cgroup-agent.io/vpa-")

    def lowered() -> int | None:
        limit = _values(_resources(pname, uid))[3]
        return limit if limit is not None and limit < 400 << 20 else None

    limit = wait_for("the pod-level memory limit lowered", lowered, 60 * slow, 0.5)
    held = _pod_file(node, uid, "memory.usage_in_bytes", "memory.current") or 0
    assert limit > 150 << 20 and held <= limit, (limit, held)  # above what it holds, below where it was
    after = json.loads(kubectl("get", "pod", pname, "-o", "json"))
    assert all(c["restartCount"] == 0 for c in after["status"]["containerStatuses"]) and after["metadata"]["uid"] == uid
    kubectl("delete", "deployment,vpa", name, "--wait=false")


@pytest.mark.parametrize("node", NODES)
def test_pod_level_and_container_level_together_as_aep_7571_option_2(agents: dict[str, NodeAgent], node: str) -> None:
    """A pod with pod-level resources, container `a` with its own and `b` with none: the pod level takes the
    pod-level recommendation, `a` its own container recommendation (both limits in proportion), `b` stays
    without resources — in one pods/resize, no restart; then the pod cgroup, `a`'s cgroup and the tiers equal
    `diff --all` (`b` is the kubelet's documented difference after a pod-level resize)."""
    agent, name, slow = agents[node], f"plb-{short(node)}", SLOW if node == V2_NODE else 1
    d = _deployment(name, node)
    d["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}}
    kubectl("apply", "-f", "-", stdin=json.dumps(d))
    pod = _pod(name, node)
    pname, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    kubectl("apply", "-f", "-", stdin=json.dumps(_vpa(name, "Off", _recommendation("300m", "250m", "400m"))))
    kubectl("patch", "vpa", name, "--subresource", "status", "--type", "merge", "-p", json.dumps({"status": {
        "recommendation": {"containerRecommendations": [{
            "containerName": "a", "target": {"cpu": "150m", "memory": "48Mi"},
            "lowerBound": {"cpu": "120m", "memory": "40Mi"}, "upperBound": {"cpu": "200m", "memory": "64Mi"}}]}}}))
    kubectl("patch", "vpa", name, "--type", "merge", "-p", json.dumps({"spec": {"updatePolicy": {"updateMode": "InPlace"}}}))
    wait_for("the pod-level limit (600m) in the pod cgroup", lambda: _pod_cpu_quota(node, uid) == 60000, 60 * slow, 0.2)
    after = json.loads(kubectl("get", "pod", pname, "-o", "json"))
    assert after["metadata"]["uid"] == uid
    assert _values(after["spec"]["resources"]) == (300, 96 << 20, 600, 192 << 20), after["spec"]["resources"]
    a, b = after["spec"]["containers"]
    assert _values(a["resources"]) == (150, 48 << 20, 300, 96 << 20), a["resources"]  # its own, in proportion
    assert not b.get("resources")  # observed, never given any
    assert all(c["restartCount"] == 0 for c in after["status"]["containerStatuses"])

    def pod_a_and_tiers() -> Comparison:
        d = agent.diff()
        return compare(node, {**d, "containers": [c for c in d["containers"] if c["container"] == "a"]}, {uid})

    deadline, comparison = time.monotonic() + 60 * slow, pod_a_and_tiers()
    while comparison.disagreements and time.monotonic() < deadline:
        time.sleep(2.0)
        comparison = pod_a_and_tiers()
    assert comparison.disagreements == (), "\n".join(map(str, comparison.disagreements))
    assert comparison.pods == 1 and any(c["container"] == "a" for c in agent.diff()["containers"])
    kubectl("delete", "deployment,vpa", name, "--wait=false")


@pytest.mark.parametrize("node", NODES)
def test_limitrange_type_pod_caps_the_pod_level_recommendation(agents: dict[str, NodeAgent], node: str) -> None:
    """The namespace's LimitRange `type: Pod` max CPU 500m: a recommendation of 400m (limit 800m in the pod's
    ratio 2) is applied as the request whose proportional limit is the max (VPA's GetBoundaryRequest): 250m,
    limit 500m; memory, unbounded there, takes the target."""
    agent, name, slow, ns = agents[node], f"plr-{short(node)}", SLOW if node == V2_NODE else 1, f"plr-{short(node)}"
    kubectl("create", "namespace", ns)
    try:
        d, v = _deployment(name, node), _vpa(name, "InPlace", _recommendation("400m", "300m", "500m"))
        d["metadata"]["namespace"] = v["metadata"]["namespace"] = ns
        d["spec"]["template"]["spec"]["resources"] = {
            "requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}
        kubectl("apply", "-f", "-", stdin=json.dumps(d))
        pod = _pod(name, node, ns=ns)
        pname, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        # after the pod: the API server applies the LimitRange at admission, and this one is about the VPA's cap
        kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps({
            "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "pod-max"},
            "spec": {"limits": [{"type": "Pod", "max": {"cpu": "500m"}}]}}))
        wait_for("the agent's LimitRange watch to see it", lambda: [
            e for e in agent.lines() if e.get("event") == "limitranges.changed" and ns in e.get("namespaces", [])], 30 * slow)
        kubectl("apply", "-f", "-", stdin=json.dumps(v))
        wait_for("the capped pod-level limit (500m) in the pod cgroup", lambda: _pod_cpu_quota(node, uid) == 50000, 60 * slow, 0.2)
        res = json.loads(kubectl("get", "pod", "-n", ns, pname, "-o", "json"))["spec"]["resources"]
        assert _values(res) == (250, 96 << 20, 500, 192 << 20), res
    finally:
        kubectl("delete", "namespace", ns, "--wait=false")
