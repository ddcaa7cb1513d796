"""Rollouts across both nodes, the agents as their DaemonSet (the realk8s overlay turns rollouts on).

A StatefulSet of 4 that opts in, two pods on each node, and a DaemonSet with a pod on each: a new sidecar
image goes in place, highest ordinal first across the nodes, a partition kept, the app containers never
restarted, no pod deleted, and never more than `max-unavailable: 1` pod unavailable cluster-wide — sampled
from a watch of the pods, its maximum printed. Anything beyond images falls back to Recreate in the same
order under the same budget. The DaemonSet's two pods are behind at once: the cluster's keeper hands
them their turns one at a time (no agent watches the DaemonSet), which the watch's maximum shows. The API requests the
whole cluster served per pod (apiserver_request_total, the background rate taken off) go to figure 8.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import provenance
from tests.e2e_k8s.nodes import IMAGE, NODES, NodeAgent, kubectl, needs_cluster, wait_for
from tests.e2e_k8s.watching import (
    GATE,
    PodWatch,
    api_requests,
    daemonset_unavailable,
    new_revision,
    ready,
    statefulset_unavailable,
)

pytestmark = needs_cluster
NS = "rollout2"
STS, DS = "ring", "beacon"
REPLICAS = 4
SECOND = IMAGE.rsplit(":", 1)[0] + ":2"  # cluster.sh imports both tags on both nodes


@pytest.fixture(scope="module")
def namespace() -> Iterator[str]:
    for node in NODES:
        wait_for(f"the agent on {node} Ready", NodeAgent(node).ready, 300, 2)
    kubectl("create", "namespace", NS)
    try:
        yield NS
    finally:
        kubectl("delete", "namespace", NS, "--wait=false", ok=(0, 1))


def _container(name: str) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "1000000"],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}


def _template(app: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"app": app}}, "spec": {
        "terminationGracePeriodSeconds": 1, "readinessGates": [{"conditionType": GATE}],
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": app}}}],
        "containers": [_container("app"), _container("side")]}}


def _pods(app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kubectl("get", "pods", "-n", NS, "-l", f"app={app}", "-o", "json"))["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _sts_status() -> dict[str, Any]:
    got: dict[str, Any] = json.loads(kubectl("get", "sts", STS, "-n", NS, "-o", "json"))
    return got


def _at(revision: str) -> list[str]:
    """The StatefulSet's pods Ready at `revision`, not terminating."""
    return [p["metadata"]["name"] for p in _pods(STS) if p["metadata"]["labels"].get("controller-revision-hash") == revision
            and ready(p) and not p["metadata"].get("deletionTimestamp")]


def _patch_sts(ops: list[dict[str, Any]]) -> None:
    kubectl("patch", "statefulset", STS, "-n", NS, "--type", "json", "-p", json.dumps(ops))


def _background_rate(seconds: float = 15.0) -> float:
    """API requests per second the idle cluster serves (kubelets, controllers, the agents' resyncs)."""
    r0, t0 = api_requests(), time.monotonic()
    time.sleep(seconds)
    return (api_requests() - r0) / (time.monotonic() - t0)


