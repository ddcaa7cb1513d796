"""SIGKILL the agent at random points of multi-container resizes, restart it, and show it converges.

The engine runs in a subprocess (tests/resize/engine_runner.py) against the fake tree and the fake CRI
server of this process, in lockstep: before each of its writes or CRI calls it waits for a `go`, so the
tree is checked between every two steps and the kill (by PID) lands at an exact, seeded step. After
the kills, a last run without one must finish every resize: the kernel shows the latest desired values
(no resize lost), the checkpoint holds them, and no state seen on the way broke the invariant."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from agent.resize.allocation import allocation_of
from agent.resize.store import PodStore
from tests.resize.crash import run_agent
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest
from tests.resize.test_matrix import assert_kubelet_values

TARGETS = [
    {"c1": "500m/192Mi", "c2": "200m/64Mi", "c3": "400m/160Mi"},  # net increase, mixed
    {"c1": "400m/192Mi", "c2": "100m/64Mi", "c3": "200m/64Mi"},  # net decrease, mixed
    {"c1": "400m/64Mi", "c2": "200m/192Mi", "c3": "300m/128Mi"},  # no net change
    {"c1": "600m/256Mi", "c2": "600m/256Mi", "c3": "600m/256Mi"},  # all up
    {"c1": "100m/64Mi", "c2": "100m/64Mi", "c3": "100m/64Mi"},  # all down
]


def spec(text: str) -> dict[str, Any]:
    cpu, mem = text.split("/")
    return {"limits": {"cpu": cpu, "memory": mem}}


@pytest.mark.parametrize("seed", range(8))
def test_sigkill_at_random_points_then_converge(node: ResizeNode, tmp_path: Path, seed: int) -> None:
    kill_and_converge(node, tmp_path, seed)


@pytest.mark.parametrize("seed", range(2))
def test_sigkill_on_real_cgroup_v1_files(kernel_node: ResizeNode, tmp_path: Path, seed: int) -> None:
    """The same on this host's kernel, which itself refuses a child quota above its parent's."""
    kill_and_converge(kernel_node, tmp_path, seed)


def kill_and_converge(node: ResizeNode, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    node.add_pod(manifest("p", [ctr(n, lim={"cpu": "300m", "memory": "128Mi"}) for n in ("c1", "c2", "c3")]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()  # the node as the kubelet left it, checkpoint written
    kills = 0
    # every target differs from the start in all three containers (six or more steps), so the first
    # kill point is always reached; the second may fall after the end of its run
    for target, last in zip(rng.sample(TARGETS, 2), (5, 9), strict=True):
        node.resize("p", {n: spec(v) for n, v in target.items()})
        if run_agent(node, tmp_path, kill_at=rng.randint(0, last)) is None:
            kills += 1
    assert kills >= 1
    statuses = run_agent(node, tmp_path, kill_at=None)
    # a resize finished by an earlier run is not "in progress" after a restart: no status, or Done
    assert statuses is not None and all(s["state"] == "Done" for s in statuses)
    assert node.violations == []
    assert_kubelet_values(node, "p")  # the latest desired state: nothing lost
    saved = PodStore(node.settings.state_dir).load(persist=False).records
    assert saved and saved[0].allocated == allocation_of(node.view("p"))


def test_kill_right_after_admission_keeps_the_allocation(node: ResizeNode, tmp_path: Path) -> None:
    """Killed before its first write: the accepted allocation is on disk, and a restart actuates it."""
    node.add_pod(manifest("p", [ctr(n, lim={"cpu": "300m", "memory": "128Mi"}) for n in ("c1", "c2")]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    node.resize("p", {"c1": spec("500m/256Mi"), "c2": spec("100m/64Mi")})
    assert run_agent(node, tmp_path, kill_at=0) is None
    saved = PodStore(node.settings.state_dir).load(persist=False).records
    assert saved and saved[0].allocated == allocation_of(node.view("p"))
    assert saved[0].arrival is not None  # in flight when it died
    assert node.read(node.container_path("p", "c1", "memory.limit_in_bytes")) == str(128 << 20)
    statuses = run_agent(node, tmp_path, kill_at=None)
    assert statuses is not None and statuses[0]["state"] == "Done"
    assert_kubelet_values(node, "p")
    assert node.violations == []
