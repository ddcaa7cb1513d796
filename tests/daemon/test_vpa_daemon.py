"""VPA in place beside the real daemon process (fake API server, fake cgroup tree, fake CRI).

- bare node: a VPA that opts in and controls the pod through its ReplicaSet and Deployment; its
  recommendation is applied in place by the agent's own engine (limits proportional, no container
  stopped); the panic button (node label) holds back a later recommendation, releasing it applies it;
- kubelet-owned node (v1.36): the decision goes to the API as the VPA updater sends it, a pods/resize
  patch and the `vpaInPlaceUpdated` annotation;
- no VPA CRD: one warning, the rest of the agent runs;
- never evicts: no eviction and no pod delete is ever requested.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from agent.vpa.target import TARGET_LABEL, target_value
from tests.daemon.harness import Env, wait_for
from tests.resize.manifests import ctr, manifest
from tests.support.fakeapi.node import NODE, node_object

VPA_API = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")
RS_API = ("apps", "v1", "replicasets")
NODE_API = ("", "v1", "nodes")


def _pod(name: str = "web-6d4f-x") -> dict[str, Any]:
    raw = manifest(name, [ctr("app", req={"cpu": "100m", "memory": "100Mi"}, lim={"cpu": "200m", "memory": "200Mi"})])
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4f", "uid": "rs-1", "controller": True}]
    return raw


def _vpa(cpu: str, lower: str, upper: str, opted_in: bool = True) -> dict[str, Any]:
    # labelled with its target as the cluster's keeper labels every VPA: the label the node watches by
    meta: dict[str, Any] = {"name": "web", "namespace": "default",
                            "labels": {TARGET_LABEL: target_value("default", "Deployment", "web")}}
    if opted_in:
        meta["annotations"] = {"kube-cgroup-agent.io/vpa-actuator": "node"}
    return {
        "metadata": meta,
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "updatePolicy": {"updateMode": "InPlace"}},
        "status": {"recommendation": {"containerRecommendations": [
            {"containerName": "app", "target": {"cpu": cpu, "memory": "100Mi"}, "lowerBound": {"cpu": lower, "memory": "50Mi"}, "upperBound": {"cpu": upper, "memory": "200Mi"}}
        ]}},
    }


def _cluster(env: Env, kubelet: str = "") -> None:
    c = env.cluster
    c.serve(*VPA_API, kind="VerticalPodAutoscaler")
    c.serve(*RS_API, kind="ReplicaSet")
    c.serve(*NODE_API, kind="Node", namespaced=False)
    c.node["status"]["nodeInfo"]["kubeletVersion"] = kubelet
    c.put(*NODE_API, {**node_object(), "metadata": {"name": NODE, "namespace": ""}})
    c.put(*RS_API, {"metadata": {"name": "web-6d4f", "namespace": "default", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-1", "controller": True}]}})


def _running(env: Env, kubelet: str = "") -> Any:
    """The cluster with the Deployment's ReplicaSet, its pod web-6d4f-x on this node, the daemon ready."""
    _cluster(env, kubelet)
    env.node.add_pod(_pod())
    env.publish("web-6d4f-x")
    daemon = env.daemon(vpa={"enabled": True})
    daemon.ready()
    return daemon


def _never_evicted(env: Env) -> None:
    assert env.cluster.count("POST", "/eviction") == 0
    assert env.cluster.count("DELETE", "/pods/") == 0


