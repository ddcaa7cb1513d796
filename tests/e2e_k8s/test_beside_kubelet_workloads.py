"""Workloads updated in place beside the real kubelet on the cgroup v1 node (tests/e2e_k8s/v1_node.py): a new
sidecar image of an OnDelete StatefulSet or DaemonSet that opts in is rolled out by the agent in place (the
app container and the pod UIDs kept, the controller counting the pods updated), anything beyond images
recreates the pods, and the admission policy refuses the agent's token any other change.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bench import provenance
from tests.e2e_k8s.nodes import IMAGE, KUBECTL, RK, kubectl, needs_cluster, wait_for
from tests.e2e_k8s.v1_node import PIN, Agent, beside_the_kubelet
from tests.e2e_k8s.watching import api_requests, new_revision, ready

pytestmark = needs_cluster


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    yield from beside_the_kubelet(tmp_path_factory)


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _downtime(pod: dict[str, Any], container: str) -> float:
    """Seconds between the container's previous run ending and its current one starting (1 s resolution)."""
    [cs] = [c for c in pod["status"]["containerStatuses"] if c["name"] == container]
    return _stamp(cs["state"]["running"]["startedAt"]) - _stamp(cs["lastState"]["terminated"]["finishedAt"])


def _sts_pods(app: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kubectl("get", "pods", "-l", f"app={app}", "-o", "json"))["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _runs(pod: dict[str, Any]) -> dict[str, tuple[str, int, str]]:
    return {c["name"]: (c.get("containerID", ""), c["restartCount"], c["image"]) for c in pod["status"].get("containerStatuses") or []}


def test_a_statefulset_sidecar_image_update_restarts_only_that_container(agent: Agent) -> None:
    """Seed 004 on the real cluster: an OnDelete StatefulSet that opts in; a new sidecar image is rolled out
    by the agent in place (web-1 then web-0), the app container never restarts, the pods keep their UIDs,
    the controller counts them updated; an env change then recreates them; the admission policy refuses
    the agent's token any other change."""
    second = IMAGE.rsplit(":", 1)[0] + ":2"
    sock = RK / "state" / "containerd" / "containerd.sock"
    subprocess.run(["ctr", "-a", str(sock), "-n", "k8s.io", "images", "tag", "--force", IMAGE, second], check=True, capture_output=True)

    def container(name: str, image: str) -> dict[str, Any]:
        return {"name": name, "image": image, "imagePullPolicy": "Never", "command": ["sleep", "1000000"]}

    sts = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "default", "annotations": {
            "kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible", "kube-cgroup-agent.io/grace-period-seconds": "1"}},
        "spec": {"replicas": 2, "serviceName": "web", "selector": {"matchLabels": {"app": "web"}}, "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                     "nodeSelector": PIN, "terminationGracePeriodSeconds": 1, "readinessGates": [{"conditionType": "kube-cgroup-agent.io/InPlaceUpdateReady"}],
                     "containers": [container("app", IMAGE), container("side", IMAGE)]}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(sts))
    wait_for("both pods Ready (the agent opened the readiness gate)", lambda: len(pods := _sts_pods("web")) == 2 and all(ready(p) for p in pods), 120)
    before = {p["metadata"]["name"]: (p["metadata"]["uid"], _runs(p)) for p in _sts_pods("web")}

    time.sleep(5)  # quiet: the pods' start-up writes are done
    r0 = api_requests()
    t0 = time.monotonic()
    kubectl("patch", "statefulset", "web", "--type", "json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": second}]))
    update = wait_for("the update revision", lambda: new_revision("web", ()), 30)

    def updated() -> bool:  # (the two tags name one image: the status may report either name)
        pods = _sts_pods("web")
        return all(p["metadata"]["labels"].get("controller-revision-hash") == update and ready(p)
                   and p["spec"]["containers"][1]["image"] == second
                   and _runs(p)["side"][0] != before[p["metadata"]["name"]][1]["side"][0] for p in pods)

    wait_for("both pods updated in place and Ready", updated, 180)
    in_place_s = time.monotonic() - t0
    wait_for("the controller counting them updated", lambda: json.loads(kubectl("get", "sts", "web", "-o", "json"))["status"].get("updatedReplicas") == 2, 60)
    time.sleep(5)  # the writes that follow (status, endpoints) counted too
    in_place_requests = api_requests() - r0
    for p in _sts_pods("web"):
        uid, runs_before = before[p["metadata"]["name"]]
        assert p["metadata"]["uid"] == uid  # patched, not recreated
        assert _runs(p)["app"][:2] == runs_before["app"][:2]  # the app: same container, no restart
        assert _runs(p)["side"][0] != runs_before["side"][0]  # the sidecar: a new container with the new image
    patched = [e["pod"] for e in agent.lines() if e.get("event") == "rollout.patched" and e.get("workload") == "StatefulSet/default/web"]
    assert patched == ["web-1", "web-0"]  # the highest ordinal first
    down = [_downtime(p, "side") for p in _sts_pods("web")]  # the sidecar's stop -> start, as the kubelet reports it

    # the admission policy: the agent's token may not change anything else on a pod
    agent_kubeconfig = agent.kubeconfig()
    denied = subprocess.run([KUBECTL, "--kubeconfig", agent_kubeconfig, "label", "pod", "web-0", "app=other", "--overwrite"],
                            capture_output=True, text=True, timeout=60)
    assert denied.returncode != 0 and "kube-cgroup-agent may change only the labels" in denied.stderr, denied.stderr
    denied = subprocess.run([KUBECTL, "--kubeconfig", agent_kubeconfig, "patch", "pod", "web-0", "-p", '{"spec":{"activeDeadlineSeconds":5}}'],
                            capture_output=True, text=True, timeout=60)
    assert denied.returncode != 0 and "only container images" in denied.stderr, denied.stderr

    # anything beyond images: Recreate (deleted, recreated by the controller at the update revision)
    time.sleep(5)
    r1 = api_requests()
    t1 = time.monotonic()
    kubectl("patch", "statefulset", "web", "--type", "json", "-p", json.dumps(
        [{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [{"name": "MODE", "value": "fast"}]}]))
    update2 = wait_for("the next update revision", lambda: new_revision("web", (update,)), 30)
    wait_for("both pods recreated and Ready", lambda: all(p["metadata"]["labels"].get("controller-revision-hash") == update2 and ready(p)
                                                          for p in _sts_pods("web")) and len(_sts_pods("web")) == 2, 240)
    recreate_s = time.monotonic() - t1
    time.sleep(5)
    recreate_requests = api_requests() - r1
    assert all(p["metadata"]["uid"] != before[p["metadata"]["name"]][0] for p in _sts_pods("web"))
    print(f"\ne2e-k8s: StatefulSet of 2, sidecar image: all pods updated in place in {in_place_s:.1f} s ({in_place_requests:.0f} API requests); "
          f"env change, recreated in {recreate_s:.1f} s ({recreate_requests:.0f} API requests)")
    if out := os.environ.get("KCG_E2E_K8S_OUT"):
        provenance.record(Path(out), "statefulset", lambda data: data.update(
            sts_in_place_s=in_place_s, sts_recreate_s=recreate_s, sts_sidecar_down_s=down,
            sts_in_place_api_requests=in_place_requests, sts_recreate_api_requests=recreate_requests))


