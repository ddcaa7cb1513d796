"""What the publishing tests share: a node's pods and a VPA as the fake API server holds them, a state of
one container's samples, two nodes' publishers, and the fake API server serving VPAs, NodeHistories and
Leases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client

from agent.infra.apiserver import APIServer, path
from agent.pods.parse import parse_pod
from agent.recommender import wire
from agent.recommender.config import RecommenderSettings
from agent.recommender.model import ContainerHistory
from agent.recommender.publish import HISTORY, VPA, Publisher
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
    return {"metadata": {"name": "api", "namespace": "shop", "uid": "vpa-uid"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": ref_kind, "name": ref_name},
                     "recommenders": [{"name": "kube-cgroup-agent"}]}}


def _vpas(c: client.ApiClient) -> Any:
    """Every VPA, as the daemon's reader would hand the node's (here: the VPAs are all the node's)."""
    return lambda: APIServer(c).list(path(f"{VPA[0]}/{VPA[1]}", VPA[2]))["items"]


def _state(pod: str, cpu: float, n: int) -> RecommenderState:
    st = RecommenderState(S)
    for i in range(n):
        st.observe(Sample(T0 + 60 * i, f"shop/{pod}", "app", cpu=cpu, memory=400e6 + i))
    return st


def serving() -> Iterator[tuple[FakeCluster, client.ApiClient]]:
    """The fake API server with the VPA `_vpa()`, and a client of it."""
    cluster = FakeCluster(node={"metadata": {"name": "n1", "uid": "node-uid"}, "status": {}})
    cluster.serve(*VPA, kind="VerticalPodAutoscaler")
    cluster.serve(*HISTORY, kind="NodeHistory", namespaced=False)
    cluster.serve("coordination.k8s.io", "v1", "leases", kind="Lease")
    cluster.put(*VPA, _vpa())
    server = FakeAPIServer(cluster)
    server.start()
    cfg = client.Configuration()
    cfg.host = server.url
    with client.ApiClient(cfg) as c:
        yield cluster, c
    server.stop()


def _roundtrip(h: ContainerHistory) -> ContainerHistory:
    return wire.decode(S, wire.encode(h))


def _pair(c: client.ApiClient, now: list[float]) -> tuple[Publisher, Publisher, RecommenderState, RecommenderState]:
    a_state, b_state = _state("a", 0.2, 300), _state("b", 1.5, 300)
    a = Publisher(c, "n1", a_state, lambda: [_pod("a", "n1")], _vpas(c), clock=lambda: now[0])
    b = Publisher(c, "n2", b_state, lambda: [_pod("b", "n2")], _vpas(c), clock=lambda: now[0])
    return a, b, a_state, b_state