def test_a_recommendation_is_applied_in_place_and_the_panic_button_holds_the_next(env: Env) -> None:
    daemon = _running(env)
    quota = env.node.container_path("web-6d4f-x", "app", "cpu.cfs_quota_us")
    assert env.node.read(quota) == "20000"

    env.cluster.put(*VPA_API, _vpa("300m", "200m", "400m"))  # 100m is below the lower bound: act now
    wait_for(lambda: env.node.read(quota) == "60000", "the recommendation in place (300m, limit 600m)")
    assert env.node.read(env.node.container_path("web-6d4f-x", "app", "cpu.shares")) == "307"

    t0 = time.monotonic()
    env.cluster.put(*NODE_API, {**node_object(), "metadata": {"name": NODE, "namespace": "", "labels": {"kube-cgroup-agent.io/vpa": "off"}}})
    wait_for(lambda: daemon.logged("vpa.panic_button", enabled=False), "the panic button")
    print(f"\npanic button: label written -> VPA changes off in the agent after {(time.monotonic() - t0) * 1000:.0f} ms")
    env.cluster.put(*VPA_API, _vpa("500m", "450m", "600m"))
    wait_for(lambda: [d for d in daemon.logged("vpa.decision") if "panic" in d["reason"]], "the decision held back")
    assert env.node.read(quota) == "60000"  # held back; nothing applied was touched

    env.cluster.put(*NODE_API, {**node_object(), "metadata": {"name": NODE, "namespace": "", "labels": {}}})
    wait_for(lambda: env.node.read(quota) == "100000", "the held-back recommendation once released (500m, limit 1)")
    assert env.cri.service.calls_of("StopContainer") == []  # in place, no restart
    _never_evicted(env)
    assert daemon.terminate() == 0


def test_on_a_kubelet_owned_node_the_decision_goes_through_pods_resize(env: Env) -> None:
    daemon = _running(env, kubelet="v1.36.0")
    env.cluster.put(*VPA_API, _vpa("300m", "200m", "400m"))
    sent = wait_for(lambda: env.cluster.recorded("PATCH", "/pods/web-6d4f-x/resize"), "the pods/resize patch")
    [app] = sent[0].body["spec"]["containers"]
    assert app == {"name": "app", "resources": {"requests": {"cpu": "300m", "memory": str(100 << 20)}, "limits": {"cpu": "600m", "memory": str(200 << 20)}}}
    annotated = wait_for(lambda: (env.cluster.pod("default", "web-6d4f-x") or {}).get("metadata", {}).get("annotations", {}).get("vpaInPlaceUpdated"), "the annotation")
    assert annotated == "true"
    spec = env.cluster.pod("default", "web-6d4f-x")["spec"]["containers"][0]["resources"]  # type: ignore[index]
    assert spec["limits"]["cpu"] == "600m"
    assert env.cri.service.calls_of("UpdateContainerResources") == []  # the kubelet's to actuate
    _never_evicted(env)
    assert daemon.terminate() == 0


def test_without_the_vpa_crd_the_feature_is_off_with_one_warning(env: Env) -> None:
    env.node.add_pod(_pod())
    env.publish("web-6d4f-x")
    daemon = env.daemon(vpa={"enabled": True})
    daemon.ready()
    wait_for(lambda: daemon.logged("vpa.crd_missing"), "the warning")
    assert len(daemon.logged("vpa.crd_missing")) == 1
    assert daemon.terminate() == 0


def test_a_vpa_that_does_not_opt_in_changes_nothing(env: Env) -> None:
    daemon = _running(env)
    env.cluster.put(*VPA_API, _vpa("300m", "200m", "400m", opted_in=False))
    wait_for(lambda: [d for d in daemon.logged("vpa.decision") if "opt in" in d["reason"]], "the decision")
    assert env.node.read(env.node.container_path("web-6d4f-x", "app", "cpu.cfs_quota_us")) == "20000"
    assert daemon.terminate() == 0


def _vpa_memory(memory: str, lower: str, upper: str) -> dict[str, Any]:
    v = _vpa("100m", "50m", "200m")
    v["status"]["recommendation"]["containerRecommendations"][0].update(
        {"target": {"cpu": "100m", "memory": memory}, "lowerBound": {"cpu": "50m", "memory": lower}, "upperBound": {"cpu": "200m", "memory": upper}}
    )
    return v


