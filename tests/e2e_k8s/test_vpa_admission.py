"""VPA at pod creation on the real v1.36 API server: the MutatingAdmissionPolicy of deploy/vpa-admission and
its parameters, kept by the keeper Deployment (both applied by cluster.sh with deploy/overlays/realk8s).

- A Deployment's new pod (scale up), for VPA modes Auto, Initial and InPlaceOrRecreate, is created and
  scheduled with the recommended requests and proportional limits, its QoS class unchanged; a StatefulSet's,
  a DaemonSet's, a Job's and a CronJob's pods too.
- Mode Off, no recommendation, a VPA of another Deployment, two VPAs, the VPA CRD removed: pods unchanged.
- A recommendation beyond the namespace's LimitRange: the pod is created within it.
- The agreement table: 32 rows (modes × controlledValues × container policies × QoS), each a pod created
  with server-side dry run through the real admission chain, compared with what the node agent's
  agent/vpa/policy.py computes for the same VPA and container; and the 15 pod-level rows, compared with
  its decide_pod_level.
- Pod creation latency with and without the policy (median of 50 creates), in a namespace with one VPA
  and in one with dozens (one parameter object per namespace: the policy is evaluated once either way).
"""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.infra.apiserver import APIServer, path
from agent.kube.client import api_client
from bench import provenance
from tests.e2e_k8s.admission_objects import (
    BURSTABLE,
    MI,
    NS,
    NS_LR,
    NS_TIMED,
    VPA_CRD,
    _apply,
    _by_name,
    _container,
    _node_decision,
    _param_says,
    _params,
    _pod_spec,
    _recommend,
    _said,
    _scaled_pod,
    _scheduled,
    _vpa,
    _workload,
)
from tests.e2e_k8s.nodes import RK, kubectl, needs_cluster, wait_for
from tests.vpa.admission_podlevel_rows import (
    PL_ROWS,
    as_the_crd_keeps,
    new_pod,
    pod_level_decision,
    resources_of,
    view,
)

pytestmark = needs_cluster

@pytest.fixture(scope="module")
def namespaces() -> Iterator[None]:
    for ns in (NS, NS_LR, NS_TIMED):
        kubectl("create", "namespace", ns, ok=(0, 1))
    kubectl("-n", "kube-cgroup-agent", "rollout", "status", "deployment/kube-cgroup-agent-vpa-admission", "--timeout=120s")
    yield
    for ns in (NS, NS_LR, NS_TIMED):
        kubectl("delete", "namespace", ns, "--wait=false", ok=(0, 1))


@pytest.mark.parametrize("mode", ["Auto", "Initial", "InPlaceOrRecreate"])
def test_a_new_pod_is_created_and_scheduled_with_the_recommendation(namespaces: None, mode: str) -> None:
    name = f"scale-{mode.lower()}"
    _apply(_workload("Deployment", name, BURSTABLE), _vpa(name, name, mode))
    _recommend(name)
    entry = _param_says(name)
    pod = _scaled_pod("Deployment", name)
    # requests = target; limits keep their ratio (cpu 2×, memory 3×); side has no limit: none made up
    assert _by_name(pod) == {"app": (250, 200 * MI, 500, 600 * MI), "side": (80, 48 * MI, None, None)}
    assert pod["status"]["qosClass"] == "Burstable"
    annotations = pod["metadata"]["annotations"]
    assert annotations["vpaUpdates"] == entry["updates"] == (
        f"Pod resources updated by {name}: container 0: cpu request, memory request, cpu limit, memory limit; "
        "container 1: cpu request, memory request")
    assert annotations["vpaObservedContainers"] == "app, side"
    scheduled = [c for c in pod["status"].get("conditions") or () if c["type"] == "PodScheduled"]
    assert scheduled and scheduled[0]["status"] == "True"
    kubectl("-n", NS, "scale", "deployment", name, "--replicas=0")


