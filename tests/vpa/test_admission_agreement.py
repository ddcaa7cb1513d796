"""The agreement table without a cluster: each row's VPA, workload and LimitRanges go through the keeper
(agent.vpa.admission_cluster.desired, the namespace's parameter object), a new pod of the workload
through the policy (tests/vpa/admission_policy_model.py, the model of deploy/vpa-admission/policy.yaml),
and the admitted pod's requests and limits, pod level included, are compared with the node agent's own
decision for the same pod: agent.vpa.policy for the 32 container rows of `make e2e-k8s`
(tests/e2e_k8s/test_vpa_admission.py, whose rows these are), decide_pod_level for the pod-level rows."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.core.model import EMPTY, PodView, Resources
from agent.pods.parse import parse_pod
from agent.pods.sources.limitrange_rules import parse_all
from agent.vpa.admission_cluster import desired, trimmer
from agent.vpa.model import UpdateMode
from agent.vpa.parse import parse_vpa
from agent.vpa.podlevel import pod_bounds
from agent.vpa.podlevel_decide import decide_pod_level
from agent.vpa.policy import Options
from tests.e2e_k8s.admission_objects import NS, _node_decision, _pod_spec, _vpa, _workload
from tests.e2e_k8s.test_vpa_admission import POLICIES, ROWS, TEMPLATES
from tests.vpa import admission_policy_model as model

POLICY = Path(__file__).resolve().parents[2] / "deploy" / "vpa-admission" / "policy.yaml"
APP, SIDE = {"cpu": "250m", "memory": "200Mi"}, {"cpu": "50m", "memory": "56Mi"}
Values = dict[str, tuple[int | None, ...]]


def _status(app: Mapping[str, str] | None = APP, side: Mapping[str, str] | None = SIDE, pod: Mapping[str, str] | None = None) -> dict[str, Any]:
    recs = [{"containerName": n, "target": dict(t)} for n, t in (("app", app), ("side", side)) if t]
    rec: dict[str, Any] = {"containerRecommendations": recs}
    if pod is not None:
        rec["podRecommendations"] = {"target": dict(pod)}
    return {"recommendation": rec}


def _pod(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A new pod of Deployment `name`, as its ReplicaSet creates it."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": f"{name}-", "namespace": NS, "labels": {"app": name, "pod-template-hash": "h"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-h", "uid": str(uuid.uuid4()), "controller": True}]},
        "spec": dict(spec)}


def _admitted(name: str, spec: Mapping[str, Any], vpa: Mapping[str, Any], lrs: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The pod the policy admits with the parameter object the keeper writes for this row alone."""
    workload = trimmer("Deployment")(_workload("Deployment", name, spec["containers"]) | {"spec": {"template": {"spec": spec}}})
    out = desired([vpa], {"Deployment": {(NS, name): workload}}, lrs)
    assert not out.problems
    return model.admit(_pod(name, spec), out.objects.get((NS, "vpa-admission")))


def _values(p: PodView) -> Values:
    def four(req: Resources, lim: Resources) -> tuple[int | None, ...]:
        return (req.cpu_milli, req.memory, lim.cpu_milli, lim.memory)

    out = {c.name: four(c.requests, c.limits) for c in p.containers}
    if p.pod_requests is not None or p.pod_limits is not None:
        out["<pod>"] = four(p.pod_requests or EMPTY, p.pod_limits or EMPTY)
    return out


def _view(raw: Mapping[str, Any]) -> PodView:
    return parse_pod({**raw, "metadata": {**raw["metadata"], "name": "p", "uid": str(uuid.uuid4())}}, ())


def _pod_level_decision(name: str, spec: Mapping[str, Any], vpa_raw: Mapping[str, Any], lrs: Sequence[Mapping[str, Any]]) -> Values:
    """What the node agent's decide_pod_level makes of this pod: the sizing of a running pod, in any mode
    but Off (a new pod takes it whatever the updater's conditions), without a working set (nothing runs)."""
    pod = _view(_pod(name, spec))
    vpa = parse_vpa(vpa_raw)
    out = _values(pod)
    if vpa.mode is UpdateMode.OFF or not vpa.opted_in:
        return out
    ranges, _ = parse_all(lrs)
    v = decide_pod_level(pod, replace(vpa, mode=UpdateMode.IN_PLACE), None, False, Options(),
                         bounds=pod_bounds(ranges.get(NS, ())), reaction="a new pod")
    if not v.apply:
        return out
    if v.pod is not None:
        out["<pod>"] = (v.pod.requests.cpu_milli, v.pod.requests.memory, v.pod.limits.cpu_milli, v.pod.limits.memory)
    for t in v.containers:
        out[t.container] = (t.requests.cpu_milli, t.requests.memory, t.limits.cpu_milli, t.limits.memory)
    return out


# ---- the container rows (make e2e-k8s's 32) --------------------------------------------------------