def test_a_memory_decrease_stops_at_the_working_set_and_finishes_when_usage_allows(env: Env) -> None:
    """The container holds 150Mi; the recommendation would take its limit from 200Mi to 100Mi. The limit
    goes to ceil(150Mi × 1.1) and no lower; once the working set falls, the rest follows."""
    _cluster(env)
    env.node.add_pod(_pod())
    env.publish("web-6d4f-x")
    limit = env.node.container_path("web-6d4f-x", "app", "memory.limit_in_bytes")
    env.node.set_usage("web-6d4f-x", "app", 150 << 20)
    daemon = env.daemon(vpa={"enabled": True})
    daemon.ready()
    env.cluster.put(*VPA_API, _vpa_memory("50Mi", "20Mi", "80Mi"))  # request 100Mi above the upper bound
    wait_for(lambda: env.node.read(limit) == str(173015040), "the limit held at the working set + 10 %")
    assert [d for d in daemon.logged("vpa.decision") if d["apply"]]
    env.node.set_usage("web-6d4f-x", "app", 10 << 20)
    wait_for(lambda: env.node.read(limit) == str(100 << 20), "the rest of the decrease once usage allows")
    _never_evicted(env)
    assert daemon.terminate() == 0


def _metric(daemon: Any, line: str) -> bool:
    return any(x.startswith(line) for x in daemon.get("/metrics")[1].splitlines())


def test_an_infeasible_vpa_resize_is_reported_and_sent_again_only_when_the_recommendation_lowers(env: Env) -> None:
    """Bare node, allocatable 8 CPUs: a 16-CPU recommendation can never fit. The engine keeps it Infeasible
    (the pod's values untouched), the pod gets a VPAResizeInfeasible Event naming the VPA, the metric
    counts it; 20 CPUs is held back, 500m is applied."""
    daemon = _running(env)
    uid = env.uid("web-6d4f-x")
    quota = env.node.container_path("web-6d4f-x", "app", "cpu.cfs_quota_us")
    env.cluster.put(*VPA_API, _vpa("16", "15", "17"))
    wait_for(lambda: "VPAResizeInfeasible" in env.cluster.event_reasons(uid), "the VPAResizeInfeasible Event")
    [event] = [e for e in env.cluster.events.values() if e["reason"] == "VPAResizeInfeasible"]
    assert event["type"] == "Warning" and "VPA default/web" in event["message"] and "Infeasible" in event["message"]
    assert env.node.read(quota) == "20000"
    wait_for(lambda: _metric(daemon, 'kube_cgroup_agent_vpa_resizes_total{outcome="infeasible"} 1.0'), "the metric")
    env.cluster.put(*VPA_API, _vpa("20", "19", "21"))
    wait_for(lambda: [d for d in daemon.logged("vpa.decision") if "lowers" in d["reason"]], "the higher one held back")
    assert env.node.read(quota) == "20000" and env.cluster.event_reasons(uid).count("VPAResizeInfeasible") == 1
    env.cluster.put(*VPA_API, _vpa("500m", "400m", "600m"))
    wait_for(lambda: env.node.read(quota) == "100000", "the lower recommendation applied (500m, limit 1)")
    _never_evicted(env)
    assert daemon.terminate() == 0


def test_where_the_kubelet_refuses_a_vpa_resize_it_is_reported_and_not_sent_again(env: Env) -> None:
    daemon = _running(env, kubelet="v1.36.0")
    uid = env.uid("web-6d4f-x")
    env.cluster.put(*VPA_API, _vpa("16", "15", "17"))
    wait_for(lambda: env.cluster.recorded("PATCH", "/pods/web-6d4f-x/resize"), "the pods/resize patch")
    pod = env.cluster.pod("default", "web-6d4f-x")
    assert pod is not None
    pod["status"]["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible",
                                    "message": "Node didn't have enough capacity: cpu, requested: 16100, capacity: 8000"}]
    env.cluster.apply(pod)  # what the kubelet writes
    wait_for(lambda: "VPAResizeInfeasible" in env.cluster.event_reasons(uid), "the VPAResizeInfeasible Event")
    env.cluster.put(*VPA_API, _vpa("18", "17", "19"))
    wait_for(lambda: [d for d in daemon.logged("vpa.decision") if "lowers" in d["reason"]], "the higher one held back")
    assert len(env.cluster.recorded("PATCH", "/pods/web-6d4f-x/resize")) == 1
    env.cluster.put(*VPA_API, _vpa("4", "3", "5"))  # lower: sent
    wait_for(lambda: len(env.cluster.recorded("PATCH", "/pods/web-6d4f-x/resize")) == 2, "the lower one sent")
    _never_evicted(env)
    assert daemon.terminate() == 0


