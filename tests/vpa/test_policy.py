"""VPA's rules for what a recommendation makes of a pod, table-driven; each expected value is worked out by
hand in its comment from the rule in kubernetes/autoscaler named in agent/vpa/policy.py."""

from __future__ import annotations

from typing import Any

import pytest

from agent.core.model import Resources
from agent.vpa.model import VPA, ContainerPolicy, ControlledValues, Recommendation, UpdateMode, VPAParseError
from agent.vpa.parse import parse_vpa
from agent.vpa.policy import Options, capped, container_target, decide, proportional_limit
from tests.unit.podbuild import ctr, pod, view

MI = 1 << 20
H = 3600.0


@pytest.mark.parametrize(
    ("limit", "req", "new", "want"),
    [
        (2000, 1000, 1500, 3000),  # ratio 2 kept: 2000 × 1500 / 1000
        (1000, 1000, 500, 500),  # limit == request: limit = new request
        (None, 500, 700, None),  # no limit: none
        (0, 500, 700, None),  # a zero limit counts as none
        (1000, None, 300, 300),  # limit without request (request = limit for Kubernetes): new request
        (300, 200, 333, 499),  # floor(300 × 333 / 200) = floor(499.5)
        (1000, 3, 2, 666),  # floor(2000 / 3)
        (512 * MI, 256 * MI, 300 * MI, 600 * MI),  # memory in bytes: 512Mi × 300Mi / 256Mi
        (1000, 500, 0, None),  # no recommended request: no limit
        (2**62, 1, 4, 2**63 - 1),  # capped to int64 as VPA caps it
    ],
)
def test_proportional_limit_is_vpas(limit: int | None, req: int | None, new: int | None, want: int | None) -> None:
    assert proportional_limit(limit, req, new) == want


def _policy(**kw: Any) -> ContainerPolicy:
    return ContainerPolicy("app", **kw)


@pytest.mark.parametrize(
    ("target", "policy", "limits", "want"),
    [
        (Resources(50, 10 * MI), _policy(min_allowed=Resources(100, 64 * MI)), None, Resources(100, 64 * MI)),  # raised to min
        (Resources(5000, 8192 * MI), _policy(max_allowed=Resources(2000, 1024 * MI)), None, Resources(2000, 1024 * MI)),
        # min 300m and max 200m conflict: VPA caps to min, then to max -> 200m
        (Resources(100, None), _policy(min_allowed=Resources(300, None), max_allowed=Resources(200, None)), None, Resources(200, None)),
        # RequestsOnly: never above the container's current limit (800m -> the 500m limit)
        (Resources(800, 100 * MI), _policy(values=ControlledValues.REQUESTS_ONLY), Resources(500, 64 * MI), Resources(500, 64 * MI)),
        # RequestsAndLimits: the limit does not cap the request (the limit moves with it)
        (Resources(800, 100 * MI), _policy(), Resources(500, 64 * MI), Resources(800, 100 * MI)),
        (Resources(800, None), None, None, Resources(800, None)),  # no policy: as recommended
    ],
)
def test_capping(target: Resources, policy: ContainerPolicy | None, limits: Resources | None, want: Resources) -> None:
    assert capped(target, policy, limits) == want


BURSTABLE = ctr("app", req={"cpu": "100m", "memory": "100Mi"}, lim={"cpu": "200m", "memory": "200Mi"})


@pytest.mark.parametrize(
    ("container", "policy", "target", "want"),
    [
        # RequestsAndLimits: 100m/200m -> 300m keeps ratio 2 -> 600m; 100Mi/200Mi -> 150Mi -> 300Mi
        (BURSTABLE, None, Resources(300, 150 * MI), (Resources(300, 150 * MI), Resources(600, 300 * MI))),
        # RequestsOnly: limits kept; the request at most the current limit (300m > 200m -> 200m)
        (BURSTABLE, _policy(values=ControlledValues.REQUESTS_ONLY), Resources(300, 150 * MI), (Resources(200, 150 * MI), Resources(200, 200 * MI))),
        # controlledResources [cpu]: memory untouched, request and limit
        (BURSTABLE, _policy(controlled=frozenset({"cpu"})), Resources(300, 150 * MI), (Resources(300, 100 * MI), Resources(600, 200 * MI))),
        # limit == request (Guaranteed container): both follow the new request
        (ctr("app", req={"cpu": "500m", "memory": "64Mi"}, lim={"cpu": "500m", "memory": "64Mi"}), None, Resources(700, 80 * MI), (Resources(700, 80 * MI), Resources(700, 80 * MI))),
        # no limit: none after either
        (ctr("app", req={"cpu": "100m"}), None, Resources(250, None), (Resources(250, None), Resources(None, None))),
        # maxAllowed 250m caps the request; the limit follows the capped request: 250m × 2 = 500m
        (BURSTABLE, _policy(max_allowed=Resources(250, None)), Resources(300, 100 * MI), (Resources(250, 100 * MI), Resources(500, 200 * MI))),
    ],
)
def test_container_target(container: dict[str, Any], policy: ContainerPolicy | None, target: Resources, want: tuple[Resources, Resources]) -> None:
    c = view(pod("p", [container])).containers[0]
    got = container_target(c, Recommendation("app", target), policy)
    assert got is not None
    assert (got.requests.cpu_milli, got.requests.memory) == (want[0].cpu_milli, want[0].memory)
    assert (got.limits.cpu_milli, got.limits.memory) == (want[1].cpu_milli, want[1].memory)