def test_the_container_rows_agree() -> None:
    compared, differing = 0, []
    for mode, values, qos, i in ROWS:
        name = f"row-{i}"
        policies = [{**p, "controlledValues": values} for p in POLICIES[i % len(POLICIES)]]
        status = {"recommendation": {"containerRecommendations": [
            {"containerName": "app", "target": {"cpu": "250m", "memory": "200Mi"}},
            {"containerName": "side", "target": {"cpu": "80m", "memory": "48Mi"}}]}}
        vpa = {**_vpa(name, name, mode, policies=policies), "status": status}
        spec = _pod_spec(TEMPLATES[qos])
        got, want = _values(_view(_admitted(name, spec, vpa))), _node_decision(spec, vpa, status)
        compared += 1
        if got != want:
            differing.append((name, mode, values, qos, got, want))
    assert (compared, differing) == (32, [])


# ---- the pod-level rows ------------------------------------------------------------------------------

MI = 1 << 20
SHARED = {"requests": {"cpu": "200m", "memory": "200Mi"}, "limits": {"cpu": "400m", "memory": "400Mi"}}
BARE = [{"name": "app", "image": "i"}, {"name": "side", "image": "i"}]
OWN = {"name": "app", "image": "i", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}, "limits": {"cpu": "200m", "memory": "300Mi"}}}
BOTH = {"containers": [OWN, BARE[1]], "resources": {"requests": {"cpu": "300m", "memory": "300Mi"}, "limits": {"cpu": "600m", "memory": "600Mi"}}}
PL = {"containers": BARE, "resources": SHARED}
GUARANTEED = {"containers": BARE, "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}}
REQUESTS = {"containers": BARE, "resources": {"requests": {"cpu": "200m", "memory": "200Mi"}}}
POD_MAX = {"kind": "LimitRange", "metadata": {"name": "pod", "namespace": NS}, "spec": {"limits": [{"type": "Pod", "max": {"cpu": "500m"}}]}}


def _pl_vpa(name: str, mode: str = "Auto", status: dict[str, Any] | None = None, pod_policy: dict[str, Any] | None = None,
            policies: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    raw = {**_vpa(name, name, mode, policies=policies), "status": status if status is not None else _status()}
    if pod_policy is not None:
        raw["spec"]["resourcePolicy"] = {**raw["spec"].get("resourcePolicy", {}), "podPolicy": pod_policy}
    return raw


# (name, template, VPA, LimitRanges, what the admitted pod holds: hand-worked from docs/vpa-pod-level.md)
PL_ROWS: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]], Values | None]] = [
    # the VPA's own podRecommendations 300m/256Mi; limits keep the ratio 2
    ("pod-level-only", PL, _pl_vpa("pod-level-only", status=_status(pod={"cpu": "300m", "memory": "256Mi"})), [],
     {"<pod>": (300, 256 * MI, 600, 512 * MI)}),
    # container recommendations only: app 250m/200Mi + side 50m/56Mi summed
    ("summed", PL, _pl_vpa("summed"), [], {"<pod>": (300, 256 * MI, 600, 512 * MI)}),
    # both levels (option 2): app sets its own, so it is sized as decide() sizes it (250m/200Mi, limits
    # 2× and 3×: 500m, 600Mi); the pod level is app's 250m/200Mi + side's 50m/56Mi, its limits 2×; app's
    # memory limit 600Mi is then above the new pod limit 512Mi and is fitted to it
    ("both-levels", BOTH, _pl_vpa("both-levels"), [],
     {"<pod>": (300, 256 * MI, 600, 512 * MI), "app": (250, 200 * MI, 500, 512 * MI)}),
    # podPolicy maxAllowed cpu 250m: the pod-level request 250m, its limit 500m
    ("max-allowed", PL, _pl_vpa("max-allowed", pod_policy={"maxAllowed": {"cpu": "250m"}}), [],
     {"<pod>": (250, 256 * MI, 500, 512 * MI)}),
    # limits proportional: equal to the request, they follow it (the class stays Guaranteed)
    ("guaranteed", GUARANTEED, _pl_vpa("guaranteed"), [], {"<pod>": (300, 256 * MI, 300, 256 * MI)}),
    # RequestsOnly: limits kept, the request capped at the pod limit (memory 600Mi -> 400Mi)
    ("requests-only", PL, _pl_vpa("requests-only", status=_status(pod={"cpu": "300m", "memory": "600Mi"}),
                                  pod_policy={"controlledValues": "RequestsOnly"}), [],
     {"<pod>": (300, 400 * MI, 400, 400 * MI)}),
    # only cpu controlled at pod level
    ("cpu-only", PL, _pl_vpa("cpu-only", pod_policy={"controlledResources": ["cpu"]}), [], {"<pod>": (300, 200 * MI, 600, 400 * MI)}),
    # no pod-level limit: none made up
    ("requests-no-limits", REQUESTS, _pl_vpa("requests-no-limits"), [], {"<pod>": (300, 256 * MI, None, None)}),
    # LimitRange type Pod max cpu 500m on a limit 2× the request: the request at most 200m × 500m / 400m = 250m
    ("pod-limitrange", PL, _pl_vpa("pod-limitrange"), [POD_MAX], {"<pod>": (250, 256 * MI, 500, 512 * MI)}),
    # a lower pod level (target 75m/200Mi, limits 2×: 150m/400Mi), app without a recommendation of its
    # own: its cpu limit 200m is lowered to the pod's 150m, its request 100m then scaled to the pod's 75m
    ("fitted", BOTH, _pl_vpa("fitted", status=_status(app=None, side=None, pod={"cpu": "75m", "memory": "200Mi"})), [],
     {"<pod>": (75, 200 * MI, 150, 400 * MI), "app": (75, 100 * MI, 150, 300 * MI)}),
    ("initial", PL, _pl_vpa("initial", mode="Initial"), [], {"<pod>": (300, 256 * MI, 600, 512 * MI)}),
    ("in-place-or-recreate", BOTH, _pl_vpa("in-place-or-recreate", mode="InPlaceOrRecreate"), [],
     {"<pod>": (300, 256 * MI, 600, 512 * MI), "app": (250, 200 * MI, 500, 512 * MI)}),
    ("off", PL, _pl_vpa("off", mode="Off"), [], None),  # None: the pod as its template made it
    ("pod-policy-off", BOTH, _pl_vpa("pod-policy-off", pod_policy={"mode": "Off"}), [], None),
    ("not-opted-in", PL, {**_pl_vpa("not-opted-in"), "metadata": {"name": "not-opted-in", "namespace": NS}}, [], None),
]


