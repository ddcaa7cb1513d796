"""On the real v1.36 API server: what a node's token may read now that each agent reads only what its own
pods need (docs/scale.md), the keeper's VPA writes confined to the target label by its own
ValidatingAdmissionPolicy, and a node's NodeHistory writable only by that node's agent (the CEL evaluated by
the real API server, through impersonation)."""

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


def _patch_vpa(user: str, ns: str, body: dict[str, object]) -> subprocess.CompletedProcess[str]:
    """A merge patch of VPA `web` as `user` sends it: the admin's certificate impersonating that ServiceAccount
    (kubectl patch would GET the object first, a verb the keeper has not got); returncode 0 when admitted."""
    pki = RK / "state" / "pki"
    url = f"https://127.0.0.1:6443/apis/autoscaling.k8s.io/v1/namespaces/{ns}/verticalpodautoscalers/web"
    done = subprocess.run(["curl", "-sS", "--cacert", str(pki / "ca.crt"), "--cert", str(pki / "admin.crt"),
                           "--key", str(pki / "admin.key"), "-H", f"Impersonate-User: {user}",
                           "-H", "Content-Type: application/merge-patch+json", "-X", "PATCH", "-d", json.dumps(body),
                           "-w", "\n%{http_code}", url], capture_output=True, text=True, timeout=60)
    answer, _, code = done.stdout.rpartition("\n")
    return subprocess.CompletedProcess(done.args, 0 if code.startswith("2") else 1, answer, answer)


def test_the_agents_token_reads_replicasets_by_name_only() -> None:
    assert not _can(AGENT, "list", "replicasets.apps") and not _can(AGENT, "watch", "replicasets.apps")
    assert _can(AGENT, "get", "replicasets.apps") and _can(AGENT, "get", "jobs.batch")
    assert _can(AGENT, "watch", "verticalpodautoscalers.autoscaling.k8s.io")
    assert _can(AGENT, "patch", "verticalpodautoscalers.autoscaling.k8s.io")  # one annotation (its own policy)


def _as(user: str, method: str, url_path: str, body: object, extra: dict[str, str] | None = None,
        ctype: str = "application/json") -> tuple[int, str]:
    """A request as `user` sends it: the admin's certificate impersonating it (with the extra a bound token's
    claims carry, e.g. the node name); returns the HTTP code and the answer."""
    pki = RK / "state" / "pki"
    headers = ["-H", f"Impersonate-User: {user}", "-H", f"Content-Type: {ctype}"]
    for k, v in (extra or {}).items():
        headers += ["-H", f"Impersonate-Extra-{k.replace('/', '%2F')}: {v}"]
    done = subprocess.run(["curl", "-sS", "--cacert", str(pki / "ca.crt"), "--cert", str(pki / "admin.crt"),
                           "--key", str(pki / "admin.key"), *headers, "-X", method, "-d", json.dumps(body),
                           "-w", "\n%{http_code}", f"https://127.0.0.1:6443{url_path}"], capture_output=True, text=True, timeout=60)
    answer, _, code = done.stdout.rpartition("\n")
    return int(code or 0), answer


def test_a_nodes_agent_may_write_its_own_node_history_and_no_other() -> None:
    """Dry runs (admission runs, nothing is stored): the agent's ServiceAccount with the node-name claim of
    realk8s-v1 creates realk8s-v1's NodeHistory; another node's name, a NodeHistory naming another node, or
    a token without the claim are refused by the policy."""
    url = "/apis/kube-cgroup-agent.io/v1alpha1/nodehistories?dryRun=All"
    claim = {"authentication.kubernetes.io/node-name": "realk8s-v1"}

    def body(name: str, node: str) -> dict[str, object]:
        return {"apiVersion": "kube-cgroup-agent.io/v1alpha1", "kind": "NodeHistory",
                "metadata": {"name": name}, "spec": {"node": node, "vpas": {}}}

    refused = (403, 422)  # a ValidatingAdmissionPolicy's denial: 422 Invalid, its default reason
    kubectl("delete", "nodehistory", "kcg-scope-other", "--ignore-not-found", ok=(0, 1))
    code, answer = _as(AGENT, "POST", url, body("kcg-scope-other", "kcg-scope-other"), claim)
    assert code in refused and "only its own node's NodeHistory" in answer, (code, answer)
    code, answer = _as(AGENT, "POST", url, body("realk8s-v1", "realk8s-v2"), claim)
    assert code in refused and "names the node it is written by" in answer, (code, answer)
    code, answer = _as(AGENT, "POST", url, body("realk8s-v1", "realk8s-v1"))
    assert code in refused and "only its own node's NodeHistory" in answer, (code, answer)
    code, answer = _as(AGENT, "POST", url, body("realk8s-v1", "realk8s-v1"), claim)
    assert code in (201, 409), (code, answer)  # created (dry run), or the agent's own already exists
    assert not _can(AGENT, "delete", "nodehistories.kube-cgroup-agent.io")
    print(f"\ne2e-k8s node-history policy: {answer.strip()[:160] if code != 201 else 'own NodeHistory admitted'}")


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
            return _patch_vpa(KEEPER, NS, body)

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