def test_a_container_whose_policy_is_off_is_untouched() -> None:
    c = view(pod("p", [BURSTABLE])).containers[0]
    assert container_target(c, Recommendation("app", Resources(300, 150 * MI)), _policy(off=True)) is None


def _vpa(mode: UpdateMode = UpdateMode.IN_PLACE, opted_in: bool = True, **rec: Resources) -> VPA:
    r = Recommendation("app", rec.get("target", Resources(300, 100 * MI)), rec.get("lower", Resources(200, 50 * MI)), rec.get("upper", Resources(400, 200 * MI)))
    return VPA("default", "v", "Deployment", "web", mode, opted_in=opted_in, recommendations=(r,))


P = view(pod("p", [BURSTABLE]))  # requests 100m / 100Mi


@pytest.mark.parametrize(
    ("vpa", "age_s", "oom", "opts", "apply", "reason"),
    [
        (_vpa(opted_in=False), 13 * H, False, Options(), False, "opt in"),
        (_vpa(opted_in=False), 13 * H, False, Options(actuate_all=True), True, "outside"),  # 100m < lower 200m
        (_vpa(UpdateMode.OFF), 13 * H, False, Options(), False, "Off"),
        (_vpa(UpdateMode.INITIAL), 13 * H, False, Options(), False, "Initial"),
        (_vpa(UpdateMode.RECREATE), 13 * H, False, Options(), False, "treatRecreateAsInPlace"),
        (_vpa(UpdateMode.AUTO), 13 * H, False, Options(treat_recreate_as_in_place=True), True, "outside"),
        (_vpa(UpdateMode.IN_PLACE_OR_RECREATE), 60.0, False, Options(), True, "outside"),  # young, but outside
        # within bounds [50m, 400m] x [50Mi, 200Mi], young pod: wait
        (_vpa(target=Resources(110, 100 * MI), lower=Resources(50, 50 * MI)), 1 * H, False, Options(), False, "younger"),
        # within bounds, 13 h old: diff = |100-105|/100 + 0 = 5 % < 10 %: no
        (_vpa(target=Resources(105, 100 * MI), lower=Resources(50, 50 * MI)), 13 * H, False, Options(), False, "below"),
        # within bounds, 13 h old: 100m -> 115m is 15 % >= 10 %: yes
        (_vpa(target=Resources(115, 100 * MI), lower=Resources(50, 50 * MI)), 13 * H, False, Options(), True, "15%"),
        # 100m -> 107m (7 %) and 100Mi -> 104Mi (4 %): summed over resources, 11 % >= 10 %: yes
        (_vpa(target=Resources(107, 104 * MI), lower=Resources(50, 50 * MI)), 13 * H, False, Options(), True, "11%"),
        # a quick OOM acts at once, even young and within bounds
        (_vpa(target=Resources(100, 150 * MI), lower=Resources(50, 50 * MI)), 60.0, True, Options(), True, "OOM"),
        # the recommendation is what the pod has: nothing to do
        (_vpa(target=Resources(100, 100 * MI), lower=Resources(50, 50 * MI)), 13 * H, True, Options(), False, "what the pod has"),
    ],
)
def test_when_vpas_updater_would_act(vpa: VPA, age_s: float, oom: bool, opts: Options, apply: bool, reason: str) -> None:
    got = decide(P, vpa, age_s, oom, opts)
    assert got.apply is apply and reason in got.reason, got
    if apply:
        [t] = got.targets
        assert t.requests.cpu_milli == vpa.recommendations[0].target.cpu_milli


def test_pods_with_pod_level_resources_are_skipped() -> None:
    p = view(pod("p", [BURSTABLE], pod_resources={"limits": {"cpu": "1"}}))
    got = decide(p, _vpa(), 13 * H, False, Options())
    assert not got.apply and "pod-level" in got.reason


def test_a_recommendation_that_would_change_the_qos_class_is_refused() -> None:
    """A container without requests (BestEffort pod) would get requests: Burstable. The API refuses a
    QoS change through pods/resize; the agent does not try."""
    p = view(pod("p", [ctr("app")]))
    got = decide(p, _vpa(), 13 * H, False, Options())
    assert not got.apply and "QoS" in got.reason


def test_a_guaranteed_pod_stays_guaranteed() -> None:
    g = view(pod("p", [ctr("app", req={"cpu": "500m", "memory": "64Mi"}, lim={"cpu": "500m", "memory": "64Mi"})]))
    got = decide(g, _vpa(target=Resources(700, 80 * MI), lower=Resources(600, 70 * MI), upper=Resources(800, 90 * MI)), 60.0, False, Options())
    assert got.apply
    [t] = got.targets
    assert (t.requests.cpu_milli, t.limits.cpu_milli, t.requests.memory, t.limits.memory) == (700, 700, 80 * MI, 80 * MI)


