"""On the real cluster: a VPA that names the node's recommender while `recommender.enabled` is off (as in
deploy/overlays/realk8s) gets one FeatureOffOnNode Event, which `kubectl describe` shows: one Event for
two agents (one per node), whichever created it first."""

from __future__ import annotations

import json

from tests.e2e_k8s.nodes import NODES, NodeAgent, agent_ready, kubectl, needs_cluster, wait_for

pytestmark = needs_cluster
NS = "optin"


def test_a_vpa_naming_the_switched_off_recommender_is_told_once_and_describe_says_why() -> None:
    for node in NODES:
        wait_for(f"the agent on {node} Ready", NodeAgent(node).ready, 300, 2)
    kubectl("create", "namespace", NS, ok=(0, 1))
    vpa = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
           "metadata": {"name": "batch", "namespace": NS},
           "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "batch"},
                    "recommenders": [{"name": "kube-cgroup-agent"}], "updatePolicy": {"updateMode": "Off"}}}
    try:
        kubectl("apply", "-f", "-", stdin=json.dumps(vpa))
        for node in NODES:  # restart both agents: each lists at start (then every 10 minutes)
            kubectl("delete", "pod", "-n", "kube-cgroup-agent", NodeAgent(node).name, "--wait=true")

        def told() -> list[dict[str, str]] | None:
            items = json.loads(kubectl("get", "events", "-n", NS, "-o", "json"))["items"]
            found = [e for e in items if e.get("reason") == "FeatureOffOnNode"]
            return found or None

        events = wait_for("the FeatureOffOnNode Event", told, 300, 2)
        for node in NODES:
            wait_for(f"the restarted agent on {node} Ready", lambda node=node: agent_ready(node), 300, 2)
        events = told() or []
        assert len(events) == 1, [e["metadata"]["name"] for e in events]
        assert "recommender.enabled is false" in events[0]["message"]
        describe = kubectl("describe", "vpa", "-n", NS, "batch")
        assert "FeatureOffOnNode" in describe and "recommender.enabled is false" in describe, describe[-1500:]
        print(f"\ne2e-k8s opt-in notice: {events[0]['message']}")
    finally:
        kubectl("delete", "namespace", NS, "--wait=false", ok=(0, 1))
