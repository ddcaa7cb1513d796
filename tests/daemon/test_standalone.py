"""Bare nodes: the daemon reads pods from a directory of manifests and follows edits."""

from __future__ import annotations

import yaml

from tests.daemon.harness import Env, api_pod, wait_for
from tests.resize.manifests import ctr, manifest


def test_editing_a_manifest_resizes_the_running_container(env: Env) -> None:
    env.node.add_pod(manifest("solo", [ctr("app", lim={"cpu": "500m", "memory": "128Mi"})]))
    pods = env.tmp / "manifests"
    pods.mkdir()
    path = pods / "solo.yaml"
    raw = api_pod(env.node, "solo")
    path.write_text(yaml.safe_dump(raw))
    (pods / "broken.yaml").write_text("kind: Pod\nmetadata: {name: broken}\nspec: {}\n")
    daemon = env.daemon(pods=str(pods), kubeconfig=None, nodeName=None, podsPollInterval="50ms")
    daemon.ready()
    pod_dir = env.node.pods["solo"].pod_dir
    wait_for(lambda: env.node.read(f"cpu/{pod_dir}/cpu.cfs_quota_us") == "50000", "the pod cgroup applied")

    raw["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1500m", "memory": "256Mi"}}
    path.write_text(yaml.safe_dump(raw))
    wait_for(lambda: env.node.container_state("solo", "app")[:2] == (1.5, 256 * 2**20), "the container resized")
    assert env.node.read(f"cpu/{pod_dir}/cpu.cfs_quota_us") == "150000"
    assert env.node.violations == []
    assert daemon.logged("pod.invalid"), "the broken manifest is reported and the others still load"
    wait_for(lambda: daemon.logged("pod.event", reason="ResizeDone"), "the report in the log (no API server)")
    assert env.cluster.requests == [], "standalone mode never talks to an API server"
    assert daemon.terminate() == 0