@pytest.mark.parametrize("case", ["off", "no-recommendation", "another-target", "two-vpas"])
def test_pods_are_created_unchanged(namespaces: None, case: str) -> None:
    name = f"same-{case}"
    objs: list[dict[str, Any]] = [_workload("Deployment", name, BURSTABLE)]
    vpas = {"off": [_vpa(name, name, "Off")], "no-recommendation": [_vpa(name, name, "Auto")],
            "another-target": [_vpa(name, f"{name}-other", "Auto")],
            "two-vpas": [_vpa(name, name, "Auto"), _vpa(f"{name}-b", name, "Auto")]}[case]
    if case == "another-target":
        objs.append(_workload("Deployment", f"{name}-other", BURSTABLE))
    _apply(*objs, *vpas)
    for v in vpas:
        if case != "no-recommendation":
            _recommend(v["metadata"]["name"])
    why = {"off": "updateMode Off", "no-recommendation": "no recommendation yet", "another-target": "", "two-vpas": "2 VPAs target"}[case]
    _param_says(name, skipped=why)  # the keeper has seen the VPA(s): what it says is what the pod gets
    pod = _scaled_pod("Deployment", name)
    assert _by_name(pod) == {"app": (100, 100 * MI, 200, 300 * MI), "side": (50, 32 * MI, None, None)}
    assert "vpaUpdates" not in (pod["metadata"].get("annotations") or {})
    kubectl("-n", NS, "scale", "deployment", name, "--replicas=0")


def test_a_pod_beyond_the_limitrange_is_created_within_it(namespaces: None) -> None:
    """A LimitRange with maximums and defaults for a container that sets nothing (the LimitRanger fills
    them in before the policy runs: the keeper's `from` must say the same). One LimitRange: a max is also
    a default where none is given, and two LimitRanges defaulting one resource apply in no set order."""
    name = "bounded"
    _apply({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "bounds", "namespace": NS_LR},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "1", "memory": "400Mi"},
                                 "default": {"cpu": "500m", "memory": "64Mi"}, "defaultRequest": {"cpu": "10m", "memory": "32Mi"}}]}},
           _workload("Deployment", name, [_container("app", {"cpu": "100m", "memory": "100Mi"}, {"cpu": "200m", "memory": "300Mi"}),
                                          _container("side")], ns=NS_LR),
           _vpa(name, name, "Auto", ns=NS_LR))
    _recommend(name, NS_LR, app={"cpu": "2", "memory": "1Gi"}, side={"cpu": "20m", "memory": "40Mi"})
    _param_says(name, NS_LR)
    pod = _scaled_pod("Deployment", name, NS_LR)
    # app, cpu: 100m × 1000m / 200m = 500m (limit 1); memory: floor(100Mi × 400Mi / 300Mi) (limit 3× that <= 400Mi);
    # side, from the defaults 10m/500m and 32Mi/64Mi: 20m (limit 1000m, the max) and 40Mi (limit 80Mi)
    assert _by_name(pod) == {"app": (500, 139810133, 1000, 3 * 139810133), "side": (20, 40 * MI, 1000, 80 * MI)}
    kubectl("-n", NS_LR, "scale", "deployment", name, "--replicas=0")


def test_statefulset_and_daemonset_pods_are_covered(namespaces: None) -> None:
    _apply(_workload("StatefulSet", "ring", BURSTABLE), _vpa("ring", "ring", "InPlaceOrRecreate", kind="StatefulSet"),
           _workload("DaemonSet", "everywhere", BURSTABLE, node=None), _vpa("everywhere", "everywhere", "Initial", kind="DaemonSet"))
    kubectl("-n", NS, "rollout", "status", "daemonset/everywhere", "--timeout=180s")  # created before the VPA's status
    for name in ("ring", "everywhere"):
        _recommend(name)
        _param_says(name)
    want = {"app": (250, 200 * MI, 500, 600 * MI), "side": (80, 48 * MI, None, None)}
    assert _by_name(_scaled_pod("StatefulSet", "ring")) == want
    # a DaemonSet's pods are created by the controller on its own: replace one to see a new one admitted
    old = _scheduled("everywhere", count=2)
    assert all(_by_name(p) != want for p in old)  # created before the recommendation
    kubectl("-n", NS, "delete", "pod", old[0]["metadata"]["name"], "--wait=true")
    fresh = wait_for("the DaemonSet's new pod", lambda: [p for p in _scheduled("everywhere", count=2)
                                                         if p["metadata"]["uid"] not in {o["metadata"]["uid"] for o in old}], 120)
    assert _by_name(fresh[0]) == want
    assert fresh[0]["metadata"]["annotations"]["vpaObservedContainers"] == "app, side"
    kubectl("-n", NS, "delete", "daemonset", "everywhere", "--wait=false")
    kubectl("-n", NS, "scale", "statefulset", "ring", "--replicas=0")