def test_an_applied_target_survives_a_restart(env: Env) -> None:
    """Bare node: 300m applied; the VPA then moves inside the pod's bounds (the updater would not act on the
    spec's 100m). Without the state file the restarted agent would resize the pod back to its spec."""
    daemon = _running(env)
    quota = env.node.container_path("web-6d4f-x", "app", "cpu.cfs_quota_us")
    env.cluster.put(*VPA_API, _vpa("300m", "200m", "400m"))
    wait_for(lambda: env.node.read(quota) == "60000", "the recommendation in place")
    daemon.kill()
    env.cluster.put(*VPA_API, _vpa("105m", "50m", "400m"))
    again = env.daemon(vpa={"enabled": True})
    again.ready()
    wait_for(lambda: again.logged("vpa.decision"), "a decision after the restart")
    wait_for(lambda: again.logged("reconcile", scope="pod"), "a pass over the pod")
    assert env.node.read(quota) == "60000"
    assert again.terminate() == 0


def test_a_resize_the_api_server_refuses_is_infeasible_and_not_sent_again(env: Env) -> None:
    """A v1.36 API server refuses a pods/resize beyond the node's allocatable at the request (403 "node
    didn't have enough allocatable resources"): the same report as the kubelet's Infeasible, and no
    retry loop — a higher recommendation is not sent, a lower one is."""
    daemon = _running(env, kubelet="v1.36.0")
    uid = env.uid("web-6d4f-x")
    env.cluster.fail("PATCH", "/pods/web-6d4f-x/resize", 403, times=1)
    env.cluster.put(*VPA_API, _vpa("16", "15", "17"))
    wait_for(lambda: "VPAResizeInfeasible" in env.cluster.event_reasons(uid), "the VPAResizeInfeasible Event")
    env.cluster.put(*VPA_API, _vpa("18", "17", "19"))
    wait_for(lambda: [d for d in daemon.logged("vpa.decision") if "lowers" in d["reason"]], "the higher one held back")
    time.sleep(1.5)
    assert len(env.cluster.recorded("PATCH", "/pods/web-6d4f-x/resize")) == 1
    assert not daemon.logged("vpa.resize_failed")
    env.cluster.put(*VPA_API, _vpa("4", "3", "5"))
    wait_for(lambda: len(env.cluster.recorded("PATCH", "/pods/web-6d4f-x/resize")) == 2, "the lower one sent")
    _never_evicted(env)
    assert daemon.terminate() == 0


def test_two_vpas_on_one_pod_leave_it_alone_with_an_event(env: Env) -> None:
    daemon = _running(env)
    uid = env.uid("web-6d4f-x")
    quota = env.node.container_path("web-6d4f-x", "app", "cpu.cfs_quota_us")
    env.cluster.put(*VPA_API, _vpa("300m", "200m", "400m"))
    wait_for(lambda: env.node.read(quota) == "60000", "the first VPA's target applied")
    other = _vpa("500m", "450m", "600m")
    other["metadata"]["name"] = "web-rs"
    other["spec"]["targetRef"] = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4f"}
    env.cluster.put(*VPA_API, other)
    wait_for(lambda: "VPAConflict" in env.cluster.event_reasons(uid), "the VPAConflict Event")
    [logged] = wait_for(lambda: daemon.logged("vpa.conflict"), "the log line")
    assert logged["vpas"] == ["default/web", "default/web-rs"]
    # what was applied before the second VPA came stays; nothing new is applied while both claim it
    env.cluster.put(*VPA_API, _vpa("700m", "650m", "800m"))
    time.sleep(1.0)
    assert env.node.read(quota) == "60000" and env.cluster.event_reasons(uid).count("VPAConflict") == 1
    assert daemon.terminate() == 0


