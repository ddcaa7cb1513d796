"""An object that opts in to a feature the node has switched off gets one Event saying why nothing
happens: once per object (every agent and every restart would create the same Event; the API server
keeps one), none for objects that do not opt in, none when the feature is on."""

from __future__ import annotations

from typing import Any

import pytest

from agent.daemon.optin import (
    DAEMONSETS,
    REASON,
    RECOMMENDER,
    STATEFULSETS,
    VPA_ACTUATOR,
    features_off,
    notice_name,
    notices,
)
from agent.vpa.target import TARGET_LABEL, target_value
from tests.daemon.harness import Env, wait_for
from tests.resize.manifests import ctr, manifest

VPA_API = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")
STS_API = ("apps", "v1", "statefulsets")
DS_API = ("apps", "v1", "daemonsets")


def _obj(name: str, uid: str, annotations: dict[str, str] | None = None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "uid": uid, "annotations": annotations or {}}, "spec": spec or {}}


OPTED_VPA = _obj("web", "v-1", {"kube-cgroup-agent.io/vpa-actuator": "node"})
PLAIN_VPA = _obj("api", "v-2")
NAMING_VPA = _obj("batch", "v-3", spec={"recommenders": [{"name": "kube-cgroup-agent"}]})
OPTED_STS = _obj("db", "s-1", {"kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible"})


@pytest.mark.parametrize(
    ("feature", "obj", "told"),
    [
        (VPA_ACTUATOR, OPTED_VPA, True),
        (VPA_ACTUATOR, PLAIN_VPA, False),
        (VPA_ACTUATOR, NAMING_VPA, False),
        (RECOMMENDER, NAMING_VPA, True),
        (RECOMMENDER, OPTED_VPA, False),
        (STATEFULSETS, OPTED_STS, True),
        (STATEFULSETS, _obj("db", "s-2"), False),
        (DAEMONSETS, _obj("logs", "d-1", {"kube-cgroup-agent.io/pod-update-policy": "Recreate"}), True),
        (VPA_ACTUATOR, {"metadata": {"name": "x", "annotations": {"kube-cgroup-agent.io/vpa-actuator": "node"}}}, False),
    ],
    ids=["vpa-opted", "vpa-plain", "vpa-names-recommender", "recommender-named", "recommender-not-named",
         "sts-opted", "sts-plain", "ds-opted", "no-namespace-or-uid"],
)
def test_which_objects_are_told(feature: Any, obj: dict[str, Any], told: bool) -> None:
    events = notices(feature, [obj], "node-a", "2026-11-25T00:00:00Z")
    assert len(events) == (1 if told else 0)
    if told:
        e = events[0]
        assert e["reason"] == REASON and e["type"] == "Warning"
        assert e["involvedObject"]["uid"] == obj["metadata"]["uid"] and e["metadata"]["namespace"] == "shop"
        assert f"{feature.key}.enabled is false" in e["message"] and "node-a" in e["message"]


def test_every_agent_names_the_event_alike_and_within_the_api_limit() -> None:
    a = notices(VPA_ACTUATOR, [OPTED_VPA], "node-a", "t")[0]["metadata"]["name"]
    b = notices(VPA_ACTUATOR, [OPTED_VPA], "node-b", "t")[0]["metadata"]["name"]
    assert a == b
    assert notice_name(VPA_ACTUATOR, "web", "other-uid") != a  # a recreated object is told again
    assert len(notice_name(STATEFULSETS, "x" * 300, "u")) <= 253


def test_only_what_is_off_is_listed() -> None:
    assert features_off(vpa=True, rollout=True, recommender=True) == ()
    assert features_off(vpa=False, rollout=True, recommender=True) == (VPA_ACTUATOR,)
    assert features_off(vpa=True, rollout=False, recommender=True) == (STATEFULSETS, DAEMONSETS)


RS_API = ("apps", "v1", "replicasets")


