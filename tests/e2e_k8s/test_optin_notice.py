"""On the real cluster: a VPA that names the node's recommender while `recommender.enabled` is off (as in
deploy/overlays/realk8s) gets one FeatureOffOnNode Event, which `kubectl describe` shows: one Event from the
node that runs its workload's pods (a node tells only the objects of its own pods), however many agents;
and a VPA whose workload has no pod anywhere is told by no node."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e_k8s.nodes import IMAGE, NODES, V1_NODE, NodeAgent, kubectl, needs_cluster, wait_for

pytestmark = needs_cluster
NS = "optin"


def _vpa(name: str) -> dict[str, Any]:
    return {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "recommenders": [{"name": "kube-cgroup-agent"}], "updatePolicy": {"updateMode": "Off"}}}


def _told() -> list[dict[str, Any]]:
    items = json.loads(kubectl("get", "events", "-n", NS, "-o", "json"))["items"]
    return [e for e in items if e.get("reason") == "FeatureOffOnNode"]


def test_a_vpa_naming_the_switched_off_recommender_is_told_once_and_describe_says_why() -> None:
    for node in NODES:
        wait_for(f"the agent on {node} Ready", NodeAgent(node).ready, 300, 2)
    kubectl("create", "namespace", NS, ok=(0, 1))
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "batch", "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "batch"}}, "template": {
            "metadata": {"labels": {"app": "batch"}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": V1_NODE}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "1000000"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}
    try:
        kubectl("apply", "-f", "-", stdin=json.dumps(_vpa("batch")))
        kubectl("apply", "-f", "-", stdin=json.dumps(_vpa("elsewhere")))  # its Deployment has no pod anywhere
        kubectl("apply", "-f", "-", stdin=json.dumps(deployment))
        # the keeper labels each VPA with its target: the label a node watches and lists VPAs by
        label = wait_for("the keeper's target label on VPA batch", lambda: json.loads(kubectl(
            "get", "vpa", "-n", NS, "batch", "-o", "json"))["metadata"].get("labels", {}).get("kube-cgroup-agent.io/target"), 60, 0.5)
        assert len(label) == 40
        # the pod's arrival on realk8s-node makes that agent read its owners' VPAs (no restart, no 10-minute wait)
        events = wait_for("the FeatureOffOnNode Event", lambda: _told() or None, 180, 2)
        assert len(events) == 1, [e["metadata"]["name"] for e in events]
        assert events[0]["involvedObject"]["name"] == "batch"
        assert "recommender.enabled is false" in events[0]["message"] and V1_NODE in events[0]["message"]
        describe = kubectl("describe", "vpa", "-n", NS, "batch")
        assert "FeatureOffOnNode" in describe and "recommender.enabled is false" in describe, describe[-1500:]
        assert [e["involvedObject"]["name"] for e in _told()] == ["batch"]  # "elsewhere" concerns no node
        print(f"\ne2e-k8s opt-in notice: {events[0]['message']}")
    finally:
        kubectl("delete", "namespace", NS, "--wait=false", ok=(0, 1))
