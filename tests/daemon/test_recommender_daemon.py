"""The recommender beside the real daemon process (fake API, fake cgroup tree, fake CRI): with
`recommender.enabled`, the node's containers are sampled, the histories are saved at SIGTERM, and
`recommend` reads them back from the state directory; off, nothing is sampled."""

from __future__ import annotations

import json

import pytest

from agent.commands.main import main
from agent.recommender.publish import lease_seconds
from agent.vpa.target import TARGET_LABEL, target_value
from tests.daemon.harness import Env, wait_for
from tests.resize.manifests import ctr, manifest
from tests.support.fakeapi.node import NODE


def _pod(name: str) -> dict[str, object]:
    return manifest(name, [ctr("app", req={"cpu": "250m", "memory": "64Mi"}, lim={"cpu": "500m", "memory": "128Mi"})])


def test_the_daemon_samples_saves_and_recommend_reads_it(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.node.add_pod(_pod("web"))
    env.publish("web")
    pod_dir = env.node.pods["web"].pod_dir
    cid = env.node.pods["web"].containers["app"]
    env.node.tree.set(f"memory/{pod_dir}/{cid}/memory.usage_in_bytes", str(300 * 2**20))
    daemon = env.daemon(recommender={"enabled": True, "sampleInterval": "200ms"})
    daemon.ready()
    wait_for(lambda: daemon.logged("component.started", component="recommender"), "the recommender to start")
    wait_for(lambda: [t for t in daemon.logged("recommender.tick") if t["samples"] > 0], "a tick with samples")
    assert daemon.terminate() == 0
    state = env.tmp / "state" / "recommender.json"
    saved = json.loads(state.read_text())
    [entry] = [c for c in saved["containers"] if c["pod"] == "default/web"]
    assert entry["container"] == "app" and entry["memory_peak"] == 300 * 2**20
    assert main(["recommend", "--state-dir", str(env.tmp / "state"), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [rec] = next(p for p in out["pods"] if p["pod"] == "default/web")["containerRecommendations"]
    assert rec["containerName"] == "app" and int(rec["target"]["memory"]) > 300 * 2**20  # the peak's bucket end + 15 %


def test_off_by_default(env: Env) -> None:
    env.node.add_pod(_pod("web"))
    env.publish("web")
    daemon = env.daemon()
    daemon.ready()
    assert daemon.terminate() == 0
    # beside the pod loop only the LimitRange watch, which bounds the annotations by default, and the
    # read-only opt-in notices (the features are off in the code's defaults)
    assert [x["component"] for x in daemon.logged("component.started")] == ["limitranges", "opt-in-notices"]
    assert not (env.tmp / "state" / "recommender.json").exists()


def test_the_daemon_publishes_its_histories_and_at_shutdown_gives_up_its_leases(env: Env) -> None:
    """The node publishes the histories of the VPA's pods in its NodeHistory; the publishing node's Lease is
    deleted at SIGTERM (a pod deleted or rolled): a node that had not seen it takes it at once, the others
    when the Lease they saw would have expired."""
    c = env.cluster
    c.serve("autoscaling.k8s.io", "v1", "verticalpodautoscalers", kind="VerticalPodAutoscaler")
    c.serve("kube-cgroup-agent.io", "v1alpha1", "nodehistories", kind="NodeHistory", namespaced=False)
    c.serve("coordination.k8s.io", "v1", "leases", kind="Lease")
    c.put("autoscaling.k8s.io", "v1", "verticalpodautoscalers", {
        "metadata": {"name": "web", "namespace": "default", "uid": "v-1",
                     "labels": {TARGET_LABEL: target_value("default", "StatefulSet", "web")}},  # as the keeper labels it
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web"},
                 "recommenders": [{"name": "kube-cgroup-agent"}]}})
    pod = _pod("web-0")
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "s-1", "controller": True}]
    env.node.add_pod(pod)
    env.publish("web-0")
    daemon = env.daemon(recommender={"enabled": True, "sampleInterval": "200ms", "recommenderInterval": "1s"})
    daemon.ready()
    wait_for(lambda: daemon.logged("recommender.published", vpa="default/web"), "the VPA's status written")
    # this node's histories of the VPA's pod are in the API for the other nodes to merge
    mine = wait_for(lambda: c.get("kube-cgroup-agent.io", "v1alpha1", "nodehistories", "", NODE), "this node's NodeHistory")
    assert list(mine["spec"]["vpas"]) == ["default/web"]
    assert list(mine["spec"]["vpas"]["default/web"]["containers"]) == ["app"]
    lease = c.get("coordination.k8s.io", "v1", "leases", "default", "kcg-rec-web")
    assert lease is not None and lease["spec"]["leaseDurationSeconds"] == lease_seconds(1.0)  # six intervals and the margin
    assert daemon.terminate() == 0
    assert daemon.logged("recommender.released", leases=1)
    assert c.get("coordination.k8s.io", "v1", "leases", "default", "kcg-rec-web") is None