def _job_template(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "batch"}}, "spec": {**_pod_spec(containers), "restartPolicy": "Never"}}


def test_job_and_cronjob_pods_are_covered(namespaces: None) -> None:
    """A Job's pod (its controller is the Job), and a CronJob's (its Job is named <cronjob>-<digits>, as
    the CronJob controller names them; made here with `kubectl create job --from`, which names it so)."""
    _apply({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": NS},
            "spec": {"schedule": "0 0 1 1 *", "suspend": True, "jobTemplate": {"spec": {"template": _job_template(BURSTABLE)}}}},
           _vpa("nightly", "nightly", "Initial", kind="CronJob"))
    _recommend("nightly")
    _param_says("nightly")
    _apply({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once", "namespace": NS},
            "spec": {"suspend": True, "template": _job_template(BURSTABLE)}},
           _vpa("once", "once", "Initial", kind="Job"))
    _recommend("once")
    _param_says("once")
    kubectl("-n", NS, "patch", "job", "once", "--type=merge", "-p", '{"spec": {"suspend": false}}')
    kubectl("-n", NS, "create", "job", "nightly-29000000", "--from=cronjob/nightly")
    want = {"app": (250, 200 * MI, 500, 600 * MI), "side": (80, 48 * MI, None, None)}
    for job in ("once", "nightly-29000000"):
        pod = wait_for(f"the pod of Job {job}", lambda job=job: next(iter(json.loads(kubectl(
            "-n", NS, "get", "pods", "-l", f"job-name={job}", "-o", "json"))["items"]), None), 60)
        assert _by_name(pod) == want, job
        assert pod["metadata"]["annotations"]["vpaObservedContainers"] == "app, side"
    kubectl("-n", NS, "delete", "job", "once", "nightly-29000000", "--wait=false")


# ---- the agreement table ---------------------------------------------------------------------------

TEMPLATES: dict[str, list[dict[str, Any]]] = {
    "burstable": BURSTABLE,
    "guaranteed": [_container("app", {"cpu": "200m", "memory": "128Mi"}, {"cpu": "200m", "memory": "128Mi"}),
                   _container("side", {"cpu": "100m", "memory": "64Mi"}, {"cpu": "100m", "memory": "64Mi"})],
    "besteffort": [_container("app"), _container("side")],
    "cpu-limit-only": [_container("app", {"cpu": "100m", "memory": "64Mi"}, {"cpu": "300m"}), _container("side", {"cpu": "10m"})],
}
POLICIES: list[list[dict[str, Any]]] = [
    [{"containerName": "*"}],
    [{"containerName": "*", "controlledResources": ["cpu"]}],
    [{"containerName": "app", "minAllowed": {"cpu": "300m"}, "maxAllowed": {"memory": "150Mi"}}, {"containerName": "*"}],
    [{"containerName": "side", "mode": "Off"}, {"containerName": "*"}],
]
ROWS = [
    (mode, values, qos, i)
    for i, (mode, values, qos) in enumerate(
        (m, v, q) for m in ("Auto", "Initial", "InPlaceOrRecreate", "Off") for v in ("RequestsAndLimits", "RequestsOnly") for q in TEMPLATES)
]


def test_the_policy_and_the_node_agent_compute_the_same_values(namespaces: None) -> None:
    rows: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]]]] = []
    objs: list[dict[str, Any]] = []
    for mode, values, qos, i in ROWS:
        name = f"row-{i}"
        policies = [{**p, "controlledValues": values} for p in POLICIES[i % len(POLICIES)]]
        vpa = _vpa(name, name, mode, policies=policies)
        objs += [_workload("Deployment", name, TEMPLATES[qos]), vpa]
        rows.append((name, vpa, {}, TEMPLATES[qos]))
    _apply(*objs)
    statuses = {name: _recommend(name) for name, *_ in rows}
    for name, *_ in rows:
        _param_says(name, skipped=None)
    compared, differing = 0, []
    for (name, vpa, _, containers), (mode, values, qos, _i) in zip(rows, ROWS, strict=True):
        spec = _pod_spec(containers)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "generateName": f"{name}-", "namespace": NS, "labels": {"app": name, "pod-template-hash": "h"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-h", "uid": str(uuid.uuid4()), "controller": True}]},
            "spec": spec}
        admitted = json.loads(kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(pod)))
        got, want = _by_name(admitted), _node_decision(spec, vpa, statuses[name])
        compared += 1
        if got != want:
            differing.append((name, mode, values, qos, got, want, _said(name)[1]))
    print(f"\ne2e-k8s: VPA admission agreement: {compared} rows, {len(differing)} differing")
    assert compared >= 30
    assert not differing, differing
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        provenance.record(Path(out), "vpa_admission_agreement", lambda data: data.update(vpa_admission_rows=compared))


