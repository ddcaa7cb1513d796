"""On the real v1.36 API server: what a node's token may read now that each agent reads only what its own
pods need (README "At scale"), and the keeper's VPA writes confined to the target label by its own
ValidatingAdmissionPolicy (the CEL evaluated by the real API server, through impersonation)."""

from __future__ import annotations

import json
import os
import subprocess

from tests.e2e_k8s.nodes import KUBECTL, RK, kubectl, needs_cluster, wait_for

pytestmark = needs_cluster
NS = "kcg-scope"
AGENT = "system:serviceaccount:kube-cgroup-agent:kube-cgroup-agent"
KEEPER = "system:serviceaccount:kube-cgroup-agent:kube-cgroup-agent-vpa-admission"


def _env() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(RK / "kubeconfig")}


def _can(user: str, *what: str) -> bool:
    out = subprocess.run([KUBECTL, "auth", "can-i", *what, f"--as={user}"], capture_output=True, text=True, timeout=60, env=_env())
    return out.stdout.strip() == "yes"


def test_the_agents_token_reads_replicasets_by_name_only() -> None:
    assert not _can(AGENT, "list", "replicasets.apps") and not _can(AGENT, "watch", "replicasets.apps")
    assert _can(AGENT, "get", "replicasets.apps") and _can(AGENT, "get", "jobs.batch")
    assert _can(AGENT, "watch", "verticalpodautoscalers.autoscaling.k8s.io")
    assert not _can(AGENT, "patch", "verticalpodautoscalers.autoscaling.k8s.io")


def test_the_keeper_may_change_a_vpas_target_label_and_nothing_else() -> None:
    kubectl("create", "namespace", NS, ok=(0, 1))
    vpa = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
           "metadata": {"name": "web", "namespace": NS, "labels": {"team": "a"}},
           "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "updatePolicy": {"updateMode": "Off"}}}
    try:
        kubectl("apply", "-f", "-", stdin=json.dumps(vpa))
        label = wait_for("the keeper's label", lambda: json.loads(kubectl("get", "vpa", "-n", NS, "web", "-o", "json"))
                         ["metadata"].get("labels", {}).get("kube-cgroup-agent.io/target"), 60, 0.5)

        def patch(body: dict[str, object]) -> subprocess.CompletedProcess[str]:
            """A merge patch as the keeper sends it: the admin's certificate impersonating the keeper's
            ServiceAccount (kubectl patch would GET the object first, a verb the keeper has not got)."""
            pki = RK / "state" / "pki"
            url = f"https://127.0.0.1:6443/apis/autoscaling.k8s.io/v1/namespaces/{NS}/verticalpodautoscalers/web"
            done = subprocess.run(["curl", "-sS", "--cacert", str(pki / "ca.crt"), "--cert", str(pki / "admin.crt"),
                                   "--key", str(pki / "admin.key"), "-H", f"Impersonate-User: {KEEPER}",
                                   "-H", "Content-Type: application/merge-patch+json", "-X", "PATCH", "-d", json.dumps(body),
                                   "-w", "\n%{http_code}", url], capture_output=True, text=True, timeout=60)
            answer, _, code = done.stdout.rpartition("\n")
            return subprocess.CompletedProcess(done.args, 0 if code.startswith("2") else 1, answer, answer)

        refused = [patch({"spec": {"updatePolicy": {"updateMode": "Auto"}}}),
                   patch({"metadata": {"labels": {"team": "b"}}}),
                   patch({"metadata": {"annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"}}})]
        for r in refused:
            assert r.returncode != 0 and "may change only a VPA's kube-cgroup-agent.io/target label" in r.stderr, r.stderr
        allowed = patch({"metadata": {"labels": {"kube-cgroup-agent.io/target": label}}})
        assert allowed.returncode == 0, allowed.stderr
        got = json.loads(kubectl("get", "vpa", "-n", NS, "web", "-o", "json"))
        assert got["spec"]["updatePolicy"]["updateMode"] == "Off" and got["metadata"]["labels"]["team"] == "a"
        print(f"\ne2e-k8s keeper policy: {refused[0].stderr.strip()[:200]}")
    finally:
        kubectl("delete", "namespace", NS, "--wait=false", ok=(0, 1))