@pytest.mark.parametrize(("name", "spec", "vpa", "lrs", "hand"), PL_ROWS, ids=[r[0] for r in PL_ROWS])
def test_a_pod_level_row_agrees(name: str, spec: dict[str, Any], vpa: dict[str, Any], lrs: list[dict[str, Any]], hand: Values | None) -> None:
    before = _values(_view(_pod(name, spec)))
    got = _values(_view(_admitted(name, spec, vpa, lrs)))
    assert got == _pod_level_decision(name, spec, vpa, lrs)
    assert got == (before | hand if hand is not None else before)


def test_the_pod_level_table_covers_the_cases() -> None:
    assert len(PL_ROWS) == 15
    assert sum(1 for *_, hand in PL_ROWS if hand is None) == 3


# ---- what the policy never does -------------------------------------------------------------------


def test_a_pod_of_another_template_is_left_as_it_is() -> None:
    """Its pod-level values differ from `pod.from`; or it sets pod-level resources and the entry (computed
    for a template without them) has no `pod`: setting container values there could break its pod limit."""
    params = desired([_pl_vpa("other")], {"Deployment": {(NS, "other"): {"template": PL}}}, []).objects[(NS, "vpa-admission")]
    moved = _pod("other", {**PL, "resources": {**SHARED, "limits": {"cpu": "500m", "memory": "400Mi"}}})
    assert model.admit(moved, params) == moved
    same = _pod("other", {**PL, "resources": {"requests": {"cpu": "0.2", "memory": "200Mi"}, "limits": {"cpu": "400m", "memory": "0.390625Gi"}}})
    assert model.admit(same, params) != same  # the same values written otherwise: compared as quantities
    plain = {"containers": [OWN, BARE[1]]}
    params = desired([_pl_vpa("plain")], {"Deployment": {(NS, "plain"): {"template": plain}}}, []).objects[(NS, "vpa-admission")]
    assert "pod" not in params["spec"]["workloads"]["Deployment/plain"]
    with_pod_level = {**plain, "resources": SHARED}
    assert model.admit(_pod("plain", with_pod_level), params)["spec"] == with_pod_level
    assert "vpaUpdates" in model.admit(_pod("plain", plain), params)["metadata"]["annotations"]


def test_the_model_stands_for_the_policys_expressions() -> None:
    """The steps the model takes are the policy's: if these change, the model must change with them."""
    policy = next(d for d in yaml.safe_load_all(POLICY.read_text()) if d["kind"] == "MutatingAdmissionPolicy")
    spec = policy["spec"]
    assert [v["name"] for v in spec["variables"]] == ["ref", "hash", "key", "entry", "same", "samePod"]
    assert [m["name"] for m in spec["matchConditions"]] == ["a-listed-workload"]
    (mutation,) = spec["mutations"]
    expr = mutation["applyConfiguration"]["expression"]
    assert expr.startswith("!(variables.same && variables.samePod) ? Object{} :")
    assert "!has(variables.entry.pod) ? Object{" in expr
    assert "resources: Object.spec.resources{" in expr
    assert "has(p.to.requests) && size(p.to.requests) > 0 || has(p.to.limits) && size(p.to.limits) > 0" in expr
    assert spec["failurePolicy"] == "Ignore" and spec["reinvocationPolicy"] == "Never"
