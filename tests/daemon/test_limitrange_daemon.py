"""The LimitRange bound in the real daemon process (fake API server, fake cgroup tree, fake CRI): a resize
annotation within the namespace's LimitRange is applied; one beyond it is refused with a
LimitRangeExceeded Event and nothing of that pod changes, while the other pod goes on; a changed
LimitRange re-derives the annotated pods of its namespace; LimitRanges that cannot be listed refuse
annotation-driven changes until they can; on a bare node the manifest directory's LimitRanges apply."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from agent.daemon.limitranges import needed
from tests.daemon.harness import Env, api_pod, wait_for
from tests.resize.manifests import ctr, manifest

LR_API = ("", "v1", "limitranges")
RESIZE = "kube-cgroup-agent.io/resize"


def _limit_range(max_cpu: str) -> dict[str, Any]:
    return {"metadata": {"name": "limits", "namespace": "default"}, "spec": {"limits": [{"type": "Container", "max": {"cpu": max_cpu}}]}}


def _annotate(env: Env, name: str, cpu_limit: str) -> None:
    pod = env.publish(name)
    value = {"containers": {"app": {"limits": {"cpu": cpu_limit}}}}
    pod["metadata"]["annotations"] = {RESIZE: json.dumps(value)}
    env.cluster.apply(pod)


def _quota(env: Env, name: str) -> str:
    return env.node.read(env.node.container_path(name, "app", "cpu.cfs_quota_us"))


def _pods(env: Env, *names: str) -> None:
    for name in names:
        env.node.add_pod(manifest(name, [ctr("app", req={"cpu": "100m", "memory": "64Mi"}, lim={"cpu": "200m", "memory": "128Mi"})]))
        env.publish(name)


def _events(env: Env, name: str, reason: str) -> list[dict[str, Any]]:
    with env.cluster.lock:
        return [e for e in env.cluster.events.values() if e["involvedObject"]["uid"] == env.uid(name) and e["reason"] == reason]


def test_within_the_bound_applies_beyond_it_is_refused_and_the_other_pod_goes_on(env: Env) -> None:
    env.cluster.put(*LR_API, _limit_range("500m"))
    _pods(env, "a", "b")
    daemon = env.daemon()
    daemon.ready()
    assert _quota(env, "a") == _quota(env, "b") == "20000"

    _annotate(env, "a", "400m")  # within max 500m
    wait_for(lambda: _quota(env, "a") == "40000", "pod a's annotation applied")

    _annotate(env, "b", "1")  # beyond max 500m
    [event] = wait_for(lambda: _events(env, "b", "LimitRangeExceeded"), "the refusal's Event on pod b")
    assert event["type"] == "Warning"
    assert "LimitRange default/limits: cpu maximum per Container is 500m, but container app has limit 1" in event["message"]
    assert daemon.logged("pod.invalid", pod="default/b", reason="LimitRangeExceeded")

    _annotate(env, "a", "300m")  # the daemon goes on with the other pod
    wait_for(lambda: _quota(env, "a") == "30000", "pod a's second annotation applied")
    assert _quota(env, "b") == "20000", "nothing of the refused pod changed"

    env.cluster.put(*LR_API, _limit_range("2"))  # the namespace's bound rises: pod b is derived again
    wait_for(lambda: _quota(env, "b") == "100000", "pod b's annotation applied under the new LimitRange")
    assert _quota(env, "a") == "30000"

    env.cluster.put(*LR_API, _limit_range("500m"))  # and falls: b is refused again, reported again, kept as it is
    wait_for(lambda: _events(env, "b", "LimitRangeExceeded")[0].get("count") == 2, "the second refusal's Event")
    assert _quota(env, "b") == "100000", "a LimitRange does not act on what was already applied, as on admitted pods"
    assert daemon.terminate() == 0


def test_limitranges_that_cannot_be_listed_refuse_annotations_until_they_can(env: Env) -> None:
    env.cluster.fail("GET", "/api/v1/namespaces/default/limitranges?", 403, times=1)  # e.g. the RBAC rule not yet rolled out
    env.cluster.put(*LR_API, _limit_range("500m"))
    _pods(env, "a", "plain")
    pod = env.publish("a")
    pod["metadata"]["annotations"] = {RESIZE: json.dumps({"containers": {"app": {"limits": {"cpu": "400m"}}}})}
    env.cluster.apply(pod)
    daemon = env.daemon()
    daemon.ready()  # the pod without annotations is not held back
    assert daemon.logged("limitranges.unavailable")
    wait_for(lambda: _quota(env, "a") == "40000", "pod a's annotation applied once the LimitRanges are listed")
    refused = [e for e in daemon.logged("pod.invalid", pod="default/a") if "cannot be checked" in e["error"]]
    assert refused and "403" in refused[0]["error"]
    assert _quota(env, "plain") == "20000"
    assert daemon.terminate() == 0


def test_a_bare_node_takes_the_limitranges_from_its_manifest_directory(env: Env) -> None:
    _pods(env, "solo")
    pods = env.tmp / "manifests"
    pods.mkdir()
    raw = api_pod(env.node, "solo")
    raw["metadata"]["annotations"] = {RESIZE: json.dumps({"containers": {"app": {"limits": {"cpu": "1"}}}})}
    (pods / "solo.yaml").write_text(yaml.safe_dump(raw))
    limits = pods / "limits.yaml"
    limits.write_text(yaml.safe_dump({"kind": "LimitRange", **_limit_range("500m")}))
    daemon = env.daemon(pods=str(pods), kubeconfig=None, nodeName=None, podsPollInterval="50ms")
    daemon.ready()
    wait_for(lambda: daemon.logged("pod.invalid", pod="default/solo", reason="LimitRangeExceeded"), "the refusal")
    assert _quota(env, "solo") == "20000"

    limits.write_text(yaml.safe_dump({"kind": "LimitRange", **_limit_range("2")}))
    wait_for(lambda: _quota(env, "solo") == "100000", "the annotation applied under the raised bound")
    assert daemon.terminate() == 0


def test_the_cli_reading_pods_from_the_api_reads_the_limitranges_there(tmp_path: Any) -> None:
    """`diff` without --pods: the node's pods and every LimitRange from the API (read once, never watched);
    a LimitRange list that fails refuses the annotated pod as the daemon would."""
    import subprocess
    import sys

    from tests.daemon.harness import REPO
    from tests.support.fakeapi.cluster import FakeCluster
    from tests.support.fakeapi.node import NODE, node_object
    from tests.support.fakeapi.server import FakeAPIServer

    cluster = FakeCluster(node=node_object())
    pod = manifest("web", [ctr("app", req={"cpu": "100m"}, lim={"cpu": "200m"})])
    pod["spec"]["nodeName"] = NODE
    pod["metadata"]["annotations"] = {RESIZE: json.dumps({"containers": {"app": {"limits": {"cpu": "1"}}}})}
    cluster.apply(pod)
    cluster.put(*LR_API, _limit_range("500m"))
    api = FakeAPIServer(cluster)
    api.start()
    try:
        (tmp_path / "kubeconfig").write_text(api.kubeconfig())
        for controller in ("cpu", "memory"):
            (tmp_path / "fs" / controller).mkdir(parents=True)
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump({"cgroupfs": str(tmp_path / "fs"), "cgroupVersion": "1", "kubeconfig": str(tmp_path / "kubeconfig"),
                                       "nodeName": NODE, "hugepageSizes": []}))

        def diff() -> list[str]:
            r = subprocess.run([sys.executable, "-m", "agent", "diff", "--config", str(cfg), "-o", "json"],
                               capture_output=True, text=True, cwd=REPO, check=False)
            assert r.returncode == 2, r.stderr
            return [e["message"] for e in json.loads(r.stdout)["errors"]]

        assert diff() == ["refused: with its annotations the pod breaks its namespace's LimitRange: "
                          "LimitRange default/limits: cpu maximum per Container is 500m, but container app has limit 1"]
        cluster.fail("GET", "/api/v1/limitranges", 403)
        [message] = diff()
        assert "cannot be checked against namespace default's LimitRanges" in message and "403" in message
    finally:
        api.stop()


def _raw(ns: str, annotated: bool = False, pod_level: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": ns, **({"annotations": {RESIZE: "{}"}} if annotated else {})}
    return {"metadata": meta, "spec": {"containers": [], **({"resources": {"limits": {"cpu": "1"}}} if pod_level else {})}}


@pytest.mark.parametrize(("pods", "allowed", "vpa", "want"), [
    ([_raw("a", annotated=True), _raw("b")], None, False, {"a"}),  # annotations everywhere: annotated pods only
    ([_raw("a", annotated=True), _raw("b", annotated=True)], frozenset({"b"}), False, {"b"}),  # where honoured
    ([_raw("a", annotated=True)], frozenset(), False, set()),  # annotations nowhere (as shipped), VPA off
    ([_raw("a", pod_level=True)], frozenset(), False, set()),  # a pod-level pod, VPA off: nothing to cap
    ([_raw("a", pod_level=True)], frozenset(), True, {"a"}),  # VPA on: type Pod caps it wherever it runs
    ([_raw("a", pod_level=True), _raw("b", annotated=True), _raw("c")], frozenset({"x"}), True, {"a"}),
])
def test_the_namespaces_read_are_those_the_node_needs(pods: list[dict[str, Any]], allowed: frozenset[str] | None,
                                                       vpa: bool, want: set[str]) -> None:
    assert needed(pods, allowed, vpa) == want