PL_NS = "kcg-vpa-admission-pl"  # the rows with a LimitRange: the API server applies it to every pod there


def _in(obj: Mapping[str, Any], ns: str) -> dict[str, Any]:
    return {**obj, "apiVersion": obj.get("apiVersion", "v1"), "metadata": {**obj["metadata"], "namespace": ns}}


def test_the_pod_level_rows_agree_through_the_api_server(namespaces: None) -> None:
    """The 15 pod-level rows (tests/vpa/admission_podlevel_rows.py) through the real admission chain: each
    row's Deployment (no replicas), its VPA as this CRD keeps it (podPolicy and podRecommendations in their
    annotations), the container recommendations in its status; a new pod created with server-side dry run
    holds what the node agent's decide_pod_level computes and the hand-worked values."""
    kubectl("create", "namespace", PL_NS, ok=(0, 1))
    try:
        where = {name: PL_NS if lrs else NS for name, _, _, lrs, _ in PL_ROWS}
        objs: list[dict[str, Any]] = []
        for name, spec, vpa, lrs, _ in PL_ROWS:
            kept = as_the_crd_keeps(vpa, where[name])
            kept.pop("status", None)
            deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": where[name]},
                          "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                                   "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}
            objs += [deployment, kept, *(_in(lr, where[name]) for lr in lrs)]
        _apply(*objs)
        for name, _, vpa, _, _ in PL_ROWS:
            recs = {"containerRecommendations": vpa["status"]["recommendation"]["containerRecommendations"]}
            kubectl("-n", where[name], "patch", "vpa", name, "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"recommendation": recs}}))
        for name, *_, hand in PL_ROWS:
            if hand is not None:
                _param_says(name, where[name])
        compared, differing = 0, []
        for name, spec, vpa, lrs, hand in PL_ROWS:
            ns = where[name]
            pod = new_pod(name, spec, ns)
            got = resources_of(view(json.loads(kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(pod)))))
            want = pod_level_decision(name, spec, vpa, [_in(lr, ns) for lr in lrs], ns)
            before = resources_of(view(pod))
            compared += 1
            if got != want or got != (before | hand if hand is not None else before):
                differing.append((name, got, want, hand, _said(name, ns)[1]))
        print(f"\ne2e-k8s: VPA admission agreement, pod-level rows: {compared} rows, {len(differing)} differing")
        assert (compared, differing) == (len(PL_ROWS), [])
        if out := os.environ.get("KCG_E2E_K8S_OUT"):
            provenance.record(Path(out), "vpa_admission_pod_level", lambda data: data.update(vpa_admission_pod_level_rows=compared))
    finally:
        kubectl("delete", "namespace", PL_NS, "--wait=false", ok=(0, 1))


# ---- pod creation latency ---------------------------------------------------------------------------


def _create_times(ns: str, name: str, n: int) -> list[float]:
    """`n` pods created one after the other as the ReplicaSet of `name` would create them (scheduling
    gated, so nothing runs), each POST timed end to end (the agent's own API client); then deleted."""
    api = APIServer(api_client(str(RK / "kubeconfig")))
    times = []
    for _ in range(n):
        body = {"metadata": {"generateName": f"{name}-", "labels": {"app": f"{name}-timed", "pod-template-hash": "h"},
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-h",
                                                  "uid": str(uuid.uuid4()), "controller": True}]},
                "spec": {**_pod_spec(BURSTABLE), "schedulingGates": [{"name": "kube-cgroup-agent.io/timed"}]}}
        t0 = time.perf_counter()
        created = api.create(path("v1", "pods", ns), body)
        times.append((time.perf_counter() - t0) * 1000)
        assert "vpaUpdates" in (created["metadata"].get("annotations") or {}) or not _binding_present()
    kubectl("-n", ns, "delete", "pods", "-l", f"app={name}-timed", "--grace-period=0", "--wait=false")
    return times