def test_a_daemonset_sidecar_image_update_is_in_place_and_an_env_change_recreates(agent: Agent) -> None:
    """The same for a DaemonSet (its one pod on this node): a new sidecar image in place, the pod's UID and
    its app container kept, the controller counting it updated; an env change recreates the pod."""
    second = IMAGE.rsplit(":", 1)[0] + ":2"
    sock = RK / "state" / "containerd" / "containerd.sock"
    subprocess.run(["ctr", "-a", str(sock), "-n", "k8s.io", "images", "tag", "--force", IMAGE, second], check=True, capture_output=True)

    def container(name: str, image: str) -> dict[str, Any]:
        return {"name": name, "image": image, "imagePullPolicy": "Never", "command": ["sleep", "1000000"]}

    ds = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "logd", "namespace": "default", "annotations": {"kube-cgroup-agent.io/pod-update-policy": "InPlaceIfPossible"}},
        "spec": {"selector": {"matchLabels": {"app": "logd"}}, "updateStrategy": {"type": "OnDelete"},
                 "template": {"metadata": {"labels": {"app": "logd"}}, "spec": {
                     "nodeSelector": PIN, "terminationGracePeriodSeconds": 1, "readinessGates": [{"conditionType": "kube-cgroup-agent.io/InPlaceUpdateReady"}],
                     "containers": [container("app", IMAGE), container("side", IMAGE)]}}},
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(ds))
    wait_for("the DaemonSet's pod Ready", lambda: len(pods := _sts_pods("logd")) == 1 and ready(pods[0]), 120)
    [before] = _sts_pods("logd")
    kubectl("patch", "daemonset", "logd", "--type", "json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/template/spec/containers/1/image", "value": second}]))

    def status() -> dict[str, Any]:
        got: dict[str, Any] = json.loads(kubectl("get", "ds", "logd", "-o", "json"))
        return got

    wait_for("the controller counting it updated", lambda: (st := status()["status"]).get("updatedNumberScheduled") == 1
             and status()["metadata"]["generation"] == st.get("observedGeneration") and ready(_sts_pods("logd")[0])
             and _sts_pods("logd")[0]["spec"]["containers"][1]["image"] == second
             and _runs(_sts_pods("logd")[0])["side"][0] != _runs(before)["side"][0], 120)
    wait_for("the agent's update done", lambda: [e for e in agent.lines() if e.get("event") == "rollout.done" and e.get("workload") == "DaemonSet/default/logd"], 60)
    [after] = _sts_pods("logd")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert _runs(after)["app"][:2] == _runs(before)["app"][:2]
    assert _runs(after)["side"][0] != _runs(before)["side"][0]
    assert after["metadata"]["labels"]["pod-template-generation"] == str(status()["metadata"]["generation"])
    kubectl("patch", "daemonset", "logd", "--type", "json", "-p", json.dumps(
        [{"op": "add", "path": "/spec/template/spec/containers/0/env", "value": [{"name": "MODE", "value": "fast"}]}]))
    wait_for("the pod recreated and Ready", lambda: len(pods := _sts_pods("logd")) == 1 and pods[0]["metadata"]["uid"] != after["metadata"]["uid"]
             and ready(pods[0]) and any(c.get("env") for c in pods[0]["spec"]["containers"]), 120)
    kubectl("delete", "daemonset", "logd", "--wait=false")
