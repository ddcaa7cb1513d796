"""What a node reads is what its pods need (agent.kube.owners, agent.daemon.scope), against the fake API
server: an owner link read once by name and forgotten with its last pod; a watch narrowed by the server and
replaced without a gap when the node's needs change; nothing of the objects elsewhere received."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from agent.daemon.scope import ScopedWatches, WatchSpec
from agent.infra.apiserver import APIServer, path
from agent.infra.metrics import Metrics
from agent.kube.owners import RETRY_S, OwnerLinks, first_links
from agent.pods.parse import parse_pod
from tests.e2e_k8s.nodes import wait_for
from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.server import FakeAPIServer

RS = ("apps", "v1", "replicasets")
JOBS = ("batch", "v1", "jobs")
STS = ("apps", "v1", "statefulsets")


def _pod(name: str, kind: str, owner: str, ns: str = "shop") -> Any:
    return parse_pod({"metadata": {"name": name, "namespace": ns, "uid": f"u-{name}",
                                   "ownerReferences": [{"apiVersion": "v1", "kind": kind, "name": owner, "uid": "x", "controller": True}]},
                      "spec": {"containers": [{"name": "app"}]}})


def _owned(name: str, kind: str, owner: str, ns: str = "shop") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": f"o-{owner}", "controller": True}]}}


@pytest.fixture
def api() -> Iterator[tuple[FakeCluster, APIServer]]:
    cluster = FakeCluster(node={"metadata": {"name": "n1"}, "status": {}})
    for g, v, r, k in (*((*RS, "ReplicaSet"),), (*JOBS, "Job"), (*STS, "StatefulSet")):
        cluster.serve(g, v, r, kind=k)
    server = FakeAPIServer(cluster)
    server.start()
    cfg = client.Configuration()
    cfg.host = server.url
    with client.ApiClient(cfg) as c:
        yield cluster, APIServer(c)
    server.stop()


def test_only_controlled_kinds_are_followed() -> None:
    pods = [_pod("a", "ReplicaSet", "web-1"), _pod("b", "StatefulSet", "db"), _pod("c", "Job", "nightly-27")]
    assert first_links(pods) == {("shop", "ReplicaSet", "web-1"), ("shop", "Job", "nightly-27")}


def test_each_link_is_read_once_by_name_and_forgotten_with_its_last_pod(api: tuple[FakeCluster, APIServer]) -> None:
    cluster, server = api
    cluster.put(*RS, _owned("web-1", "Deployment", "web"))
    cluster.put(*JOBS, _owned("nightly-27", "CronJob", "nightly"))
    for i in range(40):  # the cluster's other ReplicaSets: never read
        cluster.put(*RS, _owned(f"other-{i}", "Deployment", f"other-{i}"))
    links = OwnerLinks(server)
    pods = [_pod("a", "ReplicaSet", "web-1"), _pod("a2", "ReplicaSet", "web-1"), _pod("c", "Job", "nightly-27")]
    assert links.update(pods) is True
    assert links.owners() == {("shop", "ReplicaSet", "web-1"): ("Deployment", "web"),
                              ("shop", "Job", "nightly-27"): ("CronJob", "nightly")}
    assert links.update(pods) is False  # known: not read again
    reads = [r.path for r in cluster.requests if r.method == "GET"]
    assert sorted(reads) == ["/apis/apps/v1/namespaces/shop/replicasets/web-1", "/apis/batch/v1/namespaces/shop/jobs/nightly-27"]
    assert links.update(pods[2:]) is True  # web-1's pods left
    assert links.owners() == {("shop", "Job", "nightly-27"): ("CronJob", "nightly")}


def test_a_link_gone_is_final_and_one_that_fails_is_read_again_later(api: tuple[FakeCluster, APIServer]) -> None:
    cluster, server = api
    now = [0.0]
    links = OwnerLinks(server, clock=lambda: now[0])
    pods = [_pod("a", "ReplicaSet", "gone-1")]
    links.update(pods)
    assert links.owners() == {} and not links.pending()  # 404: no controller, and not read again
    links.update(pods)
    assert cluster.count("GET", "/replicasets/gone-1") == 1

    cluster.put(*RS, _owned("web-1", "Deployment", "web"))
    cluster.fail("GET", "/replicasets/web-1", 500, times=1)
    pods = [_pod("b", "ReplicaSet", "web-1")]
    links.update(pods)
    assert links.pending() and links.owners() == {}
    links.update(pods)  # too soon
    assert cluster.count("GET", "/replicasets/web-1") == 1
    now[0] += RETRY_S
    assert links.update(pods) is True and links.owners() == {("shop", "ReplicaSet", "web-1"): ("Deployment", "web")}


def _names(watches: ScopedWatches) -> set[str]:
    return {str(o["metadata"]["name"]) for o in watches.values()}


def test_a_watch_narrowed_by_name_receives_its_object_only_and_follows_the_nodes_needs(api: tuple[FakeCluster, APIServer]) -> None:
    cluster, server = api
    for name in ("db", "cache", *(f"far-{i}" for i in range(20))):
        cluster.put(*STS, {"metadata": {"name": name, "namespace": "shop"}, "spec": {"replicas": 1}})
    changed = threading.Event()
    watches = ScopedWatches(server, Metrics(), "statefulsets", changed.set)
    try:
        spec = {n: WatchSpec(path("apps/v1", "statefulsets", "shop"), field_selector=f"metadata.name={n}") for n in ("db",)}
        watches.want(spec)
        wait_for("db listed", lambda: _names(watches) == {"db"}, 10)
        cluster.put(*STS, {"metadata": {"name": "far-3", "namespace": "shop"}, "spec": {"replicas": 2}})  # elsewhere
        cluster.put(*STS, {"metadata": {"name": "db", "namespace": "shop"}, "spec": {"replicas": 3}})
        wait_for("db's change", lambda: [o["spec"]["replicas"] for o in watches.values()] == [3], 10)
        assert _names(watches) == {"db"}
        lists = [r.path for r in cluster.requests if r.method == "GET" and "/statefulsets" in r.path]
        assert lists and all("fieldSelector=metadata.name%3Ddb" in p for p in lists), lists

        watches.want({**spec, "cache": WatchSpec(path("apps/v1", "statefulsets", "shop"), field_selector="metadata.name=cache")})
        wait_for("cache added", lambda: _names(watches) == {"db", "cache"}, 10)
        watches.want({})  # the node's last pods of both left
        assert _names(watches) == set() and watches.keys() == frozenset()
    finally:
        watches.close()


def test_a_replaced_selector_keeps_serving_until_its_successor_has_listed(api: tuple[FakeCluster, APIServer]) -> None:
    """The union never loses an object for the moment between two selectors (a VPA that seemed gone
    would un-decide its pods)."""
    cluster, server = api
    for name, tier in (("a", "x"), ("b", "y")):
        cluster.put(*STS, {"metadata": {"name": name, "namespace": "shop", "labels": {"tier": tier}}, "spec": {}})
    watches = ScopedWatches(server, Metrics(), "statefulsets", lambda: None)
    try:
        watches.want({"node": WatchSpec(path("apps/v1", "statefulsets"), label_selector="tier in (x)")})
        wait_for("a listed", lambda: _names(watches) == {"a"}, 10)
        cluster.slow("GET", "/statefulsets?", 1.0, times=1)  # the successor's list takes a second
        seen: list[set[str]] = []
        watches.want({"node": WatchSpec(path("apps/v1", "statefulsets"), label_selector="tier in (x,y)")})
        wait_for("both", lambda: (seen.append(_names(watches)) or _names(watches) == {"a", "b"}), 10)
        assert all("a" in s for s in seen), seen  # a was served throughout
    finally:
        watches.close()


def test_the_clis_vpa_inputs_are_the_nodes_alone(tmp_path: Any) -> None:
    """`diff`/`plan`/`explain` with VPA on read what the daemon reads and its RBAC allows: the node's pods,
    their ReplicaSets by name, the VPAs by target label; never every ReplicaSet or VPA of the cluster."""
    from agent.kube.vpa_inputs import read_api
    from agent.vpa.target import TARGET_LABEL, target_value
    from tests.resize.manifests import ctr, manifest

    cluster = FakeCluster(node={"metadata": {"name": "n1"}, "status": {"nodeInfo": {"kubeletVersion": "v1.36.0"}}})
    cluster.serve(*RS, kind="ReplicaSet")
    cluster.serve("autoscaling.k8s.io", "v1", "verticalpodautoscalers", kind="VerticalPodAutoscaler")
    cluster.put(*RS, _owned("web-1", "Deployment", "web", ns="default"))
    for name in ("web", "far"):
        cluster.put("autoscaling.k8s.io", "v1", "verticalpodautoscalers", {
            "metadata": {"name": name, "namespace": "default", "labels": {TARGET_LABEL: target_value("default", "Deployment", name)}},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}}})
    pod = manifest("web-1-x", [ctr("app", lim={"cpu": "100m"})])
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "r", "controller": True}]
    pod["spec"]["nodeName"] = "n1"
    cluster.apply(pod)
    server = FakeAPIServer(cluster)
    server.start()
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(server.kubeconfig())
        inputs = read_api(str(kubeconfig), "n1")
    finally:
        server.stop()
    assert inputs is not None
    assert [v.key for v in inputs.vpas] == ["default/web"]
    assert dict(inputs.owners) == {("default", "ReplicaSet", "web-1"): ("Deployment", "web")}
    gets = sorted(r.path.split("?")[0] for r in cluster.requests if r.method == "GET")
    assert "/apis/apps/v1/replicasets" not in gets and "/apis/apps/v1/namespaces/default/replicasets/web-1" in gets
    vpa_lists = [r.path for r in cluster.requests if r.path.startswith("/apis/autoscaling.k8s.io/v1/verticalpodautoscalers")]
    assert all("labelSelector=" in p or "limit=1" in p for p in vpa_lists), vpa_lists
