"""The pod-level rows of the VPA admission agreement table (issue 42, docs/vpa-pod-level.md): each a template,
a VPA (its podPolicy and podRecommendations in the fields AEP-7571 names), the namespace's LimitRanges and
what the admitted pod holds, hand-worked; and what the node agent's decide_pod_level makes of the same pod.
Used without a cluster (tests/vpa/test_admission_agreement.py, the policy's model) and through the real API
server (tests/e2e_k8s/test_vpa_admission.py, the VPA as the CRD keeps it: `as_the_crd_keeps`)."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.core.model import EMPTY, PodView, Resources
from agent.pods.parse import parse_pod
from agent.pods.sources.limitrange_rules import parse_all
from agent.vpa.model import POD_POLICY_ANNOTATION, POD_RECOMMENDATION_ANNOTATION, UpdateMode
from agent.vpa.parse import parse_vpa
from agent.vpa.podlevel import pod_bounds
from agent.vpa.podlevel_decide import decide_pod_level
from agent.vpa.policy import Options
from tests.e2e_k8s.admission_objects import NS, _vpa

APP, SIDE = {"cpu": "250m", "memory": "200Mi"}, {"cpu": "50m", "memory": "56Mi"}
Values = dict[str, tuple[int | None, ...]]


def recommended(app: Mapping[str, str] | None = APP, side: Mapping[str, str] | None = SIDE, pod: Mapping[str, str] | None = None) -> dict[str, Any]:
    recs = [{"containerName": n, "target": dict(t)} for n, t in (("app", app), ("side", side)) if t]
    rec: dict[str, Any] = {"containerRecommendations": recs}
    if pod is not None:
        rec["podRecommendations"] = {"target": dict(pod)}
    return {"recommendation": rec}


def new_pod(name: str, spec: Mapping[str, Any], ns: str = NS) -> dict[str, Any]:
    """A new pod of Deployment `name`, as its ReplicaSet creates it."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": f"{name}-", "namespace": ns, "labels": {"app": name, "pod-template-hash": "h"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-h", "uid": str(uuid.uuid4()), "controller": True}]},
        "spec": dict(spec)}


def resources_of(p: PodView) -> Values:
    def four(req: Resources, lim: Resources) -> tuple[int | None, ...]:
        return (req.cpu_milli, req.memory, lim.cpu_milli, lim.memory)

    out = {c.name: four(c.requests, c.limits) for c in p.containers}
    if p.pod_requests is not None or p.pod_limits is not None:
        out["<pod>"] = four(p.pod_requests or EMPTY, p.pod_limits or EMPTY)
    return out


def view(raw: Mapping[str, Any]) -> PodView:
    return parse_pod({**raw, "metadata": {**raw["metadata"], "name": "p", "uid": str(uuid.uuid4())}}, ())


def pod_level_decision(
    name: str, spec: Mapping[str, Any], vpa_raw: Mapping[str, Any], lrs: Sequence[Mapping[str, Any]], ns: str = NS
) -> Values:
    """What the node agent's decide_pod_level makes of this pod: the sizing of a running pod, in any mode
    but Off (a new pod takes it whatever the updater's conditions), without a working set (nothing runs)."""
    pod = view(new_pod(name, spec, ns))
    vpa = parse_vpa(vpa_raw)
    out = resources_of(pod)
    if vpa.mode is UpdateMode.OFF or not vpa.opted_in:
        return out
    ranges, _ = parse_all(lrs)
    v = decide_pod_level(pod, replace(vpa, mode=UpdateMode.IN_PLACE), None, False, Options(),
                         bounds=pod_bounds(ranges.get(ns, ())), reaction="a new pod")
    if not v.apply:
        return out
    if v.pod is not None:
        out["<pod>"] = (v.pod.requests.cpu_milli, v.pod.requests.memory, v.pod.limits.cpu_milli, v.pod.limits.memory)
    for t in v.containers:
        out[t.container] = (t.requests.cpu_milli, t.requests.memory, t.limits.cpu_milli, t.limits.memory)
    return out