# ---- pod-level resources (docs/vpa-pod-level.md) ----

MI = 1 << 20
SHARED = {"requests": {"cpu": "200m", "memory": "400Mi"}, "limits": {"cpu": "400m", "memory": "800Mi"}}


def _pod_level(app: dict[str, Any] | None = None) -> dict[str, Any]:
    """app and side sharing one pod-level budget; app with resources of its own when given."""
    raw = manifest("web-6d4f-x", [ctr("app", **(app or {})), ctr("side")], resources=SHARED)
    raw["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4f", "uid": "rs-1", "controller": True}]
    return raw


def _recs(*recs: tuple[str, str, str, str, str, str, str]) -> dict[str, Any]:
    """(container, cpu target, memory target, cpu lower, memory lower, cpu upper, memory upper) each."""
    v = _vpa("100m", "50m", "200m")
    v["status"]["recommendation"]["containerRecommendations"] = [
        {"containerName": n, "target": {"cpu": c, "memory": m}, "lowerBound": {"cpu": cl, "memory": ml}, "upperBound": {"cpu": cu, "memory": mu}}
        for n, c, m, cl, ml, cu, mu in recs
    ]
    return v


def test_on_a_kubelet_owned_node_a_pod_level_resize_sends_spec_resources_and_the_moved_containers(env: Env) -> None:
    """app sets its own resources, side none: summed, cpu 600m + 200m = 800m (the pod's 200m is below the
    lower bound 650m), memory 300Mi + 100Mi = 400Mi as it is. One pods/resize sets spec.resources (limits
    in the pod's ratio 2) and app's own values (its ratio 2); side is never given any."""
    _cluster(env, "v1.36.0")
    env.node.add_pod(_pod_level({"req": {"cpu": "100m", "memory": "100Mi"}, "lim": {"cpu": "200m", "memory": "200Mi"}}))
    env.publish("web-6d4f-x")
    daemon = env.daemon(vpa={"enabled": True})
    daemon.ready()
    env.cluster.put(*VPA_API, _recs(("app", "600m", "300Mi", "500m", "250Mi", "1", "400Mi"),
                                    ("side", "200m", "100Mi", "150m", "80Mi", "400m", "200Mi")))
    sent = wait_for(lambda: env.cluster.recorded("PATCH", "/pods/web-6d4f-x/resize"), "the pods/resize patch")
    assert sent[0].body == {"spec": {
        "resources": {"requests": {"cpu": "800m", "memory": str(400 * MI)}, "limits": {"cpu": "1600m", "memory": str(800 * MI)}},
        "containers": [{"name": "app", "resources": {"requests": {"cpu": "600m", "memory": str(300 * MI)},
                                                     "limits": {"cpu": "1200m", "memory": str(600 * MI)}}}],
    }}
    spec = wait_for(lambda: (env.cluster.pod("default", "web-6d4f-x") or {}).get("spec"), "the pod")
    assert spec["resources"]["limits"]["cpu"] == "1600m" and spec["containers"][1]["resources"] == {}
    assert env.cri.service.calls_of("UpdateContainerResources") == []  # the kubelet's to actuate
    _never_evicted(env)
    assert daemon.terminate() == 0


