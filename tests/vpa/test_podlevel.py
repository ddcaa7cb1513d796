"""VPA's rules carried to pod-level resources (agent/vpa/podlevel.py, podlevel_decide.py), table-driven;
each expected value is worked out by hand in its comment from the rule named in those modules."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.compute.qos import compute_qos
from agent.core.model import EMPTY, Resources
from agent.pods.sources.limitrange_rules import parse_limit_range
from agent.vpa.model import (
    VPA,
    ContainerPolicy,
    ControlledValues,
    PodPolicy,
    PodRecommendation,
    PodScalingMode,
    Recommendation,
    UpdateMode,
)
from agent.vpa.parse import parse_vpa
from agent.vpa.podlevel import api_pod_resources, capped_pod, pod_bounds, summed_recommendation
from agent.vpa.podlevel_decide import PodUsage, decide_pod_level
from agent.vpa.policy import Options
from tests.unit.podbuild import ctr, pod, view

MI = 1 << 20
H = 3600.0

# two containers sharing one pod-level budget: requests 200m/200Mi, limits 400m/400Mi (ratio 2)
SHARED = {"requests": {"cpu": "200m", "memory": "200Mi"}, "limits": {"cpu": "400m", "memory": "400Mi"}}
P = view(pod("p", [ctr("app"), ctr("side")], pod_resources=SHARED))


def _recs(app: tuple[int, int] = (300, 150), side: tuple[int, int] = (100, 50)) -> tuple[Recommendation, ...]:
    """app and side targets (millicores, MiB); bounds at half and double the target."""
    return tuple(
        Recommendation(n, Resources(c, m * MI), Resources(c // 2, m * MI // 2), Resources(c * 2, m * MI * 2))
        for n, (c, m) in (("app", app), ("side", side))
    )


def _vpa(recs: tuple[Recommendation, ...] | None = None, **kw: Any) -> VPA:
    return VPA("default", "v", "Deployment", "web", kw.pop("mode", UpdateMode.IN_PLACE), opted_in=kw.pop("opted_in", True),
               recommendations=_recs() if recs is None else recs, **kw)


def test_the_pod_level_recommendation_is_the_containers_sum() -> None:
    # targets 300m+100m, 150Mi+50Mi; lower 150m+50m, 75Mi+25Mi; upper 600m+200m, 300Mi+100Mi
    got = summed_recommendation(P, _vpa())
    assert got is not None and got.source == "containers"
    assert got.target == Resources(400, 200 * MI) and got.lower == Resources(200, 100 * MI) and got.upper == Resources(800, 400 * MI)


def test_a_container_off_is_left_out_and_one_without_recommendation_counts_at_its_request() -> None:
    p = view(pod("p", [ctr("app"), ctr("side", req={"cpu": "70m"}), ctr("log")], pod_resources=SHARED))
    v = _vpa((*_recs()[:1], Recommendation("log", Resources(10, 10 * MI))), policies=(ContainerPolicy("log", off=True),))
    got = summed_recommendation(p, v)
    # app 300m + side's own request 70m (no recommendation); log is Off; side sets no memory: 150Mi
    assert got is not None and got.target == Resources(370, 150 * MI)
    # side has no bounds of its own, but counts at its request in them too: 150m + 70m
    assert got.lower.cpu_milli == 220


def test_no_container_recommendation_is_no_pod_recommendation() -> None:
    assert summed_recommendation(P, _vpa(())) is None


@pytest.mark.parametrize(
    ("target", "policy", "bounds", "want", "note"),
    [
        # podPolicy minAllowed 500m raises; maxAllowed 300Mi lowers
        (Resources(400, 400 * MI), PodPolicy(min_allowed=Resources(500, None), max_allowed=Resources(None, 300 * MI)), None,
         Resources(500, 300 * MI), "minAllowed"),
        # RequestsOnly: at most the pod limit 400m
        (Resources(600, None), PodPolicy(values=ControlledValues.REQUESTS_ONLY), None, Resources(400, None), "pod limit"),
        # LimitRange Pod max 600m on the limit; ratio 2 -> the request at most 600 × 200 / 400 = 300m
        (Resources(500, None), None, "max-cpu-600m", Resources(300, None), "Max in Pod LimitRange"),
        # LimitRange Pod min 1Gi: the request at least 1Gi (the limit, twice it, is then above min too)
        (Resources(None, 100 * MI), None, "min-mem-1Gi", Resources(None, 1024 * MI), "Min in Pod LimitRange"),
    ],
)
def test_pod_level_capping(target: Resources, policy: PodPolicy | None, bounds: str | None, want: Resources, note: str) -> None:
    items = {"max-cpu-600m": {"type": "Pod", "max": {"cpu": "600m"}}, "min-mem-1Gi": {"type": "Pod", "min": {"memory": "1Gi"}}}
    lr = [parse_limit_range({"metadata": {"name": "lr", "namespace": "default"}, "spec": {"limits": [items[bounds]]}})] if bounds else []
    got, notes = capped_pod(target, policy, P.pod_requests or EMPTY, P.pod_limits or EMPTY, pod_bounds(lr))
    assert got == want and any(note in n for n in notes), notes


def test_limitrange_items_merge_to_the_narrowest() -> None:
    lrs = [parse_limit_range({"metadata": {"name": n, "namespace": "d"}, "spec": {"limits": [item]}}) for n, item in (
        ("a", {"type": "Pod", "max": {"cpu": "2"}, "min": {"memory": "64Mi"}}),
        ("b", {"type": "Pod", "max": {"cpu": "1"}, "min": {"memory": "32Mi"}}),
        ("c", {"type": "Container", "max": {"cpu": "100m"}}))]
    b = pod_bounds(lrs)
    assert b is not None and b.max == Resources(1000, None) and b.min == Resources(None, 64 * MI)
    assert pod_bounds(lrs[2:]) is None


@pytest.mark.parametrize(
    ("vpa", "age_s", "apply", "reason"),
    [
        (_vpa(opted_in=False), 13 * H, False, "opt in"),
        (_vpa(mode=UpdateMode.OFF), 13 * H, False, "Off"),
        (_vpa(pod_policy=PodPolicy(mode=PodScalingMode.OFF)), 13 * H, False, "podPolicy mode Off"),
        (_vpa(()), 13 * H, False, "no recommendation"),
        # pod cpu request 200m is within [200m, 800m], memory 200Mi within [100Mi, 400Mi]; young: wait
        (_vpa(), 1 * H, False, "younger"),
        # old: |200-400|/200 = 100 % change: act
        (_vpa(), 13 * H, True, "100% change"),
        # the sum equals what the pod has: nothing to do
        (_vpa(_recs((150, 150), (50, 50))), 13 * H, False, "is what the pod has"),
        # 205m: 2.5 % change: below minChange
        (_vpa(_recs((155, 150), (50, 50))), 13 * H, False, "below"),
        # a pod-level request below the lower bound acts at once: lower 250m + 100m > 200m
        (_vpa(_recs((500, 150), (200, 50))), 60.0, True, "outside"),
    ],
)
def test_when_the_pod_level_is_resized(vpa: VPA, age_s: float, apply: bool, reason: str) -> None:
    got = decide_pod_level(P, vpa, age_s, False, Options())
    assert got.apply is apply and reason in got.reason, got


def test_the_pod_level_resize_keeps_the_limit_ratio_and_leaves_the_containers_alone() -> None:
    got = decide_pod_level(P, _vpa(), 13 * H, False, Options())
    assert got.pod is not None and got.containers == ()
    # 400m and 200Mi; limits 400m × 400/200 = 800m, memory unchanged (its request is unchanged)
    assert got.pod.requests == Resources(400, 200 * MI) and got.pod.limits == Resources(800, 400 * MI)
    assert api_pod_resources(got.pod) == {"requests": {"cpu": "400m", "memory": str(200 * MI)},
                                          "limits": {"cpu": "800m", "memory": str(400 * MI)}}


def test_the_vpas_own_pod_recommendation_wins_over_the_sum() -> None:
    own = PodRecommendation(Resources(250, 300 * MI), Resources(100, 100 * MI), Resources(300, 350 * MI))
    got = decide_pod_level(P, _vpa(pod_recommendation=own), 13 * H, False, Options())
    assert got.pod is not None and got.pod.requests == Resources(250, 300 * MI) and got.pod.limits == Resources(500, 600 * MI)


@pytest.mark.parametrize(
    ("usage", "want_limit", "want_request", "apply"),
    [
        # 100Mi target -> limit 200Mi; the pod uses 300Mi: held at ceil(300Mi × 1.1) = 346030080, the
        # request in the pod's ratio 200/400: 173015040
        (PodUsage(300 * MI), 346030080, 173015040, True),
        (PodUsage(50 * MI), 200 * MI, 100 * MI, True),  # 55Mi is below the new limit: the decrease goes through
        (PodUsage(None), 400 * MI, 200 * MI, True),  # no working set read: memory waits, CPU still moves
    ],
)
def test_pod_memory_never_below_what_the_pod_cgroup_uses(usage: PodUsage, want_limit: int, want_request: int, apply: bool) -> None:
    got = decide_pod_level(P, _vpa(_recs((300, 75), (100, 25))), 13 * H, False, Options(), usage=usage)
    assert got.apply is apply and got.pod is not None
    assert (got.pod.limits.memory, got.pod.requests.memory) == (want_limit, want_request)


def test_a_memory_decrease_alone_waits_for_the_working_set() -> None:
    got = decide_pod_level(P, _vpa(_recs((150, 75), (50, 25))), 13 * H, False, Options(), usage=PodUsage(None))
    assert not got.apply and "waits" in got.reason and got.held


# pod-level 1 CPU / 1Gi, limits 2 / 2Gi; app sets its own 600m/600Mi request and 1500m/1500Mi limit
BOTH = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
APP = ctr("app", req={"cpu": "600m", "memory": "600Mi"}, lim={"cpu": "1500m", "memory": "1500Mi"})


def test_a_pod_setting_both_levels_sizes_both_and_fits_the_containers() -> None:
    p = view(pod("p", [APP, ctr("side")], pod_resources=BOTH))
    # app 300m/300Mi, side 100m/100Mi: pod 400m/400Mi, limits 800m/800Mi. app's own: 300m/300Mi with
    # limits 750m/750Mi (ratio 2.5): within the new pod limit 800m/800Mi
    got = decide_pod_level(p, _vpa(_recs((300, 300), (100, 100))), 13 * H, False, Options())
    assert got.apply and got.pod is not None and got.pod.limits == Resources(800, 800 * MI)
    [app] = got.containers
    assert app.requests == Resources(300, 300 * MI) and app.limits == Resources(750, 750 * MI)


def test_a_container_limit_above_the_new_pod_limit_is_lowered_to_it() -> None:
    # app's policy keeps its memory (controlledResources [cpu]): it counts at its 600Mi request, side at
    # 100Mi: pod 700Mi, limit 1400Mi; app's 1500Mi limit is above it -> 1400Mi, its request stays
    p = view(pod("p", [APP, ctr("side")], pod_resources=BOTH))
    v = _vpa(_recs((300, 300), (100, 100)), policies=(ContainerPolicy("app", controlled=frozenset({"cpu"})),))
    got = decide_pod_level(p, v, 13 * H, False, Options())
    assert got.apply, got
    [app] = got.containers
    assert app.limits.memory == 1400 * MI and app.requests.memory == 600 * MI


def test_container_requests_above_the_new_pod_request_are_scaled_down_together() -> None:
    # the VPA's own pod recommendation 400Mi: limit 800Mi; app (memory not controlled) keeps 600Mi, more
    # than the pod's 400Mi: scaled to 600Mi × (400Mi − 0) / 600Mi = 400Mi (side sets no request)
    p = view(pod("p", [APP, ctr("side")], pod_resources=BOTH))
    own = PodRecommendation(Resources(400, 400 * MI), Resources(300, 300 * MI), Resources(500, 500 * MI))
    v = _vpa(_recs((300, 300), (100, 100)), policies=(ContainerPolicy("app", controlled=frozenset({"cpu"})),),
             pod_recommendation=own)
    got = decide_pod_level(p, v, 13 * H, False, Options())
    assert got.apply and got.pod is not None and got.pod.limits.memory == 800 * MI
    [app] = got.containers
    assert app.limits.memory == 800 * MI and app.requests.memory == 400 * MI


def test_a_container_that_cannot_move_refuses_the_resize() -> None:
    p = view(pod("p", [APP, ctr("side")], pod_resources=BOTH))
    v = _vpa(_recs((300, 300), (100, 100)), policies=(ContainerPolicy("app", off=True),))
    got = decide_pod_level(p, v, 13 * H, False, Options())
    assert not got.apply and "limit" in got.reason and "app" in got.reason


def test_the_qos_class_is_kept() -> None:
    # a Guaranteed pod (pod-level requests == limits) stays Guaranteed: the limit follows the request
    g = view(pod("p", [ctr("app"), ctr("side")], pod_resources={"limits": {"cpu": "1", "memory": "1Gi"}}))
    got = decide_pod_level(g, _vpa(), 13 * H, False, Options())
    assert got.apply and got.pod is not None and got.pod.requests == got.pod.limits == Resources(400, 200 * MI)
    # RequestsOnly capped to the limit would make a Burstable pod Guaranteed: refused
    b = view(pod("p", [ctr("app")], pod_resources={"requests": {"cpu": "100m", "memory": "100Mi"},
                                                   "limits": {"cpu": "200m", "memory": "100Mi"}}))
    v = _vpa((Recommendation("app", Resources(900, 100 * MI), Resources(500, 50 * MI), Resources(999, 200 * MI)),),
             pod_policy=PodPolicy(values=ControlledValues.REQUESTS_ONLY))
    got = decide_pod_level(b, v, 13 * H, False, Options())
    assert not got.apply and "QoS" in got.reason


def test_a_container_restarted_by_its_resize_policy_is_named() -> None:
    p = view(pod("p", [ctr("app", resizePolicy=[{"resourceName": "memory", "restartPolicy": "RestartContainer"}]),
                       ctr("side")], pod_resources=SHARED))
    got = decide_pod_level(p, _vpa(_recs((300, 300), (100, 100))), 13 * H, False, Options())
    assert got.apply and got.restarts == ("app (memory)",)


def test_containers_without_resources_are_never_given_any() -> None:
    got = decide_pod_level(P, _vpa(_recs((900, 900), (100, 100))), 13 * H, False, Options())
    assert got.apply and got.containers == ()


def test_parse_the_pod_level_fields_from_the_spec_or_the_annotations() -> None:
    base: dict[str, Any] = {"metadata": {"name": "v", "namespace": "d"}, "spec": {"targetRef": {"kind": "Deployment", "name": "w"}}}
    spec = {**base, "spec": {**base["spec"], "resourcePolicy": {"podPolicy": {
        "mode": "Auto", "maxAllowed": {"cpu": "2"}, "controlledResources": ["cpu"], "controlledValues": "RequestsOnly"}}},
        "status": {"recommendation": {"podRecommendations": {"target": {"cpu": "300m"}, "uncappedTarget": {"cpu": "3"}}}}}
    v = parse_vpa(spec)
    assert v.pod_policy == PodPolicy(PodScalingMode.AUTO, EMPTY, Resources(2000, None), frozenset({"cpu"}), ControlledValues.REQUESTS_ONLY)
    assert v.pod_recommendation is not None and v.pod_recommendation.target == Resources(300, None)
    assert v.pod_recommendation.uncapped == Resources(3000, None)
    ann = {**base, "metadata": {**base["metadata"], "annotations": {
        "kube-cgroup-agent.io/vpa-pod-policy": '{"mode": "Off"}',
        "kube-cgroup-agent.io/vpa-pod-recommendation": '{"target": {"memory": "1Gi"}}'}}}
    v = parse_vpa(ann)
    assert v.pod_policy is not None and v.pod_policy.mode is PodScalingMode.OFF and v.pod_policy.source == "annotation"
    assert v.pod_recommendation is not None and v.pod_recommendation.source == "annotation"
    assert parse_vpa(base).pod_policy is None


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"kube-cgroup-agent.io/vpa-pod-policy": "{"}, "not valid JSON"),
        ({"kube-cgroup-agent.io/vpa-pod-policy": '{"mode": "Sometimes"}'}, "is not Auto or Off"),
        ({"kube-cgroup-agent.io/vpa-pod-recommendation": '{"target": {"cpu": "lots"}}'}, "target.cpu"),
    ],
)
def test_a_bad_pod_level_field_is_one_clear_error(annotations: dict[str, str], message: str) -> None:
    from agent.vpa.model import VPAParseError

    raw = {"metadata": {"name": "v", "namespace": "d", "annotations": annotations}, "spec": {"targetRef": {"kind": "D", "name": "w"}}}
    with pytest.raises(VPAParseError, match=message):
        parse_vpa(raw)


_milli = st.integers(min_value=1, max_value=8000)
_mib = st.integers(min_value=1, max_value=8192)


@settings(max_examples=300, deadline=None)
@given(
    pod_req=st.tuples(_milli, _mib), ratio=st.sampled_from([1, 2, 3]), app_own=st.booleans(),
    app=st.tuples(_milli, _mib), side=st.tuples(_milli, _mib), usage=st.one_of(st.none(), _mib),
    max_allowed=st.one_of(st.none(), st.tuples(_milli, _mib)), oom=st.booleans(),
)
def test_the_result_is_always_a_valid_resize(
    pod_req: tuple[int, int], ratio: int, app_own: bool, app: tuple[int, int], side: tuple[int, int],
    usage: int | None, max_allowed: tuple[int, int] | None, oom: bool,
) -> None:
    """Whatever the recommendation: no container limit above the new pod limit, the containers' requests
    within the pod request, the QoS class kept, the pod memory limit never lowered below the working set +
    10 %, the pod-level values within podPolicy maxAllowed where they changed (unless held at the working
    set, which only ever keeps a value lower than it was)."""
    cpu, mem = pod_req
    pod_res = {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}, "limits": {"cpu": f"{cpu * ratio}m", "memory": f"{mem * ratio}Mi"}}
    own = ctr("app", req={"cpu": f"{max(cpu // 2, 1)}m", "memory": f"{max(mem // 2, 1)}Mi"},
              lim={"cpu": f"{cpu * ratio}m", "memory": f"{mem * ratio}Mi"})
    p = view(pod("p", [own if app_own else ctr("app"), ctr("side")], pod_resources=pod_res))
    policy = PodPolicy(max_allowed=Resources(max_allowed[0], max_allowed[1] * MI)) if max_allowed else None
    got = decide_pod_level(p, _vpa(_recs(app, side), pod_policy=policy), 13 * H, oom, Options(),
                           usage=PodUsage(usage * MI if usage is not None else None))
    if not got.apply:
        return
    t = got.pod or type("T", (), {"requests": p.pod_requests, "limits": p.pod_limits})()
    by_name = {x.container: x for x in got.containers}
    total = {"cpu": 0, "memory": 0}
    for c in p.containers:
        x = by_name.get(c.name)
        req, lim = (x.requests, x.limits) if x else (c.requests, c.limits)
        if not c.requests.has_cpu_or_memory() and not c.limits.has_cpu_or_memory():
            assert x is None  # a container without resources is never given any
        for res, r, lv, cap in (("cpu", req.cpu_milli, lim.cpu_milli, t.limits.cpu_milli), ("memory", req.memory, lim.memory, t.limits.memory)):
            assert lv is None or cap is None or lv <= cap
            assert r is None or lv is None or r <= lv
            total[res] += r or 0
    assert total["cpu"] <= t.requests.cpu_milli and total["memory"] <= t.requests.memory
    from dataclasses import replace

    after = replace(p, pod_requests=t.requests, pod_limits=t.limits, status_qos=None)
    assert compute_qos(after).qos is compute_qos(p).qos
    old_lim = p.pod_limits.memory if p.pod_limits else None
    if t.limits.memory is not None and old_lim is not None and t.limits.memory < old_lim:
        assert usage is not None and t.limits.memory >= usage * MI * 1.1
    if max_allowed and got.pod is not None:
        for new, old, most in ((t.requests.cpu_milli, cpu, max_allowed[0]), (t.requests.memory, mem * MI, max_allowed[1] * MI)):
            assert new == old or new <= most or (got.held and new < old)  # a hold never raises
