"""A resync is the reconciler's node-wide pass: the node read once, drift anywhere converged; between
resyncs a pod event's pass costs what changed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from agent.core.model import PodView
from agent.daemon.core import Daemon
from agent.daemon.engine_reconciler import EngineReconciler
from agent.infra.metrics import Metrics
from agent.infra.queue import TIERS
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import running_fake_cri


@pytest.fixture
def node(tmp_path: Path) -> Iterator[ResizeNode]:
    with running_fake_cri(tmp_path) as cri:
        n = ResizeNode(FakeCgroupTree(tmp_path / "tree", "v1"), cri, tmp_path / "state")
        for name in ("a", "b", "c"):
            n.add_pod(manifest(name, [ctr("app", lim={"cpu": "500m", "memory": "128Mi"})]))
        try:
            yield n
        finally:
            n.close()


def test_the_engine_resync_is_its_node_wide_pass(node: ResizeNode) -> None:
    rec = EngineReconciler(node.engine())
    views = node.views()  # the daemon's cache hands out the same objects until a pod changes
    rec.start(views)
    rec.reconcile_tiers(views, lambda: False)  # first pass: node-wide
    node.tree.set(node.pod_path("b", "cpu.cfs_quota_us"), "90000")
    rec.reconcile_tiers(views, lambda: False)  # an event's pass: not node-wide
    assert node.read(node.pod_path("b", "cpu.cfs_quota_us")) == "90000"
    assert rec.stale(views) == set()  # no pod items...
    rec.reconcile_tiers(views, lambda: False)  # ...the tiers item runs the node-wide pass
    assert node.read(node.pod_path("b", "cpu.cfs_quota_us")) == "50000"


class _Stub:
    def __init__(self, stale: set[str]) -> None:
        self._stale = stale
        self.asked: list[str] = []

    def stale(self, pods: Sequence[PodView]) -> set[str]:
        self.asked = sorted(p.uid for p in pods)
        return self._stale


def test_a_resync_queues_what_the_reconciler_names_and_the_tiers() -> None:
    stub = _Stub({"uid-b"})
    d = Daemon(cast(Any, stub), cast(Any, None), cast(Any, None), Metrics(), node=None, resync_period_s=60)
    for name in ("a", "b"):
        d._ingest(manifest(name, [ctr("app", lim={"cpu": "1", "memory": "1Gi"})]))
    while len(d.queue):
        d.queue.done(d.queue.get())
    d.resync()
    assert stub.asked == ["uid-a", "uid-b"]
    assert sorted(d.queue.pending()) == sorted(["uid-b", TIERS])