def test_parse_a_vpa() -> None:
    raw = {
        "apiVersion": "autoscaling.k8s.io/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop", "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"}},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "updatePolicy": {"updateMode": "InPlaceOrRecreate"},
            "resourcePolicy": {
                "containerPolicies": [
                    {"containerName": "*", "minAllowed": {"cpu": "50m"}, "controlledValues": "RequestsOnly"},
                    {"containerName": "sidecar", "mode": "Off"},
                ]
            },
        },
        "status": {
            "recommendation": {
                "containerRecommendations": [
                    {"containerName": "app", "target": {"cpu": "250m", "memory": "300Mi"}, "lowerBound": {"cpu": "100m"}, "upperBound": {"cpu": "1"}}
                ]
            }
        },
    }
    v = parse_vpa(raw)
    assert (v.key, v.target_kind, v.target_name, v.mode, v.opted_in) == ("shop/web", "Deployment", "web", UpdateMode.IN_PLACE_OR_RECREATE, True)
    app = v.policy_for("app")
    assert app is not None and app.container == "*" and app.min_allowed.cpu_milli == 50 and app.values is ControlledValues.REQUESTS_ONLY
    side = v.policy_for("sidecar")
    assert side is not None and side.off
    rec = v.recommendation_for("app")
    assert rec is not None and rec.target == Resources(250, 300 * MI) and rec.upper.cpu_milli == 1000
    assert parse_vpa({**raw, "metadata": {"name": "x", "namespace": "shop"}}).opted_in is False
    assert parse_vpa({**raw, "spec": {"targetRef": {"kind": "Deployment", "name": "web"}}}).mode is UpdateMode.RECREATE  # VPA's default


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "targetRef"),
        ({"targetRef": {"kind": "Deployment", "name": "w"}, "updatePolicy": {"updateMode": "Sometimes"}}, "updateMode"),
        ({"targetRef": {"kind": "Deployment", "name": "w"}, "resourcePolicy": {"containerPolicies": [{"minAllowed": {"cpu": "1"}}]}}, "containerName"),
        ({"targetRef": {"kind": "Deployment", "name": "w"}, "resourcePolicy": {"containerPolicies": [{"containerName": "a", "minAllowed": {"cpu": "lots"}}]}}, "minAllowed.cpu"),
        ({"targetRef": {"kind": "Deployment", "name": "w"}, "resourcePolicy": {"containerPolicies": [{"containerName": "a", "controlledValues": "Both"}]}}, "controlledValues"),
    ],
)
def test_a_bad_vpa_is_one_clear_error(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(VPAParseError) as err:
        parse_vpa({"metadata": {"name": "v", "namespace": "ns"}, "spec": spec})
    assert "ns/v" in str(err.value) and message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("target_limit", "usage", "want", "want_request", "held"),
    [
        # 200Mi -> 100Mi with a 150Mi working set: held at ceil(150Mi × 1.1) = 173015040; the request in
        # the pod's own ratio 100Mi/200Mi: 173015040 × 1/2 = 86507520 (the target 50Mi would break it)
        (100 * MI, 150 * MI, 173015040, 86507520, True),
        (100 * MI, 50 * MI, 100 * MI, 50 * MI, False),  # 55Mi is below the target: the decrease goes through
        (100 * MI, None, 200 * MI, 100 * MI, True),  # no working set read yet: a decrease waits
        (300 * MI, 500 * MI, 300 * MI, 150 * MI, False),  # an increase is never held
        (100 * MI, 300 * MI, 200 * MI, 100 * MI, True),  # usage above the limit: held where it is, not raised
    ],
)
def test_a_memory_limit_never_goes_below_the_working_set(
    target_limit: int, usage: int | None, want: int, want_request: int, held: bool
) -> None:
    from agent.vpa.policy import ContainerTarget, hold_memory_at_usage

    c = view(pod("p", [BURSTABLE])).containers[0]  # memory request 100Mi, limit 200Mi
    t = ContainerTarget("app", Resources(100, target_limit // 2), Resources(200, target_limit))
    got, why = hold_memory_at_usage(t, c, usage, 0.1)
    assert got.limits.memory == want and got.requests.memory == want_request and (why is not None) is held


def test_decide_holds_the_memory_limit_and_says_why() -> None:
    v = VPA("default", "v", "Deployment", "web", UpdateMode.IN_PLACE, opted_in=True, recommendations=(
        Recommendation("app", Resources(100, 50 * MI), Resources(50, 20 * MI), Resources(200, 80 * MI)),))
    got = decide(P, v, 13 * H, False, Options(), usage={"app": 150 * MI})
    # 100Mi request is above the 80Mi upper bound: act; the limit would be 50Mi × 2 = 100Mi but the
    # container holds 150Mi: the limit stays at ceil(165Mi), the request at half of it (the pod's ratio)
    assert got.apply and got.targets[0].requests.memory == 86507520 and got.targets[0].limits.memory == 173015040
    assert got.held and "working set" in got.held[0]