def _binding_present() -> bool:
    return bool(kubectl("get", "mutatingadmissionpolicybinding", "kube-cgroup-agent-vpa", "--ignore-not-found", "-o", "name").strip())


def _p90(xs: list[float]) -> float:
    return sorted(xs)[int(0.9 * len(xs)) - 1]


def test_pod_creation_latency_with_and_without_the_policy(namespaces: None) -> None:
    """Median of 50 creates each: a namespace with one VPA, and the namespace of the agreement table (some
    forty VPAs), then both again without the binding."""
    name = "timed"
    _apply(_workload("Deployment", name, BURSTABLE, ns=NS_TIMED), _vpa(name, name, "Auto", ns=NS_TIMED),
           _workload("Deployment", name, BURSTABLE), _vpa(name, name, "Auto"))
    for ns in (NS_TIMED, NS):
        _recommend(name, ns)
        _param_says(name, ns)
    many = len(json.loads(kubectl("-n", NS, "get", "vpa", "-o", "json"))["items"])
    _create_times(NS_TIMED, name, 5)  # warm the connection and the API server's caches
    with_policy = {ns: _create_times(ns, name, 50) for ns in (NS_TIMED, NS)}
    binding = kubectl("get", "mutatingadmissionpolicybinding", "kube-cgroup-agent-vpa", "-o", "json")
    kubectl("delete", "mutatingadmissionpolicybinding", "kube-cgroup-agent-vpa")
    try:
        wait_for("the binding gone", lambda: not _binding_present(), 30)
        time.sleep(2)  # the API server's policy source notices it
        without = {ns: _create_times(ns, name, 50) for ns in (NS_TIMED, NS)}
    finally:
        restored = json.loads(binding)
        restored["metadata"] = {"name": restored["metadata"]["name"]}
        kubectl("apply", "-f", "-", stdin=json.dumps(restored))
    figures = {}
    for ns, label in ((NS_TIMED, "1"), (NS, str(many))):
        w, wo = with_policy[ns], without[ns]
        assert len(w) == len(wo) == 50
        figures[label] = {"with_ms": round(statistics.median(w), 2), "without_ms": round(statistics.median(wo), 2),
                          "with_p90_ms": round(_p90(w), 2), "without_p90_ms": round(_p90(wo), 2)}
        print(f"\ne2e-k8s: pod create, {label} VPA(s) in the namespace: median {figures[label]['with_ms']} ms with the policy, "
              f"{figures[label]['without_ms']} ms without (p90 {figures[label]['with_p90_ms']} / {figures[label]['without_p90_ms']} ms)")
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        provenance.record(Path(out), "vpa_admission_latency", lambda data: data.update(pod_create_ms_by_vpas_in_namespace=figures))


def test_without_the_vpa_crd_pods_are_created_unchanged(namespaces: None) -> None:
    """Last: the VPA CRD is removed (its VPAs with it; their parameters follow, owned by them), then put back."""
    name = "crd-gone"
    _apply(_workload("Deployment", name, BURSTABLE), _vpa(name, name, "Auto"))
    _recommend(name)
    _param_says(name)
    kubectl("delete", "-f", str(VPA_CRD), "--wait=true", timeout=180)
    try:
        wait_for("the parameters gone with their VPAs", lambda: _params() is None, 120)
        pod = _scaled_pod("Deployment", name)
        assert _by_name(pod) == {"app": (100, 100 * MI, 200, 300 * MI), "side": (50, 32 * MI, None, None)}
        assert "vpaUpdates" not in (pod["metadata"].get("annotations") or {})
    finally:
        kubectl("apply", "-f", str(VPA_CRD))
        kubectl("wait", "--for=condition=Established", "crd/verticalpodautoscalers.autoscaling.k8s.io", "--timeout=60s")
    kubectl("-n", NS, "scale", "deployment", name, "--replicas=0")
