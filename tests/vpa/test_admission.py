"""What the VPA admission policy's parameters say for one VPA (agent.vpa.admission), table-driven; each
expected value is worked out by hand in its comment from the rule named in the module's docstring."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from agent.core.model import ContainerKind, ContainerView, Resources
from agent.pods.sources.limitrange_rules import parse_all
from agent.vpa.admission import Owner, admission_params, namespace_object, owner_for, rivals_of
from agent.vpa.admission_pod import (
    ContainerBounds,
    admitted_containers,
    container_bounds,
    defaulted_item,
    limit_range_capped,
)
from agent.vpa.parse import parse_vpa
from agent.vpa.policy import Options

MI = 1 << 20


def vpa(
    mode: str = "Initial",
    target: dict[str, str] | None = None,
    policies: list[dict[str, Any]] | None = None,
    kind: str = "Deployment",
    opted: bool = True,
    name: str = "web",
    recs: list[dict[str, Any]] | None = None,
    pod_policy: dict[str, Any] | None = None,
    pod_rec: dict[str, str] | None = None,
) -> Any:
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"} if opted else {}},
        "spec": {"targetRef": {"kind": kind, "name": "web"}, "updatePolicy": {"updateMode": mode}},
    }
    if policies is not None:
        raw["spec"]["resourcePolicy"] = {"containerPolicies": policies}
    if recs is None:
        recs = [{"containerName": "app", "target": target or {"cpu": "250m", "memory": "200Mi"}}]
    raw["status"] = {"recommendation": {"containerRecommendations": recs}} if recs else {}
    if pod_policy is not None:
        raw["spec"].setdefault("resourcePolicy", {})["podPolicy"] = pod_policy
    if pod_rec is not None:
        raw["status"].setdefault("recommendation", {})["podRecommendations"] = {"target": pod_rec}
    return parse_vpa(raw)


def template(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"containers": [{"image": "i", **c} for c in containers]}


def app(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, name: str = "app") -> dict[str, Any]:
    res = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {"name": name, "resources": res}


def lr(*items: dict[str, Any], name: str = "lr") -> dict[str, Any]:
    return {"kind": "LimitRange", "metadata": {"name": name, "namespace": "ns"}, "spec": {"limits": list(items)}}


def params(
    v: Any, tmpl: dict[str, Any] | None, lrs: Sequence[dict[str, Any]] = (), rivals: tuple[str, ...] = (), opts: Options | None = None
) -> Any:
    ranges, problems = parse_all(lrs)
    assert not problems
    return admission_params(v, "uid-1", tmpl, list(lrs), ranges.get("ns", ()), rivals, opts or Options())


def to(p: Any, container: str = "app") -> tuple[dict[str, str], dict[str, str]]:
    c = next(c for c in p.containers if c.name == container)
    return dict(c.to_requests), dict(c.to_limits)


# ---- the pod as the policy sees it -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("container", "ranges", "want"),
    [
        # no LimitRange: a request defaults to its limit, per resource (SetDefaults_Pod)
        (app(limits={"cpu": "1", "memory": "1Gi"}), [], {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
        (app({"cpu": "100m"}, {"cpu": "1", "memory": "1Gi"}), [], {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
        # LimitRanger fills what is missing with default / defaultRequest, never what is set
        (app({"cpu": "100m"}), [lr({"type": "Container", "default": {"cpu": "500m", "memory": "256Mi"}, "defaultRequest": {"cpu": "50m", "memory": "64Mi"}})],
         {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}),
        # the first LimitRange naming a resource wins; Pod items default nothing; a default limit is also
        # the default request, as the API server stores a LimitRange
        (app(), [lr({"type": "Container", "default": {"cpu": "1"}}, name="a"), lr({"type": "Container", "default": {"cpu": "2", "memory": "1Gi"}}, name="b"),
                 lr({"type": "Pod", "max": {"cpu": "4"}}, name="c")],
         {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
        # a max alone is also the default limit and request
        (app({"cpu": "10m"}), [lr({"type": "Container", "max": {"memory": "256Mi"}})],
         {"requests": {"cpu": "10m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}),
        (app(), [], {}),  # BestEffort stays without resources
    ],
)
def test_admitted_containers_are_the_template_after_defaulting(container: dict[str, Any], ranges: list[dict[str, Any]], want: dict[str, Any]) -> None:
    assert admitted_containers(template(container), ranges)[0]["resources"] == want


# ---- LimitRange capping --------------------------------------------------------------------------


def view(req: tuple[int | None, int | None], lim: tuple[int | None, int | None]) -> ContainerView:
    return ContainerView("app", ContainerKind.REGULAR, Resources(*req), Resources(*lim))


@pytest.mark.parametrize(
    ("target", "c", "bounds", "want"),
    [
        # max 1000m on a limit 2× the request: the request may be at most 500m
        ((800, None), view((100, None), (200, None)), ContainerBounds(max=Resources(1000, None)), (500, None)),
        ((400, None), view((100, None), (200, None)), ContainerBounds(max=Resources(1000, None)), (400, None)),
        # memory max 400Mi, limit 3× the request: floor(100Mi × 400Mi / 300Mi) = 139810133
        ((None, 200 * MI), view((None, 100 * MI), (None, 300 * MI)), ContainerBounds(max=Resources(None, 400 * MI)), (None, 139810133)),
        # min 200m on a limit 2× the request: the request at least 100m for the limit, and at least 200m itself
        ((50, None), view((100, None), (200, None)), ContainerBounds(min=Resources(200, None)), (200, None)),
        # no limit: the default limit stands in for it (request 100m, default 400m: ratio 4, max 1 → 250m)
        ((900, None), view((100, None), (None, None)), ContainerBounds(max=Resources(1000, None), default=Resources(400, None)), (250, None)),
        # no limit and no default: no bound from the max
        ((900, None), view((100, None), (None, None)), ContainerBounds(max=Resources(1000, None)), (900, None)),
        # no request: the bound itself
        ((1500, None), view((None, None), (200, None)), ContainerBounds(max=Resources(1000, None)), (1000, None)),
        ((800, 10 * MI), view((100, None), (200, None)), None, (800, 10 * MI)),  # no LimitRange
    ],
)
def test_limit_range_capping_is_vpas(target: tuple[int | None, int | None], c: ContainerView, bounds: ContainerBounds | None, want: tuple[int | None, int | None]) -> None:
    out = limit_range_capped(Resources(*target), c, bounds)
    assert (out.cpu_milli, out.memory) == want


@pytest.mark.parametrize(
    ("item", "default", "default_request"),
    [
        # as the v1.36 API server stored it (kubectl create --dry-run=server)
        ({"min": {"cpu": "5m"}, "max": {"memory": "1Gi"}, "default": {"cpu": "300m"}}, {"cpu": "300m", "memory": "1Gi"}, {"cpu": "300m", "memory": "1Gi"}),
        ({"min": {"cpu": "5m"}}, None, {"cpu": "5m"}),
        ({"default": {"cpu": "1"}, "defaultRequest": {"cpu": "100m"}}, {"cpu": "1"}, {"cpu": "100m"}),
        ({}, None, None),
    ],
)
def test_a_limitrange_item_is_defaulted_as_the_api_server_stores_it(
    item: dict[str, Any], default: dict[str, str] | None, default_request: dict[str, str] | None
) -> None:
    out = defaulted_item({"type": "Container", **item})
    assert (out.get("default"), out.get("defaultRequest")) == (default, default_request)
    assert defaulted_item({"type": "Pod", "max": {"cpu": "1"}}) == {"type": "Pod", "max": {"cpu": "1"}}


def test_container_bounds_merge_as_vpas_calculator() -> None:
    b = container_bounds([
        lr({"type": "Container", "max": {"cpu": "2", "memory": "1Gi"}, "min": {"cpu": "10m"}, "default": {"cpu": "1"}}, name="a"),
        lr({"type": "Container", "max": {"cpu": "1"}, "min": {"cpu": "20m", "memory": "4Mi"}, "default": {"memory": "128Mi"}}, name="b"),
        lr({"type": "Pod", "max": {"cpu": "100m"}}, name="c"),
    ])
    # the lowest max, the highest min, the last default (as a whole; b's cpu default is its max)
    assert b == ContainerBounds(Resources(20, 4 * MI), Resources(1000, 1 << 30), Resources(1000, 128 * MI))
    assert container_bounds([lr({"type": "Pod", "max": {"cpu": "1"}})]) is None


# ---- one VPA's parameters ----------------------------------------------------------------------


# two containers sharing one pod-level budget (requests 200m/200Mi, limits 2×)
PL = {"containers": [{"name": "app", "image": "i"}, {"name": "side", "image": "i"}],
      "resources": {"requests": {"cpu": "200m", "memory": "200Mi"}, "limits": {"cpu": "400m", "memory": "400Mi"}}}
BURSTABLE = template(app({"cpu": "100m", "memory": "100Mi"}, {"cpu": "200m", "memory": "300Mi"}), app({"cpu": "50m"}, name="side"))


@pytest.mark.parametrize("mode", ["Initial", "Auto", "Recreate", "InPlaceOrRecreate", "InPlace"])
def test_every_mode_but_off_sets_the_target_and_proportional_limits(mode: str) -> None:
    p = params(vpa(mode), BURSTABLE)
    assert p.skipped == "" and p.sets
    # requests = target; limits keep their ratio: cpu 200/100 × 250m = 500m, memory 3 × 200Mi
    assert to(p) == ({"cpu": "250m", "memory": str(200 * MI)}, {"cpu": "500m", "memory": str(600 * MI)})
    assert to(p, "side") == ({}, {})  # no recommendation: untouched
    assert p.updates == "Pod resources updated by web: container 0: cpu request, memory request, cpu limit, memory limit"
    assert p.observed == "app, side"
    assert p.owner == Owner("ReplicaSet", "web", "Deployment")
    assert [c.from_requests for c in p.containers] == [{"cpu": "100m", "memory": "100Mi"}, {"cpu": "50m"}]


@pytest.mark.parametrize(
    ("kw", "tmpl", "want_req", "want_lim"),
    [
        # RequestsOnly: limits kept, and the request capped at the container's limit (memory 400Mi > 300Mi)
        ({"target": {"cpu": "150m", "memory": "400Mi"}, "policies": [{"containerName": "app", "controlledValues": "RequestsOnly"}]},
         BURSTABLE, {"cpu": "150m", "memory": str(300 * MI)}, {}),
        # only cpu controlled: memory untouched, and so is its limit
        ({"policies": [{"containerName": "*", "controlledResources": ["cpu"]}]}, BURSTABLE, {"cpu": "250m"}, {"cpu": "500m"}),
        # maxAllowed clamps the target first: 120m, limit 240m
        ({"policies": [{"containerName": "app", "maxAllowed": {"cpu": "120m"}}]}, BURSTABLE, {"cpu": "120m", "memory": str(200 * MI)}, {"cpu": "240m", "memory": str(600 * MI)}),
        # minAllowed raises it: memory 256Mi, limit 768Mi
        ({"policies": [{"containerName": "app", "minAllowed": {"memory": "256Mi"}}]}, BURSTABLE, {"cpu": "250m", "memory": str(256 * MI)}, {"cpu": "500m", "memory": str(768 * MI)}),
        # Guaranteed (limit == request): both move together, the class stays
        ({}, template(app({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})), {"cpu": "250m", "memory": str(200 * MI)}, {"cpu": "250m", "memory": str(200 * MI)}),
        # BestEffort: requests set, no limit made up (VPA's admission controller does the same)
        ({}, template(app()), {"cpu": "250m", "memory": str(200 * MI)}, {}),
    ],
)
def test_container_policy_and_qos(kw: dict[str, Any], tmpl: dict[str, Any], want_req: dict[str, str], want_lim: dict[str, str]) -> None:
    p = params(vpa(**kw), tmpl)
    assert p.skipped == ""
    assert to(p) == (want_req, want_lim)


@pytest.mark.parametrize(
    ("v", "tmpl", "lrs", "rivals", "why"),
    [
        (vpa(mode="Off"), BURSTABLE, [], (), "updateMode Off"),
        (vpa(recs=[]), BURSTABLE, [], (), "no recommendation yet"),
        (vpa(opted=False), BURSTABLE, [], (), "does not opt in"),
        (vpa(), BURSTABLE, [], ("ns/other",), "2 VPAs target Deployment/web (ns/other, ns/web)"),
        (vpa(), None, [], (), "Deployment/web is not found"),
        (vpa(kind="Rollout"), BURSTABLE, [], (), "a Rollout target"),
        (vpa(policies=[{"containerName": "app", "mode": "Off"}]), BURSTABLE, [], (), "no container of the template"),
        (vpa(recs=[{"containerName": "other", "target": {"cpu": "1"}}]), BURSTABLE, [], (), "no container of the template"),
        # a pod-level template whose pod-level target is what it has: nothing to set
        (vpa(target={"cpu": "1"}), {"containers": [{"name": "app", "image": "i"}], "resources": {"requests": {"cpu": "1"}}}, [], (),
         "pod-level resources: the recommendation is what the pod has"),
        # podPolicy Off on a pod that sets only pod-level resources
        (vpa(pod_policy={"mode": "Off"}), PL, [], (), "pod-level resources: podPolicy mode Off"),
        # a sidecar's limit above the new pod limit: it is never moved, so nothing is
        (vpa(pod_rec={"cpu": "100m"}), {**PL, "initContainers": [{"name": "s", "image": "i", "restartPolicy": "Always", "resources": {"limits": {"cpu": "300m"}}}]},
         [], (), "container s: its cpu limit 300 would be above the new pod limit 200"),
        # a Pod-scope max the capping does not cover: the pod is left as it is rather than refused
        (vpa(target={"cpu": "3", "memory": "200Mi"}), BURSTABLE, [lr({"type": "Pod", "max": {"cpu": "4"}})], (), "would refuse the result"),
    ],
)
def test_nothing_is_set_and_the_reason_is_said(v: Any, tmpl: dict[str, Any] | None, lrs: list[dict[str, Any]], rivals: tuple[str, ...], why: str) -> None:
    p = params(v, tmpl, lrs, rivals)
    assert why in p.skipped
    assert not p.sets and p.containers == ()


def test_a_limitrange_max_caps_proportionally_and_the_pod_stays_within_it() -> None:
    ranges = [lr({"type": "Container", "max": {"memory": "400Mi", "cpu": "1"}})]
    p = params(vpa(target={"cpu": "2", "memory": "200Mi"}), template(app({"cpu": "100m", "memory": "100Mi"}, {"cpu": "200m", "memory": "300Mi"})), ranges)
    # cpu: at most 100m × 1000m / 200m = 500m (limit 1000m); memory: floor(100Mi × 400Mi / 300Mi)
    assert to(p) == ({"cpu": "500m", "memory": "139810133"}, {"cpu": "1000m", "memory": str(3 * 139810133)})
    assert int(to(p)[1]["memory"]) <= 400 * MI  # within the LimitRange's max


def test_actuate_all_covers_vpas_without_the_opt_in() -> None:
    assert params(vpa(opted=False), BURSTABLE, opts=Options(actuate_all=True)).sets


@pytest.mark.parametrize(
    ("kind", "want"),
    [
        ("Deployment", Owner("ReplicaSet", "web", "Deployment")),
        ("StatefulSet", Owner("StatefulSet", "web")),
        ("DaemonSet", Owner("DaemonSet", "web")),
        ("ReplicaSet", Owner("ReplicaSet", "web")),
        ("ReplicationController", Owner("ReplicationController", "web")),
        ("Job", Owner("Job", "web")),
        ("CronJob", Owner("Job", "web", "CronJob")),
        ("Rollout", None),
    ],
)
def test_owner_as_a_pod_names_it(kind: str, want: Owner | None) -> None:
    assert owner_for(kind, "web") == want


def test_rivals_are_vpas_of_the_same_target_in_the_namespace() -> None:
    a, b, c = vpa(name="a"), vpa(name="b"), vpa(name="c", kind="StatefulSet")
    assert rivals_of([a, b, c]) == {"ns/a": ("ns/b",), "ns/b": ("ns/a",), "ns/c": ()}


def test_one_object_per_namespace_owned_by_each_of_its_vpas() -> None:
    web, off = params(vpa(), BURSTABLE), params(vpa(mode="Off", name="batch", kind="Job"), BURSTABLE)
    obj = namespace_object("ns", [web, off])
    assert obj["metadata"]["name"] == "vpa-admission" and obj["metadata"]["namespace"] == "ns"
    assert [(r["name"], r["uid"]) for r in obj["metadata"]["ownerReferences"]] == [("batch", "uid-1"), ("web", "uid-1")]
    assert list(obj["spec"]["workloads"]) == ["Deployment/web"]  # what the policy may set, by target
    assert obj["spec"]["skipped"] == [{"vpa": "batch", "target": "Job/web", "reason": "updateMode Off"}]
    app, side = obj["spec"]["workloads"]["Deployment/web"]["containers"]
    assert side == {"name": "side", "from": {"requests": {"cpu": "50m"}, "limits": {}}, "to": {"requests": {}, "limits": {}}}
    assert app["to"]["requests"] == {"cpu": "250m", "memory": str(200 * MI)}


# ---- a template that sets pod-level resources ------------------------------------------------------


def test_a_pod_level_template_gets_its_pod_level_values_and_the_containers_nothing() -> None:
    p = params(vpa(recs=[{"containerName": "app", "target": {"cpu": "250m", "memory": "200Mi"}},
                         {"containerName": "side", "target": {"cpu": "50m", "memory": "56Mi"}}]), PL)
    assert p.skipped == "" and p.sets and p.pod is not None
    # app's 250m/200Mi + side's 50m/56Mi; limits keep the ratio 2; from: the template's, as quantities
    assert (dict(p.pod.from_requests), dict(p.pod.from_limits)) == ({"cpu": "200m", "memory": str(200 * MI)}, {"cpu": "400m", "memory": str(400 * MI)})
    assert (dict(p.pod.to_requests), dict(p.pod.to_limits)) == ({"cpu": "300m", "memory": str(256 * MI)}, {"cpu": "600m", "memory": str(512 * MI)})
    assert [to(p, c) for c in ("app", "side")] == [({}, {}), ({}, {})]  # containers without resources get none
    assert p.updates == "Pod resources updated by web: pod: cpu request, memory request, cpu limit, memory limit"
    obj = namespace_object("ns", [p])["spec"]["workloads"]["Deployment/web"]
    assert obj["pod"]["to"] == {"requests": {"cpu": "300m", "memory": str(256 * MI)}, "limits": {"cpu": "600m", "memory": str(512 * MI)}}


def test_a_pod_level_request_defaulted_from_the_containers_is_the_from() -> None:
    """defaultPodRequests: pod-level limits alone take the containers' requests (app's 100m/100Mi), before
    the LimitRanger's container defaults (side's 50m here), which are not counted."""
    tmpl = {"containers": [{"name": "app", "image": "i", "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}},
                           {"name": "side", "image": "i"}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    ranges = [lr({"type": "Container", "defaultRequest": {"cpu": "50m"}})]
    p = params(vpa(pod_rec={"cpu": "400m"}), tmpl, ranges)
    assert p.pod is not None and dict(p.pod.from_requests) == {"cpu": "100m", "memory": str(100 * MI)}
    assert dict(p.pod.from_limits) == {"cpu": "1000m", "memory": str(1 << 30)}
    # 400m, limit 1000m × 400 / 100; memory: the containers' sum without a recommendation is what it has
    assert (dict(p.pod.to_requests), dict(p.pod.to_limits)) == ({"cpu": "400m"}, {"cpu": "4000m"})
    assert [c.from_requests for c in p.containers] == [{"cpu": "100m", "memory": "100Mi"}, {"cpu": "50m"}]


def test_a_pod_level_result_beyond_a_limitrange_leaves_the_pod_as_it_is() -> None:
    """A Container max the pod-level decision does not cap (the node's decision does not either): the
    containers it moves would break it, so nothing is set."""
    tmpl = {"containers": [{"name": "app", "image": "i", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}}],
            "resources": {"requests": {"cpu": "200m"}, "limits": {"cpu": "1"}}}
    p = params(vpa(target={"cpu": "400m"}), tmpl, [lr({"type": "Container", "max": {"cpu": "500m"}})])
    assert "would refuse the result" in p.skipped and "500m" in p.skipped
