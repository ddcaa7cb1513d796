"""The fake API server's generic object store, through the real kubernetes client (what later suites rely on)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.support.fakeapi.cluster import FakeCluster
from tests.support.fakeapi.patches import json_patch, merge_patch, strategic_merge
from tests.support.fakeapi.server import FakeAPIServer

VPA = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")


def _node() -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1"}, "status": {}}


@pytest.fixture
def served() -> Iterator[tuple[FakeCluster, client.ApiClient]]:
    cluster = FakeCluster(node=_node())
    cluster.serve(*VPA, kind="VerticalPodAutoscaler")
    cluster.serve("coordination.k8s.io", "v1", "leases", kind="Lease")
    api = FakeAPIServer(cluster)
    api.start()
    cfg = client.Configuration()
    cfg.host = api.url
    with client.ApiClient(cfg) as c:
        yield cluster, c
    api.stop()


def test_unserved_kind_is_404_like_a_missing_crd() -> None:
    cluster = FakeCluster(node=_node())
    api = FakeAPIServer(cluster)
    api.start()
    cfg = client.Configuration()
    cfg.host = api.url
    try:
        with client.ApiClient(cfg) as c, pytest.raises(ApiException) as err:
            client.CustomObjectsApi(c).list_cluster_custom_object(*VPA)
        assert err.value.status == 404
    finally:
        api.stop()


def test_custom_objects_list_get_patch_status(served: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = served
    cluster.put(*VPA, {"metadata": {"name": "v", "namespace": "a"}, "spec": {"updatePolicy": {"updateMode": "Off"}}})
    cluster.put(*VPA, {"metadata": {"name": "w", "namespace": "b", "labels": {"x": "1"}}, "spec": {}})
    co = client.CustomObjectsApi(c)
    assert [o["metadata"]["name"] for o in co.list_cluster_custom_object(*VPA)["items"]] == ["v", "w"]
    assert [o["metadata"]["name"] for o in co.list_namespaced_custom_object(VPA[0], VPA[1], "b", VPA[2])["items"]] == ["w"]
    assert [o["metadata"]["name"] for o in co.list_cluster_custom_object(*VPA, label_selector="x=1")["items"]] == ["w"]
    out = co.patch_namespaced_custom_object_status(
        VPA[0], VPA[1], "a", VPA[2], "v", {"status": {"recommendation": {"containerRecommendations": []}}}
    )
    assert out["status"] == {"recommendation": {"containerRecommendations": []}}
    # the main resource does not change status; the status subresource does not change spec
    co.patch_namespaced_custom_object(VPA[0], VPA[1], "a", VPA[2], "v", {"spec": {"updatePolicy": {"updateMode": "InPlace"}}, "status": None})
    got = cluster.get(*VPA, "a", "v")
    assert got is not None
    assert got["spec"]["updatePolicy"]["updateMode"] == "InPlace"
    assert got["status"] == {"recommendation": {"containerRecommendations": []}}


def test_lease_create_conflict_and_stale_update(served: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = served
    co = client.CoordinationV1Api(c)
    body = client.V1Lease(metadata=client.V1ObjectMeta(name="slot-0"), spec=client.V1LeaseSpec(holder_identity="n1"))
    lease = co.create_namespaced_lease("ns", body)
    with pytest.raises(ApiException) as exists:
        co.create_namespaced_lease("ns", body)
    assert exists.value.status == 409
    lease.spec.holder_identity = "n2"
    co.replace_namespaced_lease("slot-0", "ns", lease)  # current resourceVersion: accepted
    with pytest.raises(ApiException) as stale:  # the same (now stale) resourceVersion: refused
        co.replace_namespaced_lease("slot-0", "ns", lease)
    assert stale.value.status == 409
    got = cluster.get("coordination.k8s.io", "v1", "leases", "ns", "slot-0")
    assert got is not None and got["spec"]["holderIdentity"] == "n2"


def test_generic_watch_streams_changes_after_a_resource_version(served: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = served
    co = client.CustomObjectsApi(c)
    rv = co.list_cluster_custom_object(*VPA)["metadata"]["resourceVersion"]
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def consume() -> None:
        w = watch.Watch()
        for ev in w.stream(co.list_cluster_custom_object, *VPA, resource_version=rv, timeout_seconds=5):
            seen.append((ev["type"], ev["object"]["metadata"]["name"]))
            if len(seen) == 2:
                w.stop()
        done.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    cluster.put(*VPA, {"metadata": {"name": "v", "namespace": "a"}, "spec": {}})
    cluster.remove(*VPA, "a", "v")
    assert done.wait(10)
    assert seen == [("ADDED", "v"), ("DELETED", "v")]


def test_pod_patch_resize_delete_and_faults(served: tuple[FakeCluster, client.ApiClient]) -> None:
    cluster, c = served
    pod = {
        "metadata": {"name": "p", "namespace": "a", "uid": "u1", "labels": {"h": "1"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "i:1", "resources": {}}, {"name": "side", "image": "s:1"}]},
    }
    cluster.apply(pod)
    core = client.CoreV1Api(c)
    core.patch_namespaced_pod("p", "a", {"spec": {"containers": [{"name": "app", "image": "i:2"}]}, "metadata": {"labels": {"h": "2"}}})
    got = cluster.pod("a", "p")
    assert got is not None
    assert [x["image"] for x in got["spec"]["containers"]] == ["i:2", "s:1"]  # merged by name
    assert got["metadata"]["labels"] == {"h": "2"}
    with pytest.raises(ApiException) as stale:
        core.patch_namespaced_pod("p", "a", {"metadata": {"resourceVersion": "1"}})
    assert stale.value.status == 409
    cluster.fail("PATCH", "/pods/p", 500)
    with pytest.raises(ApiException) as injected:
        core.patch_namespaced_pod("p", "a", {"metadata": {"labels": {"h": "3"}}})
    assert injected.value.status == 500
    core.delete_namespaced_pod("p", "a")
    assert cluster.pod("a", "p") is None
    assert cluster.count("DELETE", "/pods/p") == 1


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        ({"a": 1, "b": {"c": 2}}, {"b": {"c": None, "d": 3}}, {"a": 1, "b": {"d": 3}}),  # RFC 7386 example shape
        ({"l": [1, 2]}, {"l": [3]}, {"l": [3]}),  # lists are replaced
    ],
)
def test_merge_patch(target: Any, patch: Any, expected: Any) -> None:
    assert merge_patch(target, patch) == expected


def test_strategic_merge_by_name_and_type_and_json_patch() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]},
           "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    out = strategic_merge(pod, {"spec": {"containers": [{"name": "b", "image": "2"}]},
                                "status": {"conditions": [{"type": "X", "status": "False"}]}})
    assert out["spec"]["containers"] == [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "X"]
    jp = json_patch(pod, [{"op": "test", "path": "/spec/containers/0/name", "value": "a"},
                          {"op": "replace", "path": "/spec/containers/0/image", "value": "9"}])
    assert jp["spec"]["containers"][0]["image"] == "9"
    with pytest.raises(ValueError, match="test failed"):
        json_patch(pod, [{"op": "test", "path": "/spec/containers/0/name", "value": "zz"}])
