"""The agreement table without a cluster: each row's VPA, workload and LimitRanges go through the keeper
(agent.vpa.admission_cluster.desired, the namespace's parameter object), a new pod of the workload
through the policy (tests/vpa/admission_policy_model.py, the model of deploy/vpa-admission/policy.yaml),
and the admitted pod's requests and limits, pod level included, are compared with the node agent's own
decision for the same pod: agent.vpa.policy for the 32 container rows of `make e2e-k8s`
(tests/e2e_k8s/test_vpa_admission.py, whose rows these are), decide_pod_level for the pod-level rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.vpa.admission_cluster import desired, trimmer
from tests.e2e_k8s.admission_objects import NS, _node_decision, _pod_spec, _vpa, _workload
from tests.e2e_k8s.test_vpa_admission import POLICIES, ROWS, TEMPLATES
from tests.vpa import admission_policy_model as model
from tests.vpa.admission_podlevel_rows import (
    BARE,
    OWN,
    PL,
    PL_ROWS,
    SHARED,
    Values,
    as_the_crd_keeps,
    new_pod,
    pl_vpa,
    pod_level_decision,
    resources_of,
    view,
)

POLICY = Path(__file__).resolve().parents[2] / "deploy" / "vpa-admission" / "policy.yaml"


def _admitted(name: str, spec: Mapping[str, Any], vpa: Mapping[str, Any], lrs: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The pod the policy admits with the parameter object the keeper writes for this row alone."""
    workload = trimmer("Deployment")(_workload("Deployment", name, spec["containers"]) | {"spec": {"template": {"spec": spec}}})
    out = desired([vpa], {"Deployment": {(NS, name): workload}}, lrs)
    assert not out.problems
    return model.admit(new_pod(name, spec), out.objects.get((NS, "vpa-admission")))


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
        got, want = resources_of(view(_admitted(name, spec, vpa))), _node_decision(spec, vpa, status)
        compared += 1
        if got != want:
            differing.append((name, mode, values, qos, got, want))
    assert (compared, differing) == (32, [])


# ---- the pod-level rows ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "spec", "vpa", "lrs", "hand"), PL_ROWS, ids=[r[0] for r in PL_ROWS])
def test_a_pod_level_row_agrees(name: str, spec: dict[str, Any], vpa: dict[str, Any], lrs: list[dict[str, Any]], hand: Values | None) -> None:
    before = resources_of(view(new_pod(name, spec)))
    got = resources_of(view(_admitted(name, spec, vpa, lrs)))
    assert got == pod_level_decision(name, spec, vpa, lrs)
    assert got == (before | hand if hand is not None else before)


@pytest.mark.parametrize(("name", "spec", "vpa", "lrs"), [r[:4] for r in PL_ROWS], ids=[r[0] for r in PL_ROWS])
def test_a_pod_level_row_as_the_crd_keeps_it_decides_the_same(name: str, spec: dict[str, Any], vpa: dict[str, Any],
                                                                 lrs: list[dict[str, Any]]) -> None:
    """`make e2e-k8s` sends the rows through a VPA CRD that has no podPolicy or podRecommendations: in their
    annotations the node agent and the keeper decide the same values."""
    kept = as_the_crd_keeps(vpa, NS)
    assert "podPolicy" not in str(kept["spec"]) and "podRecommendations" not in str(kept.get("status"))
    assert pod_level_decision(name, spec, kept, lrs) == pod_level_decision(name, spec, vpa, lrs)
    assert resources_of(view(_admitted(name, spec, kept, lrs))) == resources_of(view(_admitted(name, spec, vpa, lrs)))


def test_the_pod_level_table_covers_the_cases() -> None:
    assert len(PL_ROWS) == 15
    assert sum(1 for *_, hand in PL_ROWS if hand is None) == 3


# ---- what the policy never does -------------------------------------------------------------------


def test_a_pod_of_another_template_is_left_as_it_is() -> None:
    """Its pod-level values differ from `pod.from`; or it sets pod-level resources and the entry (computed
    for a template without them) has no `pod`: setting container values there could break its pod limit."""
    params = desired([pl_vpa("other")], {"Deployment": {(NS, "other"): {"template": PL}}}, []).objects[(NS, "vpa-admission")]
    moved = new_pod("other", {**PL, "resources": {**SHARED, "limits": {"cpu": "500m", "memory": "400Mi"}}})
    assert model.admit(moved, params) == moved
    same = new_pod("other", {**PL, "resources": {"requests": {"cpu": "0.2", "memory": "200Mi"}, "limits": {"cpu": "400m", "memory": "0.390625Gi"}}})
    assert model.admit(same, params) != same  # the same values written otherwise: compared as quantities
    plain = {"containers": [OWN, BARE[1]]}
    params = desired([pl_vpa("plain")], {"Deployment": {(NS, "plain"): {"template": plain}}}, []).objects[(NS, "vpa-admission")]
    assert "pod" not in params["spec"]["workloads"]["Deployment/plain"]
    with_pod_level = {**plain, "resources": SHARED}
    assert model.admit(new_pod("plain", with_pod_level), params)["spec"] == with_pod_level
    assert "vpaUpdates" in model.admit(new_pod("plain", plain), params)["metadata"]["annotations"]


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