MI = 1 << 20
SHARED = {"requests": {"cpu": "200m", "memory": "200Mi"}, "limits": {"cpu": "400m", "memory": "400Mi"}}
BARE = [{"name": "app", "image": "i"}, {"name": "side", "image": "i"}]
OWN = {"name": "app", "image": "i", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}, "limits": {"cpu": "200m", "memory": "300Mi"}}}
BOTH = {"containers": [OWN, BARE[1]], "resources": {"requests": {"cpu": "300m", "memory": "300Mi"}, "limits": {"cpu": "600m", "memory": "600Mi"}}}
PL = {"containers": BARE, "resources": SHARED}
GUARANTEED = {"containers": BARE, "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}}
REQUESTS = {"containers": BARE, "resources": {"requests": {"cpu": "200m", "memory": "200Mi"}}}
POD_MAX = {"kind": "LimitRange", "metadata": {"name": "pod", "namespace": NS}, "spec": {"limits": [{"type": "Pod", "max": {"cpu": "500m"}}]}}


def pl_vpa(name: str, mode: str = "Auto", status: dict[str, Any] | None = None, pod_policy: dict[str, Any] | None = None,
            policies: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    raw = {**_vpa(name, name, mode, policies=policies), "status": status if status is not None else recommended()}
    if pod_policy is not None:
        raw["spec"]["resourcePolicy"] = {**raw["spec"].get("resourcePolicy", {}), "podPolicy": pod_policy}
    return raw


# (name, template, VPA, LimitRanges, what the admitted pod holds: hand-worked from docs/vpa-pod-level.md)
PL_ROWS: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, Any]], Values | None]] = [
    # the VPA's own podRecommendations 300m/256Mi; limits keep the ratio 2
    ("pod-level-only", PL, pl_vpa("pod-level-only", status=recommended(pod={"cpu": "300m", "memory": "256Mi"})), [],
     {"<pod>": (300, 256 * MI, 600, 512 * MI)}),
    # container recommendations only: app 250m/200Mi + side 50m/56Mi summed
    ("summed", PL, pl_vpa("summed"), [], {"<pod>": (300, 256 * MI, 600, 512 * MI)}),
    # both levels (option 2): app sets its own, so it is sized as decide() sizes it (250m/200Mi, limits
    # 2× and 3×: 500m, 600Mi); the pod level is app's 250m/200Mi + side's 50m/56Mi, its limits 2×; app's
    # memory limit 600Mi is then above the new pod limit 512Mi and is fitted to it
    ("both-levels", BOTH, pl_vpa("both-levels"), [],
     {"<pod>": (300, 256 * MI, 600, 512 * MI), "app": (250, 200 * MI, 500, 512 * MI)}),
    # podPolicy maxAllowed cpu 250m: the pod-level request 250m, its limit 500m
    ("max-allowed", PL, pl_vpa("max-allowed", pod_policy={"maxAllowed": {"cpu": "250m"}}), [],
     {"<pod>": (250, 256 * MI, 500, 512 * MI)}),
    # limits proportional: equal to the request, they follow it (the class stays Guaranteed)
    ("guaranteed", GUARANTEED, pl_vpa("guaranteed"), [], {"<pod>": (300, 256 * MI, 300, 256 * MI)}),
    # RequestsOnly: limits kept, the request capped at the pod limit (memory 600Mi -> 400Mi)
    ("requests-only", PL, pl_vpa("requests-only", status=recommended(pod={"cpu": "300m", "memory": "600Mi"}),
                                  pod_policy={"controlledValues": "RequestsOnly"}), [],
     {"<pod>": (300, 400 * MI, 400, 400 * MI)}),
    # only cpu controlled at pod level
    ("cpu-only", PL, pl_vpa("cpu-only", pod_policy={"controlledResources": ["cpu"]}), [], {"<pod>": (300, 200 * MI, 600, 400 * MI)}),
    # no pod-level limit: none made up
    ("requests-no-limits", REQUESTS, pl_vpa("requests-no-limits"), [], {"<pod>": (300, 256 * MI, None, None)}),
    # LimitRange type Pod max cpu 500m on a limit 2× the request: the request at most 200m × 500m / 400m = 250m
    ("pod-limitrange", PL, pl_vpa("pod-limitrange"), [POD_MAX], {"<pod>": (250, 256 * MI, 500, 512 * MI)}),
    # a lower pod level (target 75m/200Mi, limits 2×: 150m/400Mi), app without a recommendation of its
    # own: its cpu limit 200m is lowered to the pod's 150m, its request 100m then scaled to the pod's 75m
    ("fitted", BOTH, pl_vpa("fitted", status=recommended(app=None, side=None, pod={"cpu": "75m", "memory": "200Mi"})), [],
     {"<pod>": (75, 200 * MI, 150, 400 * MI), "app": (75, 100 * MI, 150, 300 * MI)}),
    ("initial", PL, pl_vpa("initial", mode="Initial"), [], {"<pod>": (300, 256 * MI, 600, 512 * MI)}),
    ("in-place-or-recreate", BOTH, pl_vpa("in-place-or-recreate", mode="InPlaceOrRecreate"), [],
     {"<pod>": (300, 256 * MI, 600, 512 * MI), "app": (250, 200 * MI, 500, 512 * MI)}),
    ("off", PL, pl_vpa("off", mode="Off"), [], None),  # None: the pod as its template made it
    ("pod-policy-off", BOTH, pl_vpa("pod-policy-off", pod_policy={"mode": "Off"}), [], None),
    ("not-opted-in", PL, {**pl_vpa("not-opted-in"), "metadata": {"name": "not-opted-in", "namespace": NS}}, [], None),
]


def as_the_crd_keeps(vpa: Mapping[str, Any], ns: str) -> dict[str, Any]:
    """The row's VPA in namespace `ns` as a VPA CRD without AEP-7571's fields keeps it: podPolicy and
    podRecommendations in their annotations (agent.vpa.parse reads either), the status's container
    recommendations alone (written through the status subresource)."""
    out = copy.deepcopy(dict(vpa))
    meta = out["metadata"] = {**out["metadata"], "namespace": ns}
    notes = dict(meta.get("annotations") or {})
    policy = (out["spec"].get("resourcePolicy") or {}).pop("podPolicy", None)
    if policy is not None:
        notes[POD_POLICY_ANNOTATION] = json.dumps(policy)
    recommendation = (out.get("status") or {}).get("recommendation") or {}
    if (pod := recommendation.pop("podRecommendations", None)) is not None:
        notes[POD_RECOMMENDATION_ANNOTATION] = json.dumps(pod)
    if notes:
        meta["annotations"] = notes
    return out
