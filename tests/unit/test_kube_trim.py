"""What the agent keeps of the API objects it holds between events (agent.kube.trim, ObjectCache)."""

from __future__ import annotations

from typing import Any

from agent.daemon.objects import ObjectCache
from agent.kube.trim import owner_link, without_managed_fields
from agent.vpa.source import owners_from


def _replicaset(name: str) -> dict[str, Any]:
    return {
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {"app": "web"},
            "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "controller": True}],
        },
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "web:1"}]}}},
        "status": {"replicas": 3},
    }


def test_without_managed_fields_drops_only_them_and_copies_only_when_needed() -> None:
    rs = _replicaset("a")
    out = without_managed_fields(rs)
    assert "managedFields" not in out["metadata"]
    assert {k: v for k, v in out["metadata"].items()} == {k: v for k, v in rs["metadata"].items() if k != "managedFields"}
    assert out["spec"] is rs["spec"] and out["status"] is rs["status"]
    assert "managedFields" in rs["metadata"]  # the object received is not changed
    plain = {"metadata": {"name": "b"}, "spec": {}}
    assert without_managed_fields(plain) is plain
    assert without_managed_fields({"spec": {}}) == {"spec": {}}


def test_owner_link_keeps_what_owner_chains_read() -> None:
    rs = _replicaset("a")
    link = owner_link(rs)
    assert link == {"kind": "ReplicaSet", "metadata": {k: rs["metadata"][k] for k in ("namespace", "name", "uid", "ownerReferences")}}
    assert owners_from([link]) == owners_from([rs]) == {("ns", "ReplicaSet", "a"): ("Deployment", "web")}
    listed = {k: v for k, v in rs.items() if k != "kind"}  # a list's items carry no kind
    assert owners_from([owner_link(listed)]) == owners_from([listed])


def test_object_cache_keeps_the_projection() -> None:
    calls: list[int] = []
    cache = ObjectCache(lambda: calls.append(1))
    cache.snapshot([_replicaset("a")])
    cache.upsert(_replicaset("b"))
    assert all("managedFields" not in o["metadata"] for o in cache.values())
    assert [o["spec"]["replicas"] for o in cache.values()] == [3, 3]
    links = ObjectCache(lambda: calls.append(1), keep=owner_link)
    links.snapshot([_replicaset("a")])
    links.upsert(_replicaset("b"))
    assert [set(o) for o in links.values()] == [{"kind", "metadata"}] * 2
    links.removed("uid-a", "ns/a")
    assert [o["metadata"]["name"] for o in links.values()] == ["b"]
    assert len(calls) == 5


def test_a_workload_that_does_not_opt_in_is_kept_by_name_only() -> None:
    from agent.daemon.rollout import kept_workload
    from agent.rollout.workload import POLICY, parse_workload

    sts = {
        "metadata": {"name": "db", "namespace": "ns", "annotations": {"other": "x"}, "managedFields": [{"manager": "m"}]},
        "spec": {"updateStrategy": {"type": "OnDelete"}, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }
    kept = kept_workload(sts)
    assert kept == {"metadata": {"name": "db", "namespace": "ns"}}
    assert parse_workload("StatefulSet", kept) is None is parse_workload("StatefulSet", sts)
    sts["metadata"]["annotations"][POLICY] = "InPlaceIfPossible"
    kept = kept_workload(sts)
    assert "managedFields" not in kept["metadata"] and kept["spec"] is sts["spec"]
    assert parse_workload("StatefulSet", kept) == parse_workload("StatefulSet", sts)