def test_a_statefulset_on_both_nodes_rolls_out_in_order_within_the_cluster_wide_budget(namespace: str) -> None:
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": STS, "namespace": NS, "annotations": {
               "kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible", "kube-cgroup-agent.io/grace-period-seconds": "1",
               "kube-cgroup-agent.io/partition": "2"}},
           "spec": {"replicas": REPLICAS, "serviceName": STS, "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": STS}}, "updateStrategy": {"type": "OnDelete"}, "template": _template(STS)}}
    kubectl("apply", "-f", "-", stdin=json.dumps(sts))
    wait_for("4 pods Ready (the agents opened the readiness gate)",
             lambda: len(pods := _pods(STS)) == REPLICAS and all(ready(p) for p in pods), 300, 1)
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in _pods(STS)}
    assert sorted(placed.values()) == sorted(NODES * 2), placed  # two on each node
    uids = {p["metadata"]["uid"] for p in _pods(STS)}
    old = str(_sts_status()["status"]["currentRevision"])
    rate = _background_rate()

    # 1. a new sidecar image with the partition at 2: ordinals 3 then 2 in place; 1 and 0 keep their revision
    with PodWatch(NS, f"app={STS}", statefulset_unavailable(STS, REPLICAS)) as w:
        r0, t0 = api_requests(), time.monotonic()
        _patch_sts([{"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": SECOND}])
        new = wait_for("the update revision", lambda: new_revision(STS, (), NS), 30)
        wait_for("ordinals 3 and 2 updated in place and Ready", lambda: sorted(_at(new)) == [f"{STS}-2", f"{STS}-3"], 300, 1)
        time.sleep(15)  # the partition holds: nothing below it moves
        assert sorted(_at(old)) == [f"{STS}-0", f"{STS}-1"]
        kubectl("annotate", "statefulset", STS, "-n", NS, "kube-cgroup-agent.io/partition=0", "--overwrite")
        wait_for("every pod updated in place and Ready", lambda: len(_at(new)) == REPLICAS, 300, 1)
        in_place_s = time.monotonic() - t0
        time.sleep(5)
        in_place = api_requests() - r0 - rate * (time.monotonic() - t0)
    seen = w.seen
    in_place_max = seen.max_unavailable
    order = [(p, n) for r, p, n in seen.reached if r == new]
    print(f"\ne2e-k8s: StatefulSet of 4 on two nodes, sidecar image in place: order {order}, most unavailable at once "
          f"{seen.max_unavailable}, {seen.events} watch events, {in_place_s:.1f} s, {in_place / REPLICAS:.0f} API requests per pod")
    assert [p for p, _ in order] == [f"{STS}-{i}" for i in (3, 2, 1, 0)]  # highest ordinal first, across the nodes
    assert {n for _, n in order} == set(NODES)
    assert seen.max_unavailable == 1, seen.around_max()  # the update happened, one pod at a time cluster-wide
    assert not seen.deleted and {p["metadata"]["uid"] for p in _pods(STS)} == uids  # no pod deleted
    assert {c for _, c in seen.restarted} == {"side"}  # only the sidecar ran anew; the app containers never
    assert all(p["spec"]["containers"][1]["image"] == SECOND for p in _pods(STS))

    # 2. anything beyond images: Recreate, in the same order, under the same budget
    time.sleep(5)
    with PodWatch(NS, f"app={STS}", statefulset_unavailable(STS, REPLICAS)) as w:
        r1, t1 = api_requests(), time.monotonic()
        _patch_sts([{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [{"name": "MODE", "value": "fast"}]}])
        newer = wait_for("the next update revision", lambda: new_revision(STS, (new,), NS), 30)
        wait_for("every pod recreated at the revision and Ready", lambda: len(_at(newer)) == REPLICAS, 600, 1)
        recreate_s = time.monotonic() - t1
        time.sleep(5)
        recreate = api_requests() - r1 - rate * (time.monotonic() - t1)
    seen = w.seen
    recreated = [p for p in dict.fromkeys(seen.deleted)]
    print(f"e2e-k8s: the same StatefulSet, an env change, recreated: order {recreated}, most unavailable at once "
          f"{seen.max_unavailable}, {recreate_s:.1f} s, {recreate / REPLICAS:.0f} API requests per pod")
    assert recreated == [f"{STS}-{i}" for i in (3, 2, 1, 0)]
    assert seen.max_unavailable == 1, seen.around_max()
    assert not uids & {p["metadata"]["uid"] for p in _pods(STS)}
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        provenance.record(Path(out), "rollout_two_nodes", lambda data: data.update(
            sts4_in_place_s=in_place_s, sts4_recreate_s=recreate_s, background_requests_per_s=rate, sts4_order=order,
            sts4_in_place_api_requests_per_pod=in_place / REPLICAS, sts4_recreate_api_requests_per_pod=recreate / REPLICAS,
            sts4_max_unavailable=[in_place_max, seen.max_unavailable]))


