"""DaemonSet rollouts beside the real daemon process (fake API server, fake CRI): the cluster keeper's turns
(agent.daemon.rollout_keeper, run in this process) and the nodes' agents, which never watch a DaemonSet:

- one pod updated in place once the keeper gives it its turn, its revision labels and status moved;
- three pods on three nodes, one agent down: one turn at a time, never two pods unavailable, the dead
  node's turn taken back, the agents never listing the DaemonSet's pods.
"""

from __future__ import annotations

import contextlib
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
from tests.daemon.harness import Env, wait_for
from tests.daemon.rollout_env import pod_by_name, two_agents_sampled
from tests.support.fakeapi.node import NODE
from tests.support.rollout_fakes import (
    DS_API,
    REV_API,
    container_id,
    serve_rollout_kinds,
    sts_pod,
    sts_revision,
    sts_template,
)

KEEPER_AGENT = "kube-cgroup-agent-keeper-in-test"
DS_OWNER = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "db", "uid": "ds-uid", "controller": True}]


@pytest.fixture
def config() -> dict[str, Any]:
    return {"rollout": {"enabled": True, "readyTimeout": "3s"}}


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
        got = pod_by_name(env, "db-x7k2p")
        assert got["metadata"]["labels"]["controller-revision-hash"] == "bbb2"
        assert got["metadata"]["labels"]["pod-template-generation"] == "2"
        assert got["spec"]["containers"][1]["image"] == "proxy:2"
        wait_for(lambda: TURN not in (pod_by_name(env, "db-x7k2p")["metadata"].get("annotations") or {}), "the turn cleared when done")
    assert env.cluster.count("DELETE", "/pods/") == 0
    # the node read the DaemonSet by name, never listed or watched it, and never listed its pods
    assert c.count("GET", "/namespaces/default/daemonsets/db") >= 1
    # its status is on its own pod, not on the DaemonSet (one key a node would outgrow the DaemonSet's
    # annotations at a few thousand nodes, each write sent to every node watching it)
    status = wait_for(lambda: json.loads(pod_by_name(env, "db-x7k2p")["metadata"].get("annotations", {}).get(
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

        def turns() -> dict[str, float | None]:
            return {what: keeper.metrics.registry.get_sample_value("kube_cgroup_agent_rollout_turns_total", {"what": what})
                    for what in ("given", "cleared", "taken_back")}

        # db-c can be taken back (resting) a pass before the one that clears the last finished pod's turn
        expected = {"given": 3.0, "cleared": 3.0, "taken_back": 1.0}
        wait_for(lambda: turns() == expected, f"the keeper's turns counted as {expected}", timeout=10)
        assert turns() == expected, turns()
    assert worst[0] == 1
    at = {n: pod_by_name(env, n)["metadata"]["labels"]["controller-revision-hash"] for n in nodes}
    assert at == {"db-a": "bbb2", "db-b": "bbb2", "db-c": "aaa1"}
    agents = [r for r in c.requests if r.user_agent != KEEPER_AGENT]
    assert not [r for r in agents if "/namespaces/default/pods?" in r.path]  # no agent listed the DaemonSet's pods
    assert not [r for r in agents if "/daemonsets" in r.path and "/daemonsets/db" not in r.path]  # nor listed or watched it
    keeper_reads = [r.path for r in c.requests if r.user_agent == KEEPER_AGENT and "/namespaces/default/pods?" in r.path]
    assert any("watch=true" in p for p in keeper_reads)  # the keeper watched them, by the DaemonSet's selector
    assert all("labelSelector=app%3Ddb" in p for p in keeper_reads)
    assert c.count("DELETE", "/pods/") == 0
    assert one.terminate() == 0 and two.terminate() == 0
