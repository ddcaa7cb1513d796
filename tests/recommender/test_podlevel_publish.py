"""The pod level published (agent.recommender.podlevel): the pod cgroups' histories travel in a NodeHistory
entry of their own, merge across nodes as the containers' do, and become `podRecommendations` beside the
containers' — in the status where the VPA CRD keeps the field, else in the annotation
kube-cgroup-agent.io/vpa-pod-recommendation, which agent.vpa.parse reads back; capped by the podPolicy as VPA
caps a container; nothing pod-level for a VPA whose pods set no pod-level resources; older NodeHistory
objects still read, and older readers see only containers."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client

from agent.core.model import POD, Resources
from agent.daemon.recommender import pod_caps
from agent.recommender import wire
from agent.recommender.estimate import Estimate, Recommendation, recommend
from agent.recommender.podlevel import (
    POD_RECOMMENDATION_ANNOTATION,
    PodCaps,
    capped,
    pod_entry,
    pod_recommendation,
)
from agent.recommender.publish import VPA, Publisher, merge_histories, node_history, partial
from agent.recommender.state import RecommenderState
from agent.recommender.trace import Sample
from agent.vpa import model as vpa_model
from agent.vpa.parse import parse_vpa
from tests.recommender.publish_env import T0, S, _pod, _vpa, _vpas
from tests.support.fakeapi.cluster import FakeCluster

VPA_KEY = "autoscaling.k8s.io/v1/verticalpodautoscalers"
STATUS = "/verticalpodautoscalers/api/status"


def _state(pod: str, cpu: float, n: int, pod_level: bool = True) -> RecommenderState:
    """A day of two containers' samples, and of their pod cgroup's (their sum) when `pod_level`."""
    st_ = RecommenderState(S)
    for i in range(n):
        t = T0 + 60 * i
        app, side = (cpu * (1 + i % 3), 300e6 + i), (0.05, 100e6)
        st_.observe(Sample(t, f"shop/{pod}", "app", cpu=app[0], memory=app[1]))
        st_.observe(Sample(t, f"shop/{pod}", "side", cpu=side[0], memory=side[1]))
        if pod_level:
            st_.observe(Sample(t, f"shop/{pod}", POD, cpu=app[0] + side[0], memory=app[1] + side[1]))
    return st_


def _publishers(c: client.ApiClient, now: list[float], pod_level: bool = True) -> tuple[Publisher, Publisher]:
    a = Publisher(c, "n1", _state("a", 0.2, 1440, pod_level), lambda: [_pod("a", "n1")], _vpas(c),
                  clock=lambda: now[0], pod_policy=pod_caps)
    b = Publisher(c, "n2", _state("b", 0.6, 1440, pod_level), lambda: [_pod("b", "n2")], _vpas(c),
                  clock=lambda: now[0], pod_policy=pod_caps)
    return a, b


def _both(a: Publisher, b: Publisher, now: list[float]) -> list[str]:
    """n1 takes the Lease and publishes, n2 publishes; an interval later n1 merges both: what it wrote."""
    a.step()
    b.step()
    now[0] += S.recommender_interval_s
    return a.step()


def _prune_pod_recommendations(obj: dict[str, Any]) -> dict[str, Any]:
    """What every released VPA CRD's schema does to the field: drops it."""
    out = copy.deepcopy(obj)
    ((out.get("status") or {}).get("recommendation") or {}).pop("podRecommendations", None)
    return out


def _expected(a: Publisher, b: Publisher, caps: PodCaps | None = None) -> dict[str, Any] | None:
    merged = partial(a.state, ["shop/a"])[POD]
    merged.merge(partial(b.state, ["shop/b"])[POD])
    return pod_recommendation(merged, S, caps)


