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

import json
import time
from typing import Any

import pytest

from tests.daemon.harness import Env, wait_for
from tests.daemon.rollout_env import pod_by_name, two_agents_sampled
from tests.support.fakeapi.node import NODE
from tests.support.rollout_fakes import (
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


@pytest.fixture
def config() -> dict[str, Any]:
    return {"rollout": {"enabled": True, "readyTimeout": "3s"}}


def test_only_a_sidecar_image_changed_each_pod_of_this_node_is_updated_in_place_in_order(env: Env, config: dict[str, Any]) -> None:
    update = sts_template(proxy="proxy:2")
    _cluster(env, update)
    apps_before = {n: pod_by_name(env, n)["status"]["containerStatuses"][0]["containerID"] for n in ("db-1", "db-2")}
    with FakeKubelet(env.cluster, update, "db-2") as kubelet:
        daemon = env.daemon(**config)
        daemon.ready()
        wait_for(lambda: all(pod_by_name(env, n)["metadata"]["labels"]["controller-revision-hash"] == "db-2" for n in ("db-1", "db-2")),
                 "both of this node's pods at the update revision")
        wait_for(lambda: len(daemon.logged("rollout.done")) == 2, "both updates finished")
    assert _patched(env) == ["db-2", "db-1"]  # the highest ordinal first
    for name in ("db-1", "db-2"):
        pod = pod_by_name(env, name)
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
    assert pod_by_name(env, "db-0")["metadata"]["labels"]["controller-revision-hash"] == "db-1"  # another node's
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
    uid_before = pod_by_name(env, "db-2")["metadata"]["uid"]
    with FakeKubelet(env.cluster, update, "db-2"):
        daemon = env.daemon(**config)
        daemon.ready()
        wait_for(lambda: len(daemon.logged("rollout.done")) == 2, "both pods recreated")
    deletes = [r.path.split("/")[-1] for r in env.cluster.recorded("DELETE", "/pods/db-")]
    assert deletes == ["db-2", "db-1"]
    assert pod_by_name(env, "db-2")["metadata"]["uid"] != uid_before
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
        pod = pod_by_name(env, name)
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        with env.cluster.lock:
            env.cluster.pods[pod["metadata"]["uid"]] = pod
            env.cluster._emit("MODIFIED", pod)
    env.cluster.put(*STS_API, sts_object("db-1"))  # nothing to roll out
    daemon = env.daemon(**config)
    daemon.ready()
    for name in ("db-1", "db-2"):
        uid = pod_by_name(env, name)["metadata"]["uid"]
        got = wait_for(lambda u=uid: env.cluster.condition(u, GATE), f"the condition on {name}")
        assert got["status"] == "True" and got["reason"] == "NotUpdating"
    assert env.cluster.condition(pod_by_name(env, "db-0")["metadata"]["uid"], GATE) is None  # another node's
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
        assert pod_by_name(env, "db-0")["metadata"]["labels"]["controller-revision-hash"] == "db-1"  # below the partition
        assert sorted(kubelet.restarts) == [("db-1", "proxy"), ("db-2", "proxy"), ("db-3", "proxy")]
        # the template reverts: the updated pods go back in place, in the same order
        kubelet.update, kubelet.template = "db-1", sts_template()
        c.put(*STS_API, {**sts, "status": {"currentRevision": "db-1", "updateRevision": "db-1"}})
        wait_for(lambda: all(pod_by_name(env, n)["spec"]["containers"][1]["image"] == "proxy:1" for n in ("db-1", "db-2", "db-3"))
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
    assert pod_by_name(env, "db-1")["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "200m"
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
        uid = pod_by_name(env, "db-2")["metadata"]["uid"]
        wait_for(lambda: (env.cluster.condition(uid, GATE) or {}).get("status") == "True", "db-2's gate opened")
        wait_for(lambda: len(daemon.logged("rollout.done")) == 1, "db-1 updated")
    assert env.cluster.condition(uid, GATE)["reason"] == "UpdatedInPlace"  # type: ignore[index]
    assert _patched(env) == ["db-1"]  # db-2 was not patched again
    assert daemon.terminate() == 0