def test_a_pod_level_memory_decrease_stops_at_the_pod_cgroups_working_set(env: Env) -> None:
    """Bare node. Summed memory 150Mi + 50Mi = 200Mi: the pod's 400Mi is above the upper bound 300Mi, its
    limit would go 800Mi -> 400Mi. The pod cgroup holds 500Mi: the limit goes to ceil(500Mi × 1.1) = 550Mi
    and no lower (read by the usage loop from the pod cgroup); once it falls, the rest follows."""
    _cluster(env)
    env.node.add_pod(_pod_level())
    env.publish("web-6d4f-x")
    limit = env.node.pod_path("web-6d4f-x", "memory.limit_in_bytes")
    env.node.set_usage("web-6d4f-x", None, 500 * MI)
    daemon = env.daemon(vpa={"enabled": True})
    daemon.ready()
    env.cluster.put(*VPA_API, _recs(("app", "100m", "150Mi", "50m", "100Mi", "200m", "200Mi"),
                                    ("side", "100m", "50Mi", "50m", "20Mi", "200m", "100Mi")))
    wait_for(lambda: env.node.read(limit) == str(550 * MI), "the pod limit held at the working set + 10 %")
    assert [d for d in daemon.logged("vpa.decision") if d["apply"] and any("pod: memory held" in h for h in d["held"])]
    env.node.set_usage("web-6d4f-x", None, 10 * MI)
    wait_for(lambda: env.node.read(limit) == str(400 * MI), "the rest of the decrease once usage allows")
    assert env.cri.service.calls_of("StopContainer") == []
    _never_evicted(env)
    assert daemon.terminate() == 0


@pytest.mark.parametrize("annotations", [{}, {"annotationNamespaces": []}, {"annotationNamespaces": ["other"]}],
                         ids=["annotations-everywhere", "annotations-nowhere-as-shipped", "annotations-elsewhere"])
def test_a_limitrange_of_type_pod_caps_the_pod_level_target(env: Env, annotations: dict[str, Any]) -> None:
    """Bare node. Summed cpu 600m + 200m = 800m, limit 1600m in the pod's ratio 2; the namespace's
    LimitRange type Pod has max cpu 1: the request whose proportional limit is 1 core, 500m, limit 1 —
    whichever namespaces honour the annotations (the shipped config: none)."""
    _cluster(env)
    env.cluster.put("", "v1", "limitranges", {"metadata": {"name": "pods", "namespace": "default"},
                                              "spec": {"limits": [{"type": "Pod", "max": {"cpu": "1"}}]}})
    env.node.add_pod(_pod_level())
    env.publish("web-6d4f-x")
    daemon = env.daemon(vpa={"enabled": True}, **annotations)
    daemon.ready()
    env.cluster.put(*VPA_API, _recs(("app", "600m", "300Mi", "500m", "250Mi", "1", "400Mi"),
                                    ("side", "200m", "100Mi", "150m", "80Mi", "400m", "200Mi")))
    quota = env.node.pod_path("web-6d4f-x", "cpu.cfs_quota_us")
    wait_for(lambda: env.node.read(quota) == "100000", "the pod-level CPU limit capped at the LimitRange's max")
    assert env.node.read(env.node.pod_path("web-6d4f-x", "cpu.shares")) == "512"  # 500m
    assert daemon.terminate() == 0


def test_the_containers_a_pod_level_resize_restarts_are_named_in_the_decision(env: Env) -> None:
    """app's resizePolicy restarts it for memory, and the pod-level memory limit it inherits moves (summed
    300Mi + 100Mi = 400Mi from 200Mi): the kubelet will restart it, the decision log line says so."""
    _cluster(env, "v1.36.0")
    raw = _pod_level()
    raw["spec"]["resources"] = {"requests": {"cpu": "200m", "memory": "200Mi"}, "limits": {"cpu": "400m", "memory": "400Mi"}}
    raw["spec"]["containers"][0]["resizePolicy"] = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    env.node.add_pod(raw)
    env.publish("web-6d4f-x")
    daemon = env.daemon(vpa={"enabled": True})
    daemon.ready()
    env.cluster.put(*VPA_API, _recs(("app", "600m", "300Mi", "500m", "250Mi", "1", "400Mi"),
                                    ("side", "200m", "100Mi", "150m", "80Mi", "400m", "200Mi")))
    decided = wait_for(lambda: [d for d in daemon.logged("vpa.decision") if d["apply"]], "the decision")
    assert decided[0]["restarts"] == ["app (memory)"]
    wait_for(lambda: env.cluster.recorded("PATCH", "/pods/web-6d4f-x/resize"), "the pods/resize patch")
    assert daemon.terminate() == 0
