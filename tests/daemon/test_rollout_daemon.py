"""Graceful in-place updates beside the real daemon process (fake API server, fake CRI), with a small fake
kubelet and StatefulSet controller in the test (they restart a container whose image changed, keep the
Ready condition as the kubelet computes it with readiness gates, and recreate a deleted pod at the
update revision):

- only a sidecar's image changed: each of this node's pods is updated in place, highest ordinal first,
  the new image pulled first, the readiness condition False then True, the revision labels moved; the app
  container never restarts; no pod is deleted; no slot Lease is left;
- a change beyond images: the pod is deleted (Recreate) and its successor awaited;
- a pod that never becomes Ready at the new revision halts the rollout;
- a slot held by another node's agent makes this node wait.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent.daemon.rollout_keeper import TurnKeeper
from agent.infra.apiserver import APIServer
from agent.infra.metrics import KeeperMetrics
from agent.kube.client import api_client
from agent.rollout.handout import TURN
from tests.daemon.harness import Daemon, Env, wait_for
from tests.support.fakeapi.node import NODE
from tests.support.rollout_fakes import (
    DS_API,
    GATE,
    LEASE_API,
    REV_API,
    STS_API,
    FakeKubelet,
    container_id,
    serve_rollout_kinds,
    sts_object,
    sts_pod,
    sts_revision,
    sts_template,
)

KEEPER_AGENT = "kube-cgroup-agent-keeper-in-test"
DS_OWNER = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "db", "uid": "ds-uid", "controller": True}]


def _cluster(env: Env, update_template: dict[str, Any], annotations: dict[str, str] | None = None) -> None:
    c = env.cluster
    serve_rollout_kinds(c)
    c.put(*REV_API, sts_revision("db-1", sts_template(), 1))
    c.put(*REV_API, sts_revision("db-2", update_template, 2))
    for i, node in ((0, "node-2"), (1, NODE), (2, NODE)):
        c.apply(sts_pod(i, node, "db-1", sts_template()))
    c.put(*STS_API, sts_object("db-2", annotations))


def _patched(env: Env) -> list[str]:
    """The pods patched in place, in the order of their first patch (a 409 retried is one)."""
    return list(dict.fromkeys(r.path.rsplit("/", 1)[1].split("?")[0] for r in env.cluster.recorded("PATCH", "/pods/db-") if "/status" not in r.path))


def _pod_by_name(env: Env, name: str) -> dict[str, Any]:
    pod = env.cluster.pod("default", name)
    assert pod is not None
    return pod


@pytest.fixture
def config() -> dict[str, Any]:
    return {"rollout": {"enabled": True, "readyTimeout": "3s"}}


def test_only_a_sidecar_image_changed_each_pod_of_this_node_is_updated_in_place_in_order(env: Env, config: dict[str, Any]) -> None:
    update = sts_template(proxy="proxy:2")
    _cluster(env, update)
    apps_before = {n: _pod_by_name(env, n)["status"]["containerStatuses"][0]["containerID"] for n in ("db-1", "db-2")}
    with FakeKubelet(env.cluster, update, "db-2") as kubelet:
        daemon = env.daemon(**config)
        daemon.ready()
        wait_for(lambda: all(_pod_by_name(env, n)["metadata"]["labels"]["controller-revision-hash"] == "db-2" for n in ("db-1", "db-2")),
                 "both of this node's pods at the update revision")
        wait_for(lambda: len(daemon.logged("rollout.done")) == 2, "both updates finished")
    assert _patched(env) == ["db-2", "db-1"]  # the highest ordinal first
    for name in ("db-1", "db-2"):
        pod = _pod_by_name(env, name)
        assert [c["image"] for c in pod["spec"]["containers"]] == ["app:1", "proxy:2"]
        assert pod["status"]["containerStatuses"][0]["containerID"] == apps_before[name]  # the app did not restart
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
        gate = env.cluster.condition(pod["metadata"]["uid"], GATE)
        assert gate is not None and gate["status"] == "True" and gate["reason"] == "UpdatedInPlace"
        state = json.loads(pod["metadata"]["annotations"]["kube-cgroup-agent.io/in-place-update-state"])
        assert state["revision"] == "db-2" and state["images"] == {"proxy": "proxy:2"}
    assert sorted(kubelet.restarts) == [("db-1", "proxy"), ("db-2", "proxy")]
    # the condition went False before each patch (Services drop the pod first)
    falses = [r for r in env.cluster.recorded("PATCH", "/status") if r.body["status"]["conditions"][0].get("status") == "False"]
    assert {r.path.split("/")[-2] for r in falses} == {"db-1", "db-2"}
    # pulled once through CRI, then present for the second pod
    assert [c.request["image"]["image"] for c in env.cri.service.calls_of("PullImage")] == ["proxy:2"]
    assert _pod_by_name(env, "db-0")["metadata"]["labels"]["controller-revision-hash"] == "db-1"  # another node's
    assert env.cluster.count("DELETE", "/pods/") == 0 and env.cluster.count("POST", "/eviction") == 0
    assert env.cluster.g_list("coordination.k8s.io/v1/leases", "default", "")["items"] == []  # slots released
    sts = env.cluster.get(*STS_API, "default", "db")
    assert sts is not None
    status = json.loads(sts["metadata"]["annotations"][f"kube-cgroup-agent.io/rollout-status.{NODE}"])
    wait_for(lambda: json.loads(env.cluster.get(*STS_API, "default", "db")["metadata"]["annotations"][f"kube-cgroup-agent.io/rollout-status.{NODE}"])["pods"]
             == {"db-1": "updated", "db-2": "updated"}, "the status annotation")
    assert status["revision"] == "db-2"
    wait_for(lambda: [e["reason"] for e in env.cluster.events.values()].count("UpdatedInPlace") >= 2, "the Events (sent in the background)")
    assert daemon.terminate() == 0


def test_a_change_beyond_images_recreates_the_pod(env: Env, config: dict[str, Any]) -> None:
    update = sts_template(proxy="proxy:2", env="fast")
    _cluster(env, update)
    uid_before = _pod_by_name(env, "db-2")["metadata"]["uid"]
    with FakeKubelet(env.cluster, update, "db-2"):
        daemon = env.daemon(**config)
        daemon.ready()
        wait_for(lambda: len(daemon.logged("rollout.done")) == 2, "both pods recreated")
    deletes = [r.path.split("/")[-1] for r in env.cluster.recorded("DELETE", "/pods/db-")]
    assert deletes == ["db-2", "db-1"]
    assert _pod_by_name(env, "db-2")["metadata"]["uid"] != uid_before
    assert _patched(env) == []  # nothing patched in place
    [start, _] = daemon.logged("rollout.start")
    assert start["how"] == "Recreate" and "env" in start["reason"]
    assert daemon.terminate() == 0


def test_a_pod_not_ready_at_the_new_revision_halts_the_rollout(env: Env, config: dict[str, Any]) -> None:
    update = sts_template(proxy="proxy:2")
    _cluster(env, update)
    with FakeKubelet(env.cluster, update, "db-2", start_new=False):  # the new proxy never becomes ready
        daemon = env.daemon(**config)
        daemon.ready()
        wait_for(lambda: [e for e in env.cluster.events.values() if e["reason"] == "RolloutHalted"], "the halt", timeout=30)
        time.sleep(2.0)  # further passes: db-1 must not start
    assert _patched(env) == ["db-2"]
    halted = [e for e in env.cluster.events.values() if e["reason"] == "RolloutHalted"]
    assert halted[0]["involvedObject"]["kind"] == "StatefulSet" and "db-2" in halted[0]["message"]
    assert daemon.terminate() == 0


def test_a_slot_held_by_another_node_makes_this_node_wait(env: Env, config: dict[str, Any]) -> None:
    update = sts_template(proxy="proxy:2")
    _cluster(env, update)
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    env.cluster.put(*LEASE_API, {"metadata": {"name": "kcg-rollout-statefulset-db-0", "namespace": "default"},
                                 "spec": {"holderIdentity": "node-2/db-0", "leaseDurationSeconds": 600, "renewTime": now}})
    with FakeKubelet(env.cluster, update, "db-2"):
        daemon = env.daemon(**config)
        daemon.ready()
        wait_for(lambda: "slot" in json.dumps(env.cluster.get(*STS_API, "default", "db")["metadata"].get("annotations", {})), "db-2 waiting for a slot")
        assert _patched(env) == []
        # waiting reads the workload's pods again when something changed or every ~RECHECK_S, not each
        # second: on a DaemonSet of N nodes that would be N lists of N pods a second
        lists = env.cluster.count("GET", "/namespaces/default/pods?")
        time.sleep(4.0)
        assert env.cluster.count("GET", "/namespaces/default/pods?") - lists <= 1
        env.cluster.remove(*LEASE_API, "default", "kcg-rollout-statefulset-db-0")  # the other node is done
        wait_for(lambda: len(daemon.logged("rollout.done")) == 2, "both updated once the slot is free")
    assert _patched(env) == ["db-2", "db-1"]
    assert daemon.terminate() == 0


def test_off_without_the_admission_policy_api(env: Env) -> None:
    env.daemon(rollout={"enabled": True}).ready()
    daemon = env.daemons[-1]
    wait_for(lambda: [e for e in daemon.logged("rollout.off") if "ValidatingAdmissionPolicy" in e["message"]], "the warning")
    assert daemon.terminate() == 0


def test_a_new_pod_with_the_readiness_gate_gets_the_condition_true(env: Env, config: dict[str, Any]) -> None:
    """A pod whose template lists the gate is never Ready until something sets the condition: the agent
    does, for this node's pods of opted-in workloads (from the pods it has: no API read)."""
    _cluster(env, sts_template())
    for name in ("db-0", "db-1", "db-2"):  # as created by the controller: no InPlaceUpdateReady condition yet
        pod = _pod_by_name(env, name)
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        with env.cluster.lock:
            env.cluster.pods[pod["metadata"]["uid"]] = pod
            env.cluster._emit("MODIFIED", pod)
    env.cluster.put(*STS_API, sts_object("db-1"))  # nothing to roll out
    daemon = env.daemon(**config)
    daemon.ready()
    for name in ("db-1", "db-2"):
        uid = _pod_by_name(env, name)["metadata"]["uid"]
        got = wait_for(lambda u=uid: env.cluster.condition(u, GATE), f"the condition on {name}")
        assert got["status"] == "True" and got["reason"] == "NotUpdating"
    assert env.cluster.condition(_pod_by_name(env, "db-0")["metadata"]["uid"], GATE) is None  # another node's
    assert env.cluster.count("GET", "/namespaces/default/pods") == 0  # no API read for it
    assert daemon.terminate() == 0