def test_a_daemonset_on_both_nodes_goes_one_pod_at_a_time_by_the_keepers_turns(namespace: str) -> None:
    """The keeper hands each pod its turn (kube-cgroup-agent.io/rollout-turn); the agents never watch the
    DaemonSet. Two rounds: each pod updated in place, never both unavailable, no pod recreated, the turns
    cleared once done."""
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet",
          "metadata": {"name": DS, "namespace": NS, "annotations": {
              "kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible", "kube-cgroup-agent.io/grace-period-seconds": "2"}},
          "spec": {"selector": {"matchLabels": {"app": DS}}, "updateStrategy": {"type": "OnDelete"}, "template": _template(DS)}}
    kubectl("apply", "-f", "-", stdin=json.dumps(ds))
    wait_for("a Ready pod on each node", lambda: sorted(p["spec"]["nodeName"] for p in _pods(DS) if ready(p)) == sorted(NODES), 300, 1)
    uids = {p["metadata"]["uid"] for p in _pods(DS)}
    for round_, image in enumerate((SECOND, IMAGE)):  # two races: each agent may win one
        with PodWatch(NS, f"app={DS}", daemonset_unavailable(NODES)) as w:
            kubectl("patch", "daemonset", DS, "-n", NS, "--type", "json", "-p", json.dumps(
                [{"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": image}]))

            def done(image: str = image) -> bool:
                got: dict[str, Any] = json.loads(kubectl("get", "ds", DS, "-n", NS, "-o", "json"))
                pods = _pods(DS)
                return (got["status"].get("updatedNumberScheduled") == len(NODES) and len(pods) == len(NODES)
                        and all(ready(p) and p["spec"]["containers"][1]["image"] == image for p in pods))

            wait_for("both pods updated in place and Ready", done, 300, 1)
            wait_for("the turns cleared", lambda: not [p for p in _pods(DS) if "kube-cgroup-agent.io/rollout-turn" in
                                                       (p["metadata"].get("annotations") or {})], 60, 1)
        seen = w.seen
        order = [n for _, _, n in seen.reached[len(NODES):]]
        print(f"e2e-k8s: DaemonSet on two nodes (the keeper's turns), round {round_ + 1}: nodes in turn {order}, "
              f"most unavailable at once {seen.max_unavailable}")
        assert seen.max_unavailable == 1, seen.around_max()
        assert not seen.deleted and {p["metadata"]["uid"] for p in _pods(DS)} == uids
        assert {c for _, c in seen.restarted} == {"side"}
    leases = json.loads(kubectl("get", "leases", "-n", NS, "-o", "json"))["items"]
    slots = [x["metadata"]["name"] for x in leases if x["metadata"]["name"].startswith(f"kcg-rollout-daemonset-{DS}")]
    assert len(slots) <= 1, slots  # the budget of 1 is one Lease, whoever held it


def test_two_holders_racing_for_one_slot_lease_on_the_real_api_server_never_both_win(namespace: str) -> None:
    """The agents' slots are Leases taken with the API server's optimistic concurrency (agent.infra.lease).
    The DaemonSet race above is as tight as two agents' ticks make it, and the budget's own check often
    settles it first (one agent sees the other's pod taken out); here two holders race for one Lease at
    once, from a barrier, 30 times for a new Lease and 30 times to take over an expired one: exactly one
    wins each time (a Lease taken without winning it is two updates at once)."""
    import threading

    from kubernetes import client, config

    from agent.infra.lease import acquire_lease
    from tests.e2e_k8s.nodes import RK

    config.load_kube_config(str(RK / "kubeconfig"))
    apis = [client.ApiClient(), client.ApiClient()]
    lost_both, won_both = 0, 0
    for i in range(60):
        name = f"kcg-race-{i}"
        if i >= 30:  # an expired slot: its holder gone for a minute
            kubectl("apply", "-f", "-", stdin=json.dumps({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": NS},
                "spec": {"holderIdentity": "gone/pod", "leaseDurationSeconds": 30,
                         "renewTime": "2020-01-01T00:00:00.000000Z", "acquireTime": "2020-01-01T00:00:00.000000Z"}}))
        barrier = threading.Barrier(2)
        won: list[bool] = [False, False]

        def race(k: int, name: str = name, barrier: threading.Barrier = barrier, won: list[bool] = won) -> None:
            barrier.wait()
            won[k] = acquire_lease(apis[k], NS, name, f"node-{k}/pod", 30, time.time).held

        threads = [threading.Thread(target=race, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        won_both += all(won)
        lost_both += not any(won)
    print(f"e2e-k8s: 60 races for one Lease (30 new, 30 expired): both won {won_both}, neither won {lost_both}")
    assert won_both == 0
    assert lost_both == 0
