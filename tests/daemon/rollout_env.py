"""What the rollout tests on the real daemon share: a pod as the fake API server holds it, the pods
unavailable in the cluster, and two nodes' agents with a sampler of the most pods unavailable at once."""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator
from typing import Any

from tests.daemon.harness import Daemon, Env
from tests.support.rollout_fakes import GATE


def pod_by_name(env: Env, name: str) -> dict[str, Any]:
    pod = env.cluster.pod("default", name)
    assert pod is not None
    return pod


def unavailable(env: Env) -> int:
    with env.cluster.lock:
        pods = list(env.cluster.pods.values())
        return sum(1 for p in pods if any(c["type"] == "Ready" and c["status"] != "True" for c in p["status"]["conditions"])
                   or any(c["type"] == GATE and c["status"] == "False" for c in p["status"]["conditions"]))



@contextlib.contextmanager
def two_agents_sampled(env: Env, config: dict[str, Any], tmp_path: Any) -> Iterator[tuple[Daemon, Daemon, list[int]]]:
    """The agents of node-1 and node-2 (ready), and the most pods unavailable at once in the cluster, sampled
    every 10 ms until the block ends."""
    env.cluster.other_nodes["node-2"] = {**copy.deepcopy(env.cluster.node), "metadata": {"name": "node-2", "resourceVersion": "1"}}
    worst = [0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(0.01):
            worst[0] = max(worst[0], unavailable(env))

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