def test_rollout_status_shows_each_pod_and_why(env: Env, capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    from agent.commands.main import main

    update = sts_template(proxy="proxy:2")
    _cluster(env, update)
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(env.api.kubeconfig())
    with env.cluster.lock:  # db-2 updated in place, db-1 in the middle of its update, db-0 (node-2) not yet
        for pod in env.cluster.pods.values():
            name = pod["metadata"]["name"]
            if name == "db-2":
                pod["metadata"]["labels"]["controller-revision-hash"] = "db-2"
                pod["metadata"]["annotations"] = {"kube-cgroup-agent.io/in-place-update-state": json.dumps({"revision": "db-2"})}
            if name == "db-1":
                pod["status"]["conditions"][1] = {"type": GATE, "status": "False", "message": "updating to revision db-2",
                                                  "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    assert main(["rollout", "status", "statefulset/db", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    rows = {r["pod"]: (r["state"], r["reason"]) for r in out["rows"]}
    assert rows["db-2"] == ("updated in place", "")
    assert rows["db-1"] == ("updating", "updating to revision db-2")
    assert rows["db-0"] == ("waiting", "waiting: as many pods are unavailable as the rollout allows")  # db-1 holds the one slot
    assert out["updated"] == 1 and out["complete"] is False
    assert main(["rollout", "status", "sts/db", "--kubeconfig", str(kubeconfig)]) == 1
    table = capsys.readouterr().out
    assert table.startswith("StatefulSet/default/db: update revision db-2; 1/3 pods updated") and "updated in place" in table
    for target, expected in (("statefulset/nope", "not found"), ("deployment/db", "KIND/NAME"), ("statefulset", "KIND/NAME")):
        assert main(["rollout", "status", target, "--kubeconfig", str(kubeconfig)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0]


@contextlib.contextmanager
def turn_keeper(env: Env, start_s: float = 300.0) -> Iterator[TurnKeeper]:
    """The cluster keeper's DaemonSet turns (agent.daemon.rollout_keeper), in this process, on the fake API."""
    kubeconfig = env.tmp / "keeper-kubeconfig"
    kubeconfig.write_text(env.api.kubeconfig())
    client = api_client(str(kubeconfig), connections=8)
    client.user_agent = KEEPER_AGENT  # its requests apart from the agents'
    keeper = TurnKeeper(APIServer(client), KeeperMetrics(), ready_timeout_s=30, settle_s=0.05,
                        start_s=start_s)
    stop = threading.Event()
    keeper.start(stop)
    try:
        yield keeper
    finally:
        stop.set()
        keeper.join(5)


@contextlib.contextmanager
def two_agents_sampled(env: Env, config: dict[str, Any], tmp_path: Any) -> Iterator[tuple[Daemon, Daemon, list[int]]]:
    """The agents of node-1 and node-2 (ready), and the most pods unavailable at once in the cluster, sampled
    every 10 ms until the block ends."""
    env.cluster.other_nodes["node-2"] = {**copy.deepcopy(env.cluster.node), "metadata": {"name": "node-2", "resourceVersion": "1"}}
    worst = [0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.01):
            worst[0] = max(worst[0], _unavailable(env))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    second = tmp_path / "node-2.yaml"
    second.write_text(env.config(nodeName="node-2", stateDir=str(tmp_path / "state-2"), observeOnly=True, **config).read_text())
    one = env.daemon(**config)
    two = Daemon(second, tmp_path / "node-2.log").start()
    env.daemons.append(two)
    try:
        one.ready()
        two.ready()
        yield one, two, worst
    finally:
        sampling.set()
        sampler.join(5)


def _daemonset(c: Any, nodes: dict[str, str], generation: int = 2) -> dict[str, Any]:
    """A DaemonSet db whose update revision bbb2 changes only proxy's image, its pods at aaa1 on `nodes`."""
    serve_rollout_kinds(c)
    for number, (h, template) in enumerate((("aaa1", sts_template()), ("bbb2", sts_template(proxy="proxy:2"))), start=1):
        rev = sts_revision(f"db-{h}", template, number)
        rev["metadata"]["labels"]["controller-revision-hash"] = h
        rev["metadata"]["ownerReferences"] = DS_OWNER
        c.put(*REV_API, rev)
    for i, (name, node) in enumerate(sorted(nodes.items())):
        pod = sts_pod(i, node, "aaa1", sts_template())
        pod["metadata"]["name"] = name
        pod["metadata"]["ownerReferences"] = DS_OWNER
        pod["metadata"]["labels"]["pod-template-generation"] = "1"
        c.apply(pod)
    ds = {"metadata": {"name": "db", "namespace": "default", "uid": "ds-uid", "generation": generation,
                       "annotations": {"kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible"}},
          "spec": {"selector": {"matchLabels": {"app": "db"}}, "updateStrategy": {"type": "OnDelete"}, "template": sts_template(proxy="proxy:2")},
          "status": {"desiredNumberScheduled": len(nodes), "observedGeneration": 2, "updatedNumberScheduled": 0}}
    c.put(*DS_API, ds)
    return ds


def _ds_kubelet(c: Any) -> None:
    with c.lock:
        for p in c.pods.values():
            st = p["status"]["containerStatuses"][1]
            if p["spec"]["containers"][1]["image"] != st["image"]:
                st.update(image=p["spec"]["containers"][1]["image"], containerID=container_id("restarted"), ready=True)
                c._emit("MODIFIED", p)


def test_a_daemonset_pod_is_updated_in_place_when_the_keeper_gives_it_its_turn(env: Env, config: dict[str, Any]) -> None:
    """DaemonSet: no node watches it; the keeper writes the turn on the pod (the update revision's hash, the
    newest ControllerRevision by .revision), the node reads the DaemonSet once and patches
    controller-revision-hash and pod-template-generation with the image."""
    c = env.cluster
    _daemonset(c, {"db-x7k2p": NODE})
    daemon = env.daemon(**config)
    daemon.ready()
    time.sleep(1.5)
    assert not daemon.logged("rollout.start")  # no turn yet: nothing happens, nothing is read
    assert c.count("GET", "/daemonsets") == 0
    with turn_keeper(env):
        wait_for(lambda: (_ds_kubelet(c), daemon.logged("rollout.done"))[1], "the DaemonSet pod updated")
        got = _pod_by_name(env, "db-x7k2p")
        assert got["metadata"]["labels"]["controller-revision-hash"] == "bbb2"
        assert got["metadata"]["labels"]["pod-template-generation"] == "2"
        assert got["spec"]["containers"][1]["image"] == "proxy:2"
        wait_for(lambda: TURN not in (_pod_by_name(env, "db-x7k2p")["metadata"].get("annotations") or {}), "the turn cleared when done")
    assert env.cluster.count("DELETE", "/pods/") == 0
    # the node read the DaemonSet by name, never listed or watched it, and never listed its pods
    assert c.count("GET", "/namespaces/default/daemonsets/db") >= 1
    # its status is on its own pod, not on the DaemonSet (one key a node would outgrow the DaemonSet's
    # annotations at a few thousand nodes, each write sent to every node watching it)
    status = wait_for(lambda: json.loads(_pod_by_name(env, "db-x7k2p")["metadata"].get("annotations", {}).get(
        "kube-cgroup-agent.io/rollout-status", "null")), "the pod's status annotation")
    assert (status["node"], status["revision"]) == (NODE, "bbb2") and status["state"] in ("updating", "updated")
    assert not [k for k in (c.get(*DS_API, "default", "db") or {})["metadata"].get("annotations", {}) if "rollout-status" in k]
    assert daemon.terminate() == 0


def test_a_daemonset_over_three_nodes_goes_one_pod_at_a_time_by_the_keepers_turns(env: Env, config: dict[str, Any], tmp_path: Any) -> None:
    """Three pods on three nodes, two agents running (node-1, node-2) and node-3's agent down, max-unavailable
    1: the keeper hands out one turn at a time, never two pods unavailable (sampled every 10 ms); node-3's
    turn, never begun, is taken back after the keeper's start timeout and the others go on; the agents
    never list the DaemonSet's pods."""
    c = env.cluster
    nodes = {"db-a": NODE, "db-b": "node-2", "db-c": "node-3"}
    _daemonset(c, nodes)
    with two_agents_sampled(env, config, tmp_path) as (one, two, worst), turn_keeper(env, start_s=2.0) as keeper:
        wait_for(lambda: (_ds_kubelet(c), len(one.logged("rollout.done")) + len(two.logged("rollout.done")))[1] == 2,
                 "db-a and db-b updated", timeout=60)
        wait_for(lambda: keeper.resting, "db-c's turn taken back (its agent is down)")
        turns = {what: keeper.metrics.registry.get_sample_value("kube_cgroup_agent_rollout_turns_total", {"what": what})
                 for what in ("given", "cleared", "taken_back")}
        assert turns == {"given": 3.0, "cleared": 3.0, "taken_back": 1.0}, turns
    assert worst[0] == 1
    at = {n: _pod_by_name(env, n)["metadata"]["labels"]["controller-revision-hash"] for n in nodes}
    assert at == {"db-a": "bbb2", "db-b": "bbb2", "db-c": "aaa1"}
    agents = [r for r in c.requests if r.user_agent != KEEPER_AGENT]
    assert not [r for r in agents if "/namespaces/default/pods?" in r.path]  # no agent listed the DaemonSet's pods
    assert not [r for r in agents if "/daemonsets" in r.path and "/daemonsets/db" not in r.path]  # nor listed or watched it
    keeper_reads = [r.path for r in c.requests if r.user_agent == KEEPER_AGENT and "/namespaces/default/pods?" in r.path]
    assert any("watch=true" in p for p in keeper_reads)  # the keeper watched them, by the DaemonSet's selector
    assert all("labelSelector=app%3Ddb" in p for p in keeper_reads)
    assert c.count("DELETE", "/pods/") == 0
    assert one.terminate() == 0 and two.terminate() == 0


def _unavailable(env: Env) -> int:
    with env.cluster.lock:
        pods = list(env.cluster.pods.values())
        return sum(1 for p in pods if any(c["type"] == "Ready" and c["status"] != "True" for c in p["status"]["conditions"])
                   or any(c["type"] == GATE and c["status"] == "False" for c in p["status"]["conditions"]))


def test_two_nodes_keep_the_order_the_partition_and_the_budget_at_every_step(env: Env, config: dict[str, Any], tmp_path: Any) -> None:
    """Two agents (node-1, node-2), four pods alternating between them, partition 1, max-unavailable 1:
    db-3 (node-1), db-2 (node-2), db-1 (node-1) in that order, db-0 kept; never more than one pod
    unavailable, sampled every 10 ms; a 409 on db-3's patch retried; then the template reverts and db-1..3
    go back in place."""
    update = sts_template(proxy="proxy:2")
    nodes = {"db-0": "node-2", "db-1": NODE, "db-2": "node-2", "db-3": NODE}
    c = env.cluster
    serve_rollout_kinds(c)
    c.put(*REV_API, sts_revision("db-1", sts_template(), 1))
    c.put(*REV_API, sts_revision("db-2", update, 2))
    for name, node in nodes.items():
        c.apply(sts_pod(int(name[-1]), node, "db-1", sts_template()))
    sts = sts_object("db-2", {"kube-cgroup-agent.io/partition": "1"})
    sts["spec"]["replicas"] = 4
    c.put(*STS_API, sts)
    c.fail("PATCH", "/pods/db-3$", 409)  # the first image patch of db-3 meets a conflict
    with FakeKubelet(env.cluster, update, "db-2", nodes=nodes) as kubelet, two_agents_sampled(env, config, tmp_path) as (one, two, worst):
        wait_for(lambda: len(one.logged("rollout.done")) == 2 and len(two.logged("rollout.done")) == 1, "db-3, db-2, db-1 updated", timeout=60)
        assert _patched(env) == ["db-3", "db-2", "db-1"]
        assert _pod_by_name(env, "db-0")["metadata"]["labels"]["controller-revision-hash"] == "db-1"  # below the partition
        assert sorted(kubelet.restarts) == [("db-1", "proxy"), ("db-2", "proxy"), ("db-3", "proxy")]
        # the template reverts: the updated pods go back in place, in the same order
        kubelet.update, kubelet.template = "db-1", sts_template()
        c.put(*STS_API, {**sts, "status": {"currentRevision": "db-1", "updateRevision": "db-1"}})
        wait_for(lambda: all(_pod_by_name(env, n)["spec"]["containers"][1]["image"] == "proxy:1" for n in ("db-1", "db-2", "db-3"))
                 and len(one.logged("rollout.done")) == 4 and len(two.logged("rollout.done")) == 2, "the rollback", timeout=60)
    assert worst[0] == 1  # one pod at a time, never two, across both nodes
    conflicts = [r for r in c.recorded("PATCH", "/pods/db-3") if "/status" not in r.path]
    assert len(conflicts) >= 3  # the 409, its retry, and the rollback's patch
    assert c.count("DELETE", "/pods/") == 0
    assert one.terminate() == 0 and two.terminate() == 0


def test_a_crashed_agents_slot_expires(env: Env, config: dict[str, Any]) -> None:
    """A slot Lease whose holder stopped renewing it (renewTime older than its duration) is taken over."""
    update = sts_template(proxy="proxy:2")
    _cluster(env, update)
    stale = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() - 120))
    env.cluster.put(*LEASE_API, {"metadata": {"name": "kcg-rollout-statefulset-db-0", "namespace": "default"},
                                 "spec": {"holderIdentity": "node-2/db-0", "leaseDurationSeconds": 30, "renewTime": stale}})
    with FakeKubelet(env.cluster, update, "db-2"):
        daemon = env.daemon(**config)
        daemon.ready()
        wait_for(lambda: len(daemon.logged("rollout.done")) == 2, "both updated, the stale slot taken over")
    assert _patched(env) == ["db-2", "db-1"]
    assert daemon.terminate() == 0


def test_with_resources_in_place_a_resources_change_goes_through_pods_resize(env: Env) -> None:
    """rollout.resourcesInPlace: a template whose app container asks for more CPU (and nothing else)
    is applied through pods/resize, the pod kept; without it, the same change recreates (test above)."""
    update = sts_template()
    update["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "200m", "memory": "64Mi"}}
    _cluster(env, update)
    with FakeKubelet(env.cluster, update, "db-2"):
        daemon = env.daemon(rollout={"enabled": True, "readyTimeout": "3s", "resourcesInPlace": True})
        daemon.ready()
        wait_for(lambda: len(daemon.logged("rollout.done")) == 2, "both pods resized in place")
    resized = env.cluster.recorded("PATCH", "/resize")
    assert [r.path.split("/")[-2] for r in resized] == ["db-2", "db-1"]
    assert resized[0].body["spec"]["containers"] == [{"name": "app", "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}}}]
    assert env.cluster.count("DELETE", "/pods/") == 0
    assert _pod_by_name(env, "db-1")["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m"
    assert daemon.terminate() == 0


def test_an_update_interrupted_after_its_patch_is_finished_by_the_next_start(env: Env, config: dict[str, Any]) -> None:
    """The agent patched db-2 and stopped before setting the condition True: the pod is at the update
    revision with the condition False. The next start sees its patch landed and its containers ready, and
    opens the gate; db-1, still behind, is updated as usual."""
    update = sts_template(proxy="proxy:2")
    _cluster(env, update)
    with env.cluster.lock:
        pod = next(p for p in env.cluster.pods.values() if p["metadata"]["name"] == "db-2")
        pod["metadata"]["labels"]["controller-revision-hash"] = "db-2"
        pod["metadata"]["annotations"] = {"kube-cgroup-agent.io/in-place-update-state": json.dumps({"revision": "db-2"})}
        pod["spec"]["containers"][1]["image"] = "proxy:2"
        pod["status"]["containerStatuses"][1].update(image="proxy:2", containerID=container_id("db-2-proxy-new"))
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}, {"type": GATE, "status": "False", "lastTransitionTime": "2026-11-25T00:00:00Z"}]
        env.cluster._emit("MODIFIED", pod)
    with FakeKubelet(env.cluster, update, "db-2"):
        daemon = env.daemon(**config)
        daemon.ready()
        uid = _pod_by_name(env, "db-2")["metadata"]["uid"]
        wait_for(lambda: (env.cluster.condition(uid, GATE) or {}).get("status") == "True", "db-2's gate opened")
        wait_for(lambda: len(daemon.logged("rollout.done")) == 1, "db-1 updated")
    assert env.cluster.condition(uid, GATE)["reason"] == "UpdatedInPlace"  # type: ignore[index]
    assert _patched(env) == ["db-1"]  # db-2 was not patched again
    assert daemon.terminate() == 0