def test_an_agent_may_change_a_vpas_pod_recommendation_annotation_and_nothing_else() -> None:
    """The recommender's pod-level recommendation where the CRD lacks the field: its one annotation, through
    the kube-cgroup-agent-vpa-annotation policy on the real API server."""
    ns = f"{NS}-rec"
    kubectl("create", "namespace", ns, ok=(0, 1))
    vpa = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
           "metadata": {"name": "web", "namespace": ns, "labels": {"team": "a"}},
           "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "updatePolicy": {"updateMode": "Off"}}}
    try:
        kubectl("apply", "-f", "-", stdin=json.dumps(vpa))

        def patch(body: dict[str, object]) -> subprocess.CompletedProcess[str]:
            return _patch_vpa(AGENT, ns, body)

        refused = [patch({"spec": {"updatePolicy": {"updateMode": "Auto"}}}),
                   patch({"metadata": {"labels": {"team": "b"}}}),
                   patch({"metadata": {"annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"}}})]
        for r in refused:
            assert r.returncode != 0 and "may change only a VPA's kube-cgroup-agent.io/vpa-pod-recommendation" in r.stderr, r.stderr
        rec = json.dumps({"target": {"cpu": "300m", "memory": "96Mi"}})
        allowed = patch({"metadata": {"annotations": {"kube-cgroup-agent.io/vpa-pod-recommendation": rec}}})
        assert allowed.returncode == 0, allowed.stderr
        got = json.loads(kubectl("get", "vpa", "-n", ns, "web", "-o", "json"))
        assert got["spec"]["updatePolicy"]["updateMode"] == "Off" and got["metadata"]["labels"]["team"] == "a"
        assert got["metadata"]["annotations"]["kube-cgroup-agent.io/vpa-pod-recommendation"] == rec
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", ok=(0, 1))


def test_the_keeper_may_change_a_pods_rollout_turn_and_nothing_else_and_an_agent_may_not() -> None:
    """Dry runs on a pod bound to a node that does not run (nothing starts it): the keeper's patches of its
    image, a label or another annotation are refused by kube-cgroup-agent-rollout-turns, its turn admitted;
    the node's agent (the pod's node in its claim) may not write the turn, which is the keeper's."""
    node = "kcg-scope-nowhere"
    ns = NS + "-turn"  # not the namespace the tests above delete without waiting
    kubectl("create", "namespace", ns, ok=(0, 1))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns, "labels": {"app": "p"}},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/c:1"}]}}
    url = f"/api/v1/namespaces/{ns}/pods/p?dryRun=All"
    merge = "application/strategic-merge-patch+json"  # containers by name: an image change the pod's own validation admits
    turn = "kube-cgroup-agent.io/rollout-turn"
    try:
        kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        for body in ({"spec": {"containers": [{"name": "c", "image": "registry.invalid/c:2"}]}},
                     {"metadata": {"labels": {"app": "q"}}},
                     {"metadata": {"annotations": {"kube-cgroup-agent.io/rollout-status": "x"}}}):
            code, answer = _as(KEEPER, "PATCH", url, body, ctype=merge)
            assert code in (403, 422) and "only a pod's kube-cgroup-agent.io/rollout-turn annotation" in answer, (code, answer)
        code, answer = _as(KEEPER, "PATCH", url, {"metadata": {"annotations": {turn: "abc123"}}}, ctype=merge)
        assert code == 200, (code, answer)
        claim = {"authentication.kubernetes.io/node-name": node}
        code, answer = _as(AGENT, "PATCH", url, {"metadata": {"annotations": {turn: "abc123"}}}, claim, ctype=merge)
        assert code in (403, 422) and "but a DaemonSet pod's turn" in answer, (code, answer)
        code, answer = _as(AGENT, "PATCH", url, {"metadata": {"annotations": {"kube-cgroup-agent.io/rollout-status": "x"}}}, claim,
                           ctype=merge)
        assert code == 200, (code, answer)  # its own annotations stay its own
        assert not _can(AGENT, "list", "daemonsets.apps") and not _can(AGENT, "watch", "daemonsets.apps")
        assert _can(AGENT, "get", "daemonsets.apps")
        print("\ne2e-k8s rollout-turn policy: the keeper's turn admitted, its other pod writes and the agent's turn refused")
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", ok=(0, 1))
