"""The VPA status a Lease holder writes (agent.recommender.publish.worth_writing): only when it says
something new — a condition, a target beyond `statusMinChange`, a bound beyond a bucket — on the fake API
server and as a property."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client

from agent.recommender.publish import HISTORY, VPA, Publisher, merge_histories, status_for, worth_writing
from agent.recommender.state import RecommenderState
from agent.recommender.trace import Sample
from tests.recommender.publish_env import T0, S, _pod, _state, _vpa, _vpas
from tests.support.fakeapi.cluster import FakeCluster


def _status(target: str = "100m", lower: str = "50m", upper: str = "400m", message: str = "merged by n1 from 2 node(s)") -> dict[str, Any]:
    return {"recommendation": {"containerRecommendations": [{
        "containerName": "app", "target": {"cpu": target, "memory": "256Mi"}, "lowerBound": {"cpu": lower, "memory": "200Mi"},
        "upperBound": {"cpu": upper, "memory": "1Gi"}, "uncappedTarget": {"cpu": target, "memory": "256Mi"}}]},
        "conditions": [{"type": "RecommendationProvided", "status": "True", "reason": "", "message": message,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


def _two(status: dict[str, Any]) -> dict[str, Any]:
    """The status with a second container."""
    recs = status["recommendation"]["containerRecommendations"]
    return {**status, "recommendation": {"containerRecommendations": [*recs, {**recs[0], "containerName": "side"}]}}


def _without_memory_target(status: dict[str, Any]) -> dict[str, Any]:
    rec = status["recommendation"]["containerRecommendations"][0]
    return {**status, "recommendation": {"containerRecommendations": [{**rec, "target": {"cpu": rec["target"]["cpu"]}}]}}


@pytest.mark.parametrize(
    ("old", "new", "min_change", "written"),
    [
        (None, _status(), 0.10, True),  # nothing yet
        (_status(), _status(), 0.10, False),
        (_status(), {**_status(), "conditions": [{**_status()["conditions"][0], "lastTransitionTime": "2027-01-01T00:00:00Z"}]},
         0.10, False),
        (_status(), _status(message="merged by n2 from 2 node(s)"), 0.10, True),  # another holder says so
        (_status(), _two(_status()), 0.10, True),  # a container appeared
        (_two(_status()), _status(), 0.10, True),  # and went
        (_status(), _without_memory_target(_status()), 0.10, True),  # a field went
        ({"recommendation": {"containerRecommendations": [{"containerName": "app", "target": {"cpu": "x"}}]}}, _status(),
         0.10, True),
        # targets: by more than min_change of the larger value
        (_status(), _status(target="101m"), 0.0, True),  # 0: any move, however small
        (_status(), _status(target="101m"), 0.10, False),
        (_status(), _status(target="110m"), 0.10, False),  # 10 / 110: within
        (_status(), _status(target="112m"), 0.10, True),  # 12 / 112
        (_status(), _status(target="91m"), 0.10, False),  # 9 / 100
        (_status(), _status(target="89m"), 0.10, True),
        (_status(), _status(target="112m"), 0.20, False),
        (_status(), _status(target="0"), 0.10, True),  # to zero
        (_status(target="0"), _status(target="1m"), 0.10, True),  # from zero
        # bounds: by more than one bucket (5 %) and more than min_change
        (_status(), _status(upper="410m"), 0.0, False),  # within one bucket: the confidence's drift
        (_status(), _status(upper="430m"), 0.0, True),  # beyond a bucket
        (_status(), _status(upper="430m"), 0.10, False),  # 30 / 430: beyond a bucket, within min_change
        (_status(), _status(upper="450m"), 0.10, True),
        (_status(), _status(lower="40m"), 0.10, True),  # 10 / 50
        (_status(), _status(lower="46m"), 0.10, False),
    ],
)
def test_a_holder_writes_a_status_only_when_it_says_something_new(old: Any, new: dict[str, Any], min_change: float,
                                                                   written: bool) -> None:
    assert worth_writing(old, new, min_change) is written


@settings(max_examples=300, deadline=None)
@given(x=st.integers(0, 100_000), y=st.integers(0, 100_000), min_change=st.sampled_from([0.0, 0.05, 0.10, 0.25, 0.5]))
def test_a_target_is_written_once_it_moved_more_than_min_change_of_the_larger_value(x: int, y: int, min_change: float) -> None:
    """Only the CPU target moves (and the uncapped target with it, whose threshold, a bound's, is never
    below the target's); the bounds stay."""
    old, new = _status(target=f"{x}m"), _status(target=f"{y}m")
    moved = x != y and (x == 0 or y == 0 or abs(x - y) > min_change * max(x, y))
    assert worth_writing(old, new, min_change) is moved
    if min_change == 0.0:
        assert worth_writing(old, new, 0.0) is (x != y)  # as before statusMinChange: any target's move
    for smaller in (0.0, min_change / 2):
        assert worth_writing(old, new, smaller) or not moved  # a smaller min_change writes at least as often


def test_the_holder_holds_a_target_back_until_it_moved_more_than_status_min_change(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    """A load creeping up 3 % an interval: with statusMinChange 0.10 the status's target follows in steps of
    more than 10 % (never further behind the merge than that); with 0, at every move."""
    cluster, c = api
    writes: dict[float, int] = {}
    now = [0.0]
    for min_change in (0.0, 0.10):
        cluster.remove(*VPA, "shop", "api")
        cluster.put(*VPA, _vpa())
        settings_ = replace(S, status_min_change=min_change)
        state = RecommenderState(settings_)
        now[0] = T0 + 86_400
        a = Publisher(c, f"n-{min_change}", state, lambda: [_pod("a", "n1")], _vpas(c), clock=lambda: now[0])
        before = cluster.count("PATCH", "/verticalpodautoscalers/api/status")
        cpu = 0.2
        for _ in range(12):
            for k in range(5):
                state.observe(Sample(now[0] + 60 * k, "shop/a", "app", cpu=cpu, memory=400e6))
            cpu *= 1.03
            now[0] += S.recommender_interval_s
            a.step()
            vpa = cluster.get(*VPA, "shop", "api")
            assert vpa is not None
            merged = merge_histories(settings_, "shop/api", [cluster.get(*HISTORY, "", f"n-{min_change}") or {}])[0]
            fresh = status_for(settings_, merged, now[0])
            written = vpa["status"]["recommendation"]["containerRecommendations"][0]["target"]["cpu"]
            exact = fresh["recommendation"]["containerRecommendations"][0]["target"]["cpu"]
            assert abs(_milli(written) - _milli(exact)) <= min_change * max(_milli(written), _milli(exact))
        writes[min_change] = cluster.count("PATCH", "/verticalpodautoscalers/api/status") - before
        a.release_all()
        cluster.remove(*HISTORY, "", f"n-{min_change}")  # the next run's holder merges its own histories only
    assert writes[0.10] < writes[0.0], writes


def _milli(cpu: str) -> float:
    return float(cpu[:-1]) if cpu.endswith("m") else float(cpu) * 1000


def test_bounds_that_only_drift_with_the_confidence_are_not_rewritten_every_interval(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    """Three days into a steady load, the bounds still narrow a little with every interval of history (the
    confidence grows): the holder writes when something moved a bucket, not at every merge."""
    cluster, c = api
    state = _state("a", 0.2, 3 * 1440)
    now = [T0 + 3 * 86_400]
    a = Publisher(c, "n1", state, lambda: [_pod("a", "n1")], _vpas(c), clock=lambda: now[0])
    writes = 0
    for _ in range(24):  # two hours
        for k in range(5):  # the same steady load between merges
            state.observe(Sample(now[0] + 60 * k, "shop/a", "app", cpu=0.2, memory=400e6))
        now[0] += S.recommender_interval_s
        writes += len(a.step())
    patched = cluster.count("PATCH", "/verticalpodautoscalers/api/status")
    assert writes == patched and 1 <= writes <= 2, writes
