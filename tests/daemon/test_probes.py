"""/healthz and /readyz from the process's first second: alive while the API server is slow or failing
(a liveness probe must never restart an agent that only waits), ready only after the first pass."""

from __future__ import annotations

from tests.daemon.harness import Env, wait_for
from tests.resize.manifests import ctr, manifest

NODE_PATH = "/api/v1/nodes/node-1"


def test_alive_and_not_ready_while_the_node_cannot_be_read(env: Env) -> None:
    env.node.add_pod(manifest("web", [ctr("app", req={"cpu": "250m", "memory": "64Mi"})]))
    env.publish("web")
    env.cluster.fail("GET", NODE_PATH, 500, times=1000)  # the API server refuses the node, for now
    daemon = env.daemon()
    wait_for(lambda: daemon.logged("node.unavailable"), "the daemon to fail reading its node")
    health, why = daemon.get("/healthz")
    assert health == 200, why
    ready, reason = daemon.get("/readyz")
    assert ready == 503 and "waiting for node node-1" in reason, reason
    status, metrics = daemon.get("/metrics")
    assert status == 200 and "kube_cgroup_agent_ready 0.0" in metrics

    with env.cluster.lock:
        env.cluster.faults.clear()  # the API server answers again
    daemon.ready()
    assert daemon.get("/healthz")[0] == 200
    wait_for(lambda: "kube_cgroup_agent_ready 1.0" in daemon.get("/metrics")[1], "the ready gauge to follow")


def test_alive_while_the_node_read_hangs(env: Env) -> None:
    env.cluster.slow("GET", NODE_PATH, seconds=4.0)
    daemon = env.daemon()
    # the endpoints answer while the one node read is still waiting for its answer
    assert daemon.get("/healthz")[0] == 200
    ready, reason = daemon.get("/readyz")
    assert ready == 503 and reason.startswith("starting: "), reason
    daemon.ready()
