"""Two nodes' recommenders and the fake API server: each publishes its histories in its NodeHistory, the
Lease holder merges them into the VPA's status (written only when it changed), and when the holder dies the
other node takes over within a lease period with nothing lost; what each step costs the API server."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client

from agent.recommender.model import ContainerHistory
from agent.recommender.publish import (
    HISTORY,
    RENEW_AFTER_INTERVALS,
    VPA,
    Publisher,
    lease_seconds,
    renewal_due,
    selects,
    status_for,
    vpa_label,
)
from agent.recommender.trace import Sample
from tests.recommender.publish_env import T0, S, _pair, _pod, _roundtrip, _state, _vpa, _vpas
from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.server import FakeAPIServer


@pytest.mark.parametrize(
    ("vpa", "pod", "expected"),
    [
        (_vpa(), _pod("a", "n1"), True),  # Deployment api -> ReplicaSet api-<pod-template-hash>
        (_vpa("Deployment", "ap"), _pod("a", "n1"), False),  # a prefix is not the Deployment
        (_vpa("StatefulSet", "db"), _pod("a", "n1", ("StatefulSet", "db")), True),
        (_vpa("StatefulSet", "db"), _pod("a", "n1", ("StatefulSet", "db"), ns="other"), False),  # another namespace
        (_vpa("DaemonSet", "x"), _pod("a", "n1", ("ReplicaSet", "x-5d8f7")), False),
    ],
)
def test_which_pods_a_vpa_selects(vpa: dict[str, Any], pod: Any, expected: bool) -> None:
    assert selects(vpa, pod) is expected


def test_the_leader_merges_both_nodes_and_a_successor_loses_nothing(api: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a, b, a_state, b_state = _pair(c, now)
    interval = S.recommender_interval_s

    assert a.step() == ["shop/api"]  # first: takes the Lease, writes what it has (its own histories)
    assert b.step() == []  # publishes its histories; the Lease is n1's
    now[0] += interval  # one recommenderInterval later, n1 merges both
    assert a.step() == ["shop/api"]
    merged = ContainerHistory(S)
    merged.merge(_roundtrip(a_state.histories[("shop/a", "app")]))
    merged.merge(_roundtrip(b_state.histories[("shop/b", "app")]))
    expected = status_for(S, {"app": merged}, now[0], "n1", 2)
    vpa = cluster.get(*VPA, "shop", "api")
    assert vpa is not None
    assert vpa["status"]["recommendation"] == expected["recommendation"]
    assert {c["type"]: c["status"] for c in vpa["status"]["conditions"]} == {"RecommendationProvided": "True", "LowConfidence": "True"}
    assert vpa["status"]["conditions"][0]["message"] == "merged by n1 from 2 node(s)"
    # one object per node, named after it, labelled for the VPA, owned by its Node where it could be read
    histories = cluster.objects["kube-cgroup-agent.io/v1alpha1/nodehistories"]
    assert sorted(name for _, name in histories) == ["n1", "n2"]
    n1 = histories[("", "n1")]
    assert n1["metadata"]["labels"] == {vpa_label("shop/api"): ""}
    assert n1["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid"}]
    assert list(n1["spec"]["vpas"]) == ["shop/api"] and n1["spec"]["node"] == "n1"

    now[0] += interval
    assert a.step() == []  # nothing changed: the status is not written again
    assert cluster.count("PATCH", "/verticalpodautoscalers/api/status") == 2

    # n1 dies (no more steps, nothing released). Within the lease period n2 cannot take over; after it, it does.
    now[0] += 10
    assert b.step() == []
    now[0] += lease_seconds(interval)
    assert b.step() == ["shop/api"]
    vpa = cluster.get(*VPA, "shop", "api")
    assert vpa is not None
    # n1's histories are still in the API: the successor's recommendation is the same merge
    assert vpa["status"]["recommendation"] == expected["recommendation"]
    assert vpa["status"]["conditions"][0]["message"] == "merged by n2 from 2 node(s)"
    lease = cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api")
    assert lease is not None and lease["spec"]["holderIdentity"] == "n2" and lease["spec"]["leaseTransitions"] == 1
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "vpa-uid"  # deleted with its VPA


def test_without_the_vpa_crd_nothing_is_published() -> None:
    cluster = FakeCluster(node={"metadata": {"name": "n1"}, "status": {}})
    server = FakeAPIServer(cluster)
    server.start()
    cfg = client.Configuration()
    cfg.host = server.url
    try:
        with client.ApiClient(cfg) as c:
            assert Publisher(c, "n1", _state("a", 0.2, 10), lambda: [_pod("a", "n1")], _vpas(c)).step() == []
        assert cluster.count("POST") == 0 and cluster.count("PATCH") == 0
    finally:
        server.stop()


def test_the_holder_keeps_its_lease_whatever_the_phase_of_the_other_nodes_steps(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    """Each node steps once an interval, at its own phase: the Lease outlives the holder's renewals, so the
    other node, stepping in between, never takes it, and only the holder writes the status."""
    cluster, c = api
    now = [T0 + 86_400]
    a, b, a_state, _ = _pair(c, now)
    interval = S.recommender_interval_s
    written: list[str] = []
    for i in range(9):
        a_state.observe(Sample(now[0], "shop/a", "app", cpu=0.2 + 0.3 * (i % 2), memory=400e6))  # new samples each time
        written += [f"n1:{v}" for v in a.step()]
        now[0] += interval * 0.7
        written += [f"n2:{v}" for v in b.step()]
        now[0] += interval * 0.3 + 1
    assert written and set(written) == {"n1:shop/api"}
    lease = cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api")
    assert lease is not None and lease["spec"]["holderIdentity"] == "n1"
    assert lease["spec"]["leaseDurationSeconds"] == lease_seconds(interval) > (RENEW_AFTER_INTERVALS + 1) * interval
    assert not lease["spec"].get("leaseTransitions")


@pytest.mark.parametrize(
    ("interval_s", "lease_s"),
    [
        (1.0, 16),  # six intervals and the margin
        (10.0, 70),
        (20.0, 130),
        (60.0, 370),
        (300.0, 1810),  # the default: a bit over half an hour
        (0.5, 13),  # a fraction of a second rounds down
    ],
)
def test_a_lease_lasts_six_intervals_and_the_margin(interval_s: float, lease_s: int) -> None:
    assert lease_seconds(interval_s) == lease_s


@pytest.mark.parametrize(
    ("since_renewal", "due"),
    [(0.0, False), (2.0, False), (2.99, False), (3.0, True), (3.5, True), (5.0, True)],
)
def test_a_holder_renews_once_its_renewal_is_three_intervals_old(since_renewal: float, due: bool) -> None:
    interval = S.recommender_interval_s
    assert renewal_due(T0, T0 + since_renewal * interval, interval) is due


@settings(max_examples=200, deadline=None)
@given(
    interval=st.sampled_from([1.0, 10.0, 20.0, 300.0, 3600.0]),
    phase=st.floats(0.0, 1.0),
    late=st.lists(st.floats(0.0, 0.5), min_size=40, max_size=40),
)
def test_renewals_come_every_three_or_four_intervals_and_always_before_the_lease_expires(
    interval: float, phase: float, late: list[float],
) -> None:
    """Steps once an interval, each up to half an interval late (a slow API call, a busy node): the holder
    renews once its renewal is three intervals old, at the next step (so every three to four intervals on
    time, about 0.29 renewals an interval), and its Lease never lapses in between."""
    steps = [(k + phase + d) * interval for k, d in enumerate(late)]
    renewed = steps[0]
    gaps: list[float] = []
    for now in steps[1:]:
        assert now - renewed < lease_seconds(interval)  # still held at every step
        if renewal_due(renewed, now, interval):
            gaps.append((now - renewed) / interval)
            renewed = now
    assert gaps and all(RENEW_AFTER_INTERVALS <= g < RENEW_AFTER_INTERVALS + 1.5 for g in gaps), gaps


def test_what_a_step_costs_the_api_server(api: tuple[FakeCluster, client.ApiClient]) -> None:
    """Per interval: one write of each node's NodeHistory, one LIST per held VPA; the holder renews its
    Lease every third or fourth interval; the other node reads the Lease only once it could have expired."""
    cluster, c = api
    now = [T0 + 86_400]
    a, b, _, _ = _pair(c, now)
    interval = S.recommender_interval_s
    a.step()
    b.step()
    cluster.requests.clear()
    steps = 12
    for _ in range(steps):
        now[0] += interval
        a.step()
        b.step()
    assert cluster.count("PUT", "/nodehistories/") == 2 * steps  # each node's one object, once an interval
    assert cluster.count("GET", "/nodehistories?") == steps  # the holder's LIST of the VPA's histories
    renewals = cluster.count("PUT", "/leases/kcg-rec-api")
    assert steps / 4 <= renewals <= steps / 3
    lease_reads = cluster.count("GET", "/leases/kcg-rec-api")
    assert lease_reads == renewals + steps * interval // lease_seconds(interval)  # n2 only once it could have expired
    assert cluster.count("POST") == 0 and cluster.count("DELETE") == 0


def test_a_holder_that_stops_gives_its_lease_up_and_the_next_node_takes_over(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a, b, _, _ = _pair(c, now)
    assert a.step() == ["shop/api"]
    now[0] += 5
    assert b.step() == []  # n2 saw n1's Lease: it looks again once that could have expired
    assert a.release_all() == 1
    assert a.release_all() == 0  # nothing held any more
    now[0] += 1
    fresh = Publisher(c, "n3", _state("c", 0.5, 300), lambda: [_pod("c", "n3")], _vpas(c), clock=lambda: now[0])
    assert fresh.step() == ["shop/api"]  # a node that never saw the Lease takes it at once
    lease = cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api")
    assert lease is not None and lease["spec"]["holderIdentity"] == "n3"


def test_a_released_lease_is_taken_at_the_expiry_the_others_last_saw(api: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a, b, _, _ = _pair(c, now)
    interval = S.recommender_interval_s
    assert a.step() == ["shop/api"]
    assert b.step() == []
    a.release_all()
    now[0] += lease_seconds(interval) - 1
    assert b.step() == [] and cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api") is None
    now[0] += 2
    assert b.step() == ["shop/api"]


def test_a_released_lease_taken_by_another_node_is_not_released_again(api: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a, b, _, _ = _pair(c, now)
    assert a.step() == ["shop/api"]
    now[0] += lease_seconds(S.recommender_interval_s) + 1  # n1 stalled past its Lease: n2 takes it
    assert b.step() == ["shop/api"]
    a.release_all()  # n1 still believes it holds it: the release leaves n2's Lease alone
    lease = cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api")
    assert lease is not None and lease["spec"]["holderIdentity"] == "n2"


def test_a_stalled_holder_learns_it_lost_the_lease_and_stops_writing(api: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a, b, _, _ = _pair(c, now)
    assert a.step() == ["shop/api"]
    now[0] += lease_seconds(S.recommender_interval_s) + 1
    assert b.step() == ["shop/api"]
    now[0] += S.recommender_interval_s
    before = cluster.count("PATCH", "/verticalpodautoscalers/api/status")
    assert a.step() == []  # its renewal was due: it read the Lease, n2's now
    assert cluster.count("PATCH", "/verticalpodautoscalers/api/status") == before


def test_a_pod_that_left_keeps_its_history_in_the_entry_and_a_gone_vpa_leaves_the_object(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    state = _state("a", 0.2, 300)
    pods = [[_pod("a", "n1")]]
    a = Publisher(c, "n1", state, lambda: pods[0], _vpas(c), clock=lambda: now[0])
    a.step()
    pods[0] = []  # the pod moved away: its history stays in the merge while the state keeps it
    now[0] += S.recommender_interval_s
    a.step()
    obj = cluster.get(*HISTORY, "", "n1")
    assert obj is not None and list(obj["spec"]["vpas"]) == ["shop/api"]
    cluster.remove(*VPA, "shop", "api")  # the VPA deleted: its entry and label go at the next write
    now[0] += S.recommender_interval_s
    assert a.step() == []
    obj = cluster.get(*HISTORY, "", "n1")
    assert obj is not None and obj["spec"]["vpas"] == {} and not obj["metadata"].get("labels")
    assert cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api") is None  # given up


def test_one_bad_node_history_is_skipped_and_the_others_merged(api: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a, _, a_state, _ = _pair(c, now)
    cluster.put(*HISTORY, {"metadata": {"name": "evil", "namespace": "", "labels": {vpa_label("shop/api"): ""}},
                           "spec": {"node": "evil", "vpas": {"shop/api": {"containers": {"app": "[1, \"junk\"]"}}}}})
    assert a.step() == ["shop/api"]
    vpa = cluster.get(*VPA, "shop", "api")
    assert vpa is not None
    only = status_for(S, {"app": _roundtrip(a_state.histories[("shop/a", "app")])}, now[0], "n1", 1)
    assert vpa["status"]["recommendation"] == only["recommendation"]


def test_a_restarted_node_rewrites_its_object_over_the_one_it_left(api: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a, _, a_state, _ = _pair(c, now)
    a.step()
    again = Publisher(c, "n1", a_state, lambda: [_pod("a", "n1")], _vpas(c), clock=lambda: now[0])
    now[0] += S.recommender_interval_s
    again.step()
    obj = cluster.get(*HISTORY, "", "n1")
    assert obj is not None and obj["spec"]["updated"].startswith("2025-11-2")
    assert cluster.count("POST", "/nodehistories") == 1


