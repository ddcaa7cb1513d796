"""The harness's cluster (bench/scale/objects.py, scenario.py): the counts of each scale factor, every
factor a superset of the smaller ones, nothing elsewhere on an agent's node, and an agent node's 110 pods
as a kubelet reports them."""

from __future__ import annotations

import collections
from typing import Any

from bench.scale import objects, scenario

BASE = scenario.Base()


def _keys(e: scenario.Elsewhere) -> set[tuple[str, str, str]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in [*e.namespaces, *e.objects, *e.pods]}


def test_factor_16_is_the_issues_cluster() -> None:
    e = scenario.elsewhere(BASE, 16, scenario.elsewhere_nodes(BASE, 16))
    counts = collections.Counter(o["kind"] for o in e.objects)
    assert counts["ReplicaSet"] == 4000
    assert counts["VerticalPodAutoscaler"] == 960
    assert (counts["StatefulSet"], counts["DaemonSet"], counts["LimitRange"]) == (320, 96, 320)
    assert len(e.namespaces) == 320
    opted = [o for o in e.objects if o["kind"] == "VerticalPodAutoscaler" and objects.VPA_OPT_IN in o["metadata"].get("annotations", {})]
    assert 0 < len(opted) < counts["VerticalPodAutoscaler"]  # some opted in, some not


def test_a_larger_factor_holds_every_object_of_a_smaller_one() -> None:
    nodes = scenario.elsewhere_nodes(BASE, 16)
    small, big = scenario.elsewhere(BASE, 1, nodes), scenario.elsewhere(BASE, 4, nodes)
    assert _keys(small) < _keys(big)
    assert scenario.elsewhere(BASE, 4, nodes) == big  # deterministic


def test_deployments_keep_a_replicaset_history_owned_by_them() -> None:
    e = scenario.elsewhere(BASE, 1, scenario.elsewhere_nodes(BASE, 1))
    per = collections.Counter(o["metadata"]["ownerReferences"][0]["name"] for o in e.objects if o["kind"] == "ReplicaSet")
    assert min(per.values()) >= 5
    assert sum(per.values()) == BASE.replicasets


def test_pods_elsewhere_are_on_nodes_without_an_agent() -> None:
    nodes = scenario.elsewhere_nodes(BASE, 4)
    e = scenario.elsewhere(BASE, 4, nodes)
    assert {p["spec"]["nodeName"] for p in e.pods} <= set(nodes)
    assert not any(n.startswith("sim-") for n in nodes)
    assert all(len([p for p in e.pods if p["spec"]["nodeName"] == n]) <= objects.PODS_PER_NODE for n in nodes)


def test_an_agent_node_has_110_pods_with_their_owner_chains_and_vpas() -> None:
    own = scenario.own("sim-007", 7)
    assert len(own.pods) == objects.PODS_PER_NODE
    assert {p["spec"]["nodeName"] for p in own.pods} == {"sim-007"}
    owners = collections.Counter((p["metadata"].get("ownerReferences") or [{"kind": "-"}])[0]["kind"] for p in own.pods)
    assert owners["ReplicaSet"] == objects.OWN_DEPLOYMENTS * objects.OWN_DEPLOYMENT_PODS
    assert owners["StatefulSet"] == objects.OWN_STS_PODS
    assert owners["DaemonSet"] == 2  # the shared DaemonSet's pod and the agent's own
    # two Deployments and the StatefulSet opted in and served by VPA's recommender (the latency probes'), the
    # other three Deployments' VPAs name the node recommender
    assert [name for name, _ in own.vpas] == ["svc-0", "svc-1", "store"]
    assert sum(1 for p in own.pods if p["metadata"]["namespace"] == objects.AGENT_NS) == 1


def test_a_pods_status_is_what_a_kubelet_reports() -> None:
    p = scenario.own("sim-000", 0).pods[0]
    p["metadata"]["uid"] = "u"
    st = objects.pod_status(p, "2026-01-01T00:00:00Z", "10.1.2.3")["status"]
    assert st["phase"] == "Running"
    assert st["qosClass"] == "Burstable"
    assert all(c["containerID"].startswith("containerd://") and c["allocatedResources"] for c in st["containerStatuses"])
    assert {c["type"] for c in st["conditions"]} >= {"Ready", "PodScheduled", "ContainersReady"}


