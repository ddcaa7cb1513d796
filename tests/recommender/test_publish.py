"""Two nodes' recommenders and the fake API server: each publishes its partial histories, the Lease holder
merges them into the VPA's status (rate-limited), and when the holder dies the other node takes over
within a lease period with nothing lost."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from agent.infra.apiserver import APIServer, path
from agent.pods.parse import parse_pod
from agent.recommender.config import RecommenderSettings
from agent.recommender.model import ContainerHistory
from agent.recommender.publish import PARTIAL, VPA, Publisher, lease_seconds, selects, status_for
from agent.recommender.state import RecommenderState
from agent.recommender.trace import Sample
from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.server import FakeAPIServer

T0 = 1_764_000_000.0
S = RecommenderSettings()


def _pod(name: str, node: str, owner: tuple[str, str] = ("ReplicaSet", "api-5d8f7"), ns: str = "shop") -> Any:
    return parse_pod({
        "metadata": {"name": name, "namespace": ns, "uid": f"u-{name}", "labels": {"pod-template-hash": "5d8f7"},
                     "ownerReferences": [{"kind": owner[0], "name": owner[1], "controller": True, "apiVersion": "apps/v1", "uid": "x"}]},
        "spec": {"nodeName": node, "containers": [{"name": "app"}]},
    })


def _vpa(ref_kind: str = "Deployment", ref_name: str = "api") -> dict[str, Any]:
    return {"metadata": {"name": "api", "namespace": "shop"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": ref_kind, "name": ref_name},
                     "recommenders": [{"name": "kube-cgroup-agent"}]}}


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


def _vpas(c: client.ApiClient) -> Any:
    """Every VPA, as the daemon's reader would hand the node's (here: the VPAs are all the node's)."""
    return lambda: APIServer(c).list(path(f"{VPA[0]}/{VPA[1]}", VPA[2]))["items"]


def _state(pod: str, cpu: float, n: int) -> RecommenderState:
    st = RecommenderState(S)
    for i in range(n):
        st.observe(Sample(T0 + 60 * i, f"shop/{pod}", "app", cpu=cpu, memory=400e6 + i))
    return st


@pytest.fixture
def api() -> Iterator[tuple[FakeCluster, client.ApiClient]]:
    cluster = FakeCluster(node={"metadata": {"name": "n1"}, "status": {}})
    cluster.serve(*VPA, kind="VerticalPodAutoscaler")
    cluster.serve(*PARTIAL, kind="RecommendationPartial")
    cluster.serve("coordination.k8s.io", "v1", "leases", kind="Lease")
    cluster.put(*VPA, _vpa())
    server = FakeAPIServer(cluster)
    server.start()
    cfg = client.Configuration()
    cfg.host = server.url
    with client.ApiClient(cfg) as c:
        yield cluster, c
    server.stop()


def test_the_leader_merges_both_nodes_and_a_successor_loses_nothing(api: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a_state, b_state = _state("a", 0.2, 300), _state("b", 1.5, 300)
    a = Publisher(c, "n1", a_state, lambda: [_pod("a", "n1")], _vpas(c), clock=lambda: now[0])
    b = Publisher(c, "n2", b_state, lambda: [_pod("b", "n2")], _vpas(c), clock=lambda: now[0])

    assert a.step() == ["shop/api"]  # first: takes the Lease, writes what it has (its own partial)
    assert b.step() == []  # publishes its partial; the Lease is n1's
    now[0] += 61  # one recommenderInterval later, n1 merges both
    assert a.step() == ["shop/api"]
    merged = ContainerHistory(S)
    merged.merge(a_state.histories[("shop/a", "app")])
    merged.merge(b_state.histories[("shop/b", "app")])
    expected = status_for(S, {"app": merged}, now[0])
    vpa = cluster.get(*VPA, "shop", "api")
    assert vpa is not None
    assert vpa["status"]["recommendation"] == expected["recommendation"]
    assert {c["type"]: c["status"] for c in vpa["status"]["conditions"]} == {"RecommendationProvided": "True", "LowConfidence": "True"}
    partials = cluster.objects["kube-cgroup-agent.io/v1alpha1/recommendationpartials"]
    assert sorted(name for _, name in partials) == ["api-n1", "api-n2"]

    assert a.step() == []  # rate limit: at most one status write per recommenderInterval
    patches = cluster.count("PATCH", "/verticalpodautoscalers/api/status")
    assert patches == 2

    # n1 dies (no more steps, nothing released). Within the lease period n2 cannot take over; after it, it does.
    now[0] += 10
    assert b.step() == []
    now[0] += lease_seconds(S.recommender_interval_s)
    assert b.step() == ["shop/api"]
    vpa = cluster.get(*VPA, "shop", "api")
    assert vpa is not None
    # n1's partial is still in the API: the successor's status is the same merge
    assert vpa["status"]["recommendation"] == status_for(S, {"app": merged}, now[0])["recommendation"]
    lease = cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api")
    assert lease is not None and lease["spec"]["holderIdentity"] == "n2" and lease["spec"]["leaseTransitions"] == 1


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
    """Each node steps once an interval, at its own phase: the Lease outlives the holder's interval, so the
    other node, stepping in between, never takes it, and only the holder writes the status."""
    cluster, c = api
    now = [T0 + 86_400]
    a = Publisher(c, "n1", _state("a", 0.2, 300), lambda: [_pod("a", "n1")], _vpas(c), clock=lambda: now[0])
    b = Publisher(c, "n2", _state("b", 1.5, 300), lambda: [_pod("b", "n2")], _vpas(c), clock=lambda: now[0])
    interval = S.recommender_interval_s
    written: list[str] = []
    for _ in range(6):
        written += [f"n1:{v}" for v in a.step()]
        now[0] += interval * 0.7  # n2's phase: well past a 30 s Lease, within this one
        written += [f"n2:{v}" for v in b.step()]
        now[0] += interval * 0.3 + 1
    assert written == ["n1:shop/api"] * 6
    lease = cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api")
    assert lease is not None and lease["spec"]["holderIdentity"] == "n1"
    assert lease["spec"]["leaseDurationSeconds"] == lease_seconds(interval) > 2 * interval
    assert not lease["spec"].get("leaseTransitions")


def test_a_holder_that_stops_gives_its_lease_up_and_the_next_node_takes_over_at_once(
    api: tuple[FakeCluster, client.ApiClient],
) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a = Publisher(c, "n1", _state("a", 0.2, 300), lambda: [_pod("a", "n1")], _vpas(c), clock=lambda: now[0])
    b = Publisher(c, "n2", _state("b", 1.5, 300), lambda: [_pod("b", "n2")], _vpas(c), clock=lambda: now[0])
    assert a.step() == ["shop/api"]
    now[0] += 5
    assert b.step() == []
    assert a.release_all() == 1
    assert a.release_all() == 0  # nothing held any more
    now[0] += 1  # long before the Lease would have expired
    assert b.step() == ["shop/api"]
    lease = cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api")
    assert lease is not None and lease["spec"]["holderIdentity"] == "n2"


def test_a_released_lease_taken_by_another_node_is_not_released_again(api: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = api
    now = [T0 + 86_400]
    a = Publisher(c, "n1", _state("a", 0.2, 300), lambda: [_pod("a", "n1")], _vpas(c), clock=lambda: now[0])
    b = Publisher(c, "n2", _state("b", 1.5, 300), lambda: [_pod("b", "n2")], _vpas(c), clock=lambda: now[0])
    assert a.step() == ["shop/api"]
    now[0] += lease_seconds(S.recommender_interval_s) + 1  # n1 stalled past its Lease: n2 takes it
    assert b.step() == ["shop/api"]
    a.release_all()  # n1 still believes it holds it: the release leaves n2's Lease alone
    lease = cluster.get("coordination.k8s.io", "v1", "leases", "shop", "kcg-rec-api")
    assert lease is not None and lease["spec"]["holderIdentity"] == "n2"