@pytest.mark.parametrize("crd_has_field", [True, False])
def test_pod_recommendations_next_to_the_containers(api: tuple[FakeCluster, client.ApiClient], crd_has_field: bool) -> None:
    cluster, c = api
    if not crd_has_field:
        cluster.prunes[VPA_KEY] = _prune_pod_recommendations
    now = [T0 + 86_400]
    a, b = _publishers(c, now)
    assert _both(a, b, now) == ["shop/api"]
    expected = _expected(a, b)
    assert expected is not None and set(expected) == {"target", "lowerBound", "upperBound", "uncappedTarget"}
    vpa = cluster.get(*VPA, "shop", "api")
    assert vpa is not None
    recommendation = vpa["status"]["recommendation"]
    assert [r["containerName"] for r in recommendation["containerRecommendations"]] == ["app", "side"]
    annotations = vpa["metadata"].get("annotations") or {}
    status_writes, object_writes = cluster.count("PATCH", STATUS), cluster.count("PATCH", "/verticalpodautoscalers/api") - cluster.count("PATCH", STATUS)
    assert status_writes == 2  # n1 alone, then both nodes merged
    if crd_has_field:
        assert recommendation["podRecommendations"] == expected and POD_RECOMMENDATION_ANNOTATION not in annotations
        assert object_writes == 0  # the status alone
    else:
        assert "podRecommendations" not in recommendation
        assert object_writes == 2  # each status write, then the annotation (the merged one changed it)
        assert json.loads(annotations[POD_RECOMMENDATION_ANNOTATION]) == expected
    parsed = parse_vpa(vpa).pod_recommendation  # what the VPA source reads: the field, else the annotation
    assert parsed is not None and parsed.source == ("status" if crd_has_field else "annotation")
    assert parsed.target.cpu_milli is not None and parsed.uncapped == parsed.target
    # the containers' recommendations share the pod minimums between two containers, not three
    assert recommendation["containerRecommendations"][1]["lowerBound"]["memory"] == "125Mi"

    now[0] += S.recommender_interval_s
    b.step()
    writes = cluster.count("PATCH", "/verticalpodautoscalers/api")
    assert a.step() == []  # nothing new: neither the status nor the annotation is written again
    assert cluster.count("PATCH", "/verticalpodautoscalers/api") == writes


@pytest.mark.parametrize(("policy", "check"), [
    ({"maxAllowed": {"cpu": "300m"}}, lambda r, raw: r["target"]["cpu"] == "300m" and r["uncappedTarget"] == raw["target"]),
    ({"minAllowed": {"memory": "2Gi"}}, lambda r, raw: r["target"]["memory"] == "2Gi" and r["lowerBound"]["memory"] == "2Gi"),
    ({"controlledResources": ["memory"]}, lambda r, raw: set(r["target"]) == {"memory"}),
    ({"mode": "Off"}, lambda r, raw: r is None),
])
def test_the_pod_policy_caps_it(api: tuple[FakeCluster, client.ApiClient], policy: dict[str, Any], check: Any) -> None:
    cluster, c = api
    vpa = _vpa()
    vpa["metadata"]["annotations"] = {vpa_model.POD_POLICY_ANNOTATION: json.dumps(policy)}
    cluster.put(*VPA, vpa)
    now = [T0 + 86_400]
    a, b = _publishers(c, now)
    assert _both(a, b, now) == ["shop/api"]
    got = cluster.get(*VPA, "shop", "api")
    assert got is not None
    assert check(got["status"]["recommendation"].get("podRecommendations"), _expected(a, b))