def test_a_node_is_registered_as_kubelet_v136_with_its_hostname_label() -> None:
    n = objects.node("sim-001", True)
    assert n["metadata"]["labels"]["kubernetes.io/hostname"] == "sim-001"
    assert n["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.36")
    assert {c["type"]: c["status"] for c in n["status"]["conditions"]}["Ready"] == "True"
    assert objects.qos_class([{"resources": {}}]) == "BestEffort"
    assert objects.qos_class([{"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]) == "Guaranteed"


def test_an_own_vpas_first_recommendation_holds_the_request_and_a_probes_leaves_it() -> None:
    def bounds(rec: dict[str, object], c: str) -> tuple[int, int]:
        r = next(x for x in rec["status"]["recommendation"]["containerRecommendations"] if x["containerName"] == c)  # type: ignore[index]
        return int(r["lowerBound"]["cpu"][:-1]), int(r["upperBound"]["cpu"][:-1])

    request = int(objects.OWN_RESOURCES["requests"]["cpu"][:-1])
    low, high = bounds(objects.own_recommendation(("app", "proxy"), request), "app")
    assert low <= request <= high
    low, high = bounds(objects.own_recommendation(("app", "proxy"), 500), "app")
    assert not low <= request <= high
    assert bounds(objects.own_recommendation(("app", "proxy"), 500), "proxy") == (40, 65)  # the sidecar's 50m stays in
    low, high = bounds(objects.own_recommendation(("app",), 250), "app")
    assert not low <= 500 <= high  # the next probe moves it back


def _vpas(own: scenario.Own) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in own.objects if o["kind"] == "VerticalPodAutoscaler"}


def test_half_an_agent_nodes_vpas_name_the_node_recommender_and_upstreams_serves_the_others() -> None:
    own = scenario.own("sim-003", 3)
    vpas = _vpas(own)
    named = sorted(n for n, v in vpas.items() if not objects.upstream_recommends(v))
    assert named == ["svc-2", "svc-3", "svc-4"] and len(vpas) == 6
    assert all(vpas[n]["spec"]["recommenders"] == [{"name": "kube-cgroup-agent"}] for n in named)
    assert [n for n, _, _ in own.recommended] == named
    assert own.recommended_pods == 3 * objects.OWN_DEPLOYMENT_PODS == 54
    # one of those VPAs opts out of the actuator: the recommender serves VPAs whatever acts on them
    assert sum(1 for n in named if objects.VPA_OPT_IN in vpas[n]["metadata"].get("annotations", {})) == 2
    # the probes change recommendations the harness writes: never those of a VPA whose holder writes them
    assert not {n for n, _ in own.vpas} & set(named)
    # containers: app, and on some nodes a proxy sidecar (template i % 3 == 0)
    assert own.recommended_containers == sum(len(cs) * 18 for _, cs, _ in own.recommended)


def test_upstreams_recommender_skips_a_vpa_that_names_only_another() -> None:
    base = objects.vpa("a", "ns", "Deployment", "a", "own", True)
    assert objects.upstream_recommends(base)
    assert not objects.upstream_recommends(objects.vpa("a", "ns", "Deployment", "a", "own", True, "kube-cgroup-agent"))
    both = objects.vpa("a", "ns", "Deployment", "a", "own", True, "kube-cgroup-agent")
    both["spec"]["recommenders"].append({"name": "default"})
    assert objects.upstream_recommends(both)
    assert "recommenders" not in base["spec"]


def test_the_churns_recommender_leaves_vpas_naming_the_node_recommender() -> None:
    from bench.scale.churn import Cluster, Counts

    c = Cluster(None, None, Counts())  # type: ignore[arg-type]
    for name, rec in (("up", None), ("ours", "kube-cgroup-agent")):
        c.objects[("VerticalPodAutoscaler", "ns", name)] = objects.vpa(name, "ns", "Deployment", name, "elsewhere", True, rec)
    assert [o["metadata"]["name"] for o in c.upstream_vpas()] == ["up"]
    assert len(c.of("VerticalPodAutoscaler")) == 2