def _here(name: str, uid: str, annotations: dict[str, str] | None = None, spec: dict[str, Any] | None = None,
          target: str | None = None) -> dict[str, Any]:
    """An object in the node pods' namespace; a VPA labelled with its target as the cluster's keeper does."""
    obj = _obj(name, uid, annotations, spec)
    obj["metadata"]["namespace"] = "default"
    if target is not None:
        obj["spec"]["targetRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}
        obj["metadata"]["labels"] = {TARGET_LABEL: target_value("default", "Deployment", target)}
    return obj


def _owned(env: Env, pod: str, kind: str, owner: str) -> None:
    raw = manifest(pod, [ctr("app", lim={"cpu": "100m", "memory": "64Mi"})])
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": owner, "uid": f"o-{owner}", "controller": True}]
    env.node.add_pod(raw)
    env.publish(pod)


def _serve(env: Env) -> None:
    """web, batch and api run here (Deployments through their ReplicaSets) and db (a StatefulSet); the
    opted-in objects of elsewhere (VPA far, StatefulSet far-db) concern no pod of this node."""
    c = env.cluster
    c.serve(*VPA_API, kind="VerticalPodAutoscaler")
    c.serve(*STS_API, kind="StatefulSet")
    c.serve(*DS_API, kind="DaemonSet")
    c.serve(*RS_API, kind="ReplicaSet")
    for deployment in ("web", "batch", "api"):
        c.put(*RS_API, {"metadata": {"name": f"{deployment}-7c9", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment, "uid": f"d-{deployment}", "controller": True}]}})
        _owned(env, f"{deployment}-7c9-x", "ReplicaSet", f"{deployment}-7c9")
    _owned(env, "db-0", "StatefulSet", "db")
    c.put(*VPA_API, _here("web", "v-1", {"kube-cgroup-agent.io/vpa-actuator": "node"}, target="web"))
    c.put(*VPA_API, _here("api", "v-2", target="api"))
    c.put(*VPA_API, _here("batch", "v-3", spec={"recommenders": [{"name": "kube-cgroup-agent"}]}, target="batch"))
    c.put(*VPA_API, _here("far", "v-4", {"kube-cgroup-agent.io/vpa-actuator": "node"}, target="far"))
    c.put(*STS_API, _here("db", "s-1", {"kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible"}))
    c.put(*STS_API, _here("far-db", "s-9", {"kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible"}))


def _told(env: Env) -> dict[str, str]:
    return {e["involvedObject"]["name"]: e["message"] for e in env.cluster.events.values() if e.get("reason") == REASON}


def test_a_node_with_the_features_off_tells_each_opted_in_object_once_across_restarts(env: Env) -> None:
    _serve(env)
    first = env.daemon()  # the code's defaults: vpa, rollout and the recommender off
    first.ready()
    wait_for(lambda: first.logged("component.started", component="opt-in-notices"), "the opt-in notices")
    told = wait_for(lambda: _told(env) if len(_told(env)) == 3 else None, "three opted-in objects told")
    assert set(told) == {"web", "batch", "db"}  # "api" does not opt in; "far" and "far-db" are not this node's
    # what the node read: the VPAs filtered by their target label, its StatefulSet by name; never a whole kind
    reads = [r.path for r in env.cluster.requests if r.method == "GET" and ("/verticalpodautoscalers" in r.path or "/statefulsets" in r.path)]
    assert reads and all("labelSelector=" in p or "/statefulsets/db" in p for p in reads), reads
    assert "vpa.enabled is false" in told["web"] and "rollout.enabled is false" in told["db"]
    assert "recommender.enabled is false" in told["batch"]
    first.terminate()

    again = env.daemon()
    again.ready()
    wait_for(lambda: env.cluster.count("POST", "/events") >= 6, "the restarted agent's round")
    assert len([e for e in env.cluster.events.values() if e.get("reason") == REASON]) == 3  # once per object


def test_a_node_with_the_features_on_tells_nothing(env: Env) -> None:
    _serve(env)
    d = env.daemon(vpa={"enabled": True}, rollout={"enabled": True, "allowWithoutAdmissionPolicy": True},
                   recommender={"enabled": True})
    d.ready()
    wait_for(lambda: d.logged("component.started", component="vpa"), "the VPA component")
    assert not d.logged("component.started", component="opt-in-notices")
    wait_for(lambda: env.cluster.count("GET", "/verticalpodautoscalers"), "the VPA watch")
    assert _told(env) == {}