def test_nothing_pod_level_for_pods_without_pod_level_resources(api: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = api
    cluster.prunes[VPA_KEY] = _prune_pod_recommendations
    now = [T0 + 86_400]
    a, b = _publishers(c, now, pod_level=False)
    assert _both(a, b, now) == ["shop/api"]
    vpa = cluster.get(*VPA, "shop", "api")
    assert vpa is not None and "podRecommendations" not in vpa["status"]["recommendation"]
    assert POD_RECOMMENDATION_ANNOTATION not in (vpa["metadata"].get("annotations") or {})
    assert cluster.count("PATCH", "/verticalpodautoscalers/api") == cluster.count("PATCH", STATUS)  # the status alone
    histories = cluster.objects["kube-cgroup-agent.io/v1alpha1/nodehistories"]
    assert list(histories[("", "n1")]["spec"]["vpas"]) == ["shop/api"]


def test_the_wire_round_trip_and_what_older_readers_see() -> None:
    state = _state("a", 0.2, 600)
    entries = {"shop/api": partial(state, ["shop/a"])}
    doc = node_history("n1", T0, entries, None)
    vpas = doc["spec"]["vpas"]
    # an older reader looks up its VPA's own entry: containers only, in the format it reads
    assert set(vpas) == {"shop/api", pod_entry("shop/api")} and set(vpas["shop/api"]["containers"]) == {"app", "side"}
    assert set(vpas[pod_entry("shop/api")]["containers"]) == {POD}
    merged, nodes, bad = merge_histories(S, "shop/api", [doc])
    assert nodes == ["n1"] and bad == [] and set(merged) == {"app", "side", POD}
    again = wire.decode(S, wire.encode(entries["shop/api"][POD]))
    assert recommend(merged[POD], S, 1) == recommend(again, S, 1)
    # an older node's object (no pod entry, version 1 strings) still merges, beside a newer one's
    old = {"metadata": {"name": "n0"}, "spec": {"node": "n0", "vpas": {"shop/api": {"containers": {
        "app": '[1,[1764028800,10,0,[10]],[1764028800,1,3,[1]],1764000000,1764000060,2,0,1764000060]'}}}}}
    merged2, nodes2, bad2 = merge_histories(S, "shop/api", [old, doc])
    assert nodes2 == ["n0", "n1"] and bad2 == [] and set(merged2) == {"app", "side", POD}
    assert merged2["app"].samples == merged["app"].samples + 2


def test_the_annotation_is_the_vpa_models() -> None:
    assert POD_RECOMMENDATION_ANNOTATION == vpa_model.POD_RECOMMENDATION_ANNOTATION


_R = Recommendation(Estimate(400, 600 * 2**20), Estimate(200, 500 * 2**20), Estimate(900, 2**30), Estimate(400, 600 * 2**20), 1.0)


@pytest.mark.parametrize(("caps", "target", "lower", "upper"), [
    (PodCaps(), (400, 600 * 2**20), (200, 500 * 2**20), (900, 2**30)),
    (PodCaps(max_allowed=Resources(300, None)), (300, 600 * 2**20), (200, 500 * 2**20), (300, 2**30)),
    (PodCaps(min_allowed=Resources(250, 2**30)), (400, 2**30), (250, 2**30), (900, 2**30)),
    (PodCaps(min_allowed=Resources(500, None), max_allowed=Resources(450, None)), (450, 600 * 2**20), (450, 500 * 2**20), (450, 2**30)),
])
def test_capped_as_vpa_caps_a_container(caps: PodCaps, target: tuple[int, int], lower: tuple[int, int], upper: tuple[int, int]) -> None:
    r = capped(_R, caps)
    assert (r.target, r.lower, r.upper) == (Estimate(*target), Estimate(*lower), Estimate(*upper))
    assert r.uncapped == _R.target


@given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10_000))
def test_capped_stays_within_the_policy(cpu: int, memory: int, low: int, span: int) -> None:
    caps = PodCaps(min_allowed=Resources(low, low), max_allowed=Resources(low + span, low + span))
    r = capped(Recommendation(Estimate(cpu, memory), Estimate(cpu // 2, memory // 2), Estimate(cpu * 2, memory * 2),
                              Estimate(cpu, memory), 1.0), caps)
    for e in (r.target, r.lower, r.upper):
        assert low <= e.cpu_milli <= low + span and low <= e.memory <= low + span
    assert r.uncapped == Estimate(cpu, memory)


def test_a_role_that_may_not_patch_the_vpa_keeps_the_containers_status(api: tuple[FakeCluster, client.ApiClient]) -> None:
    """The shipped role may patch verticalpodautoscalers/status only: the annotation is refused (403), the
    status is written and kept, the step goes on, and the next one does not write again."""
    cluster, c = api
    cluster.prunes[VPA_KEY] = _prune_pod_recommendations
    cluster.fail("PATCH", "/verticalpodautoscalers/api$", 403, times=10)
    now = [T0 + 86_400]
    a, b = _publishers(c, now)
    assert _both(a, b, now) == ["shop/api"]
    vpa = cluster.get(*VPA, "shop", "api")
    assert vpa is not None and [r["containerName"] for r in vpa["status"]["recommendation"]["containerRecommendations"]] == ["app", "side"]
    assert POD_RECOMMENDATION_ANNOTATION not in (vpa["metadata"].get("annotations") or {})
    writes = cluster.count("PATCH", STATUS)
    now[0] += S.recommender_interval_s
    b.step()
    assert a.step() == [] and cluster.count("PATCH", STATUS) == writes
