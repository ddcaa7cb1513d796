"""The checkpoint: round trip, checksum, corrupt or missing file rebuilt from the kernel with a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.pods.parse import parse_pod
from agent.resize.allocation import allocation_of
from agent.resize.checkpoint import CheckpointCorrupt, CheckpointStore
from agent.resize.state import PodRecord
from agent.resize.types import ResizeState
from tests.resize.harness import ResizeNode, ctr, manifest
from tests.resize.test_matrix import settle


def test_round_trip_and_checksum(tmp_path: Path) -> None:
    view = parse_pod(manifest("p", [ctr("a", req={"cpu": "100m"}, lim={"cpu": "1", "memory": "64Mi"})]))
    alloc = allocation_of(view)
    store = CheckpointStore(tmp_path / "state")
    store.save([PodRecord(view.uid, view.key, alloc, alloc, arrival=3, restarted={"a": "ab" * 32})])
    [back] = store.load() or []
    assert back.allocated == alloc and back.arrival == 3 and dict(back.restarted) == {"a": "ab" * 32}
    text = store.path.read_text().replace('"cpuMilli": 1000', '"cpuMilli": 2000')
    store.path.write_text(text)
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        store.load()
    assert not list((tmp_path / "state").glob(".*.tmp"))  # no temp file left behind


@pytest.mark.parametrize("damage", ["truncate", "missing"])
def test_corrupt_or_missing_checkpoint_is_rebuilt_from_the_kernel(node: ResizeNode, damage: str) -> None:
    node.add_pod(manifest("p", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    # the kernel holds 1 CPU (a resize the lost checkpoint knew of); the spec says 1 CPU too
    node.resize("p", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    assert settle(node, eng, "p") is ResizeState.DONE
    store = CheckpointStore(node.settings.state_dir)
    if damage == "truncate":
        store.path.write_bytes(store.path.read_bytes()[:40])
    else:
        store.path.unlink()
    fresh = node.engine()
    warnings = fresh.start(node.views())
    assert len(warnings) == 1 and (
        "corrupt" in warnings[0].message
        or "checksum" in warnings[0].message
        or "JSON" in warnings[0].message
        or "no resize checkpoint" in warnings[0].message
    )
    assert (store.path.with_name(store.path.name + ".corrupt").exists()) == (damage == "truncate")
    [rec] = store.load() or []
    assert rec.allocated == allocation_of(node.view("p"))  # rebuilt: what the kernel shows
    fresh.reconcile()
    assert fresh.status(node.view("p").uid) is None  # nothing to do after the rebuild


def test_rebuild_reads_the_kernel_not_the_spec(node: ResizeNode) -> None:
    """The spec moved on while no checkpoint existed: the allocation is what the kernel shows, so
    the change goes through admission as a resize."""
    node.add_pod(manifest("p", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    node.resize("p", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    eng = node.engine()
    eng.start(node.views())
    [rec] = CheckpointStore(node.settings.state_dir).load() or []
    assert rec.allocated.containers[0].limits.cpu_milli == 500
    eng.reconcile()
    st = eng.status(node.view("p").uid)
    assert st is not None and st.state is ResizeState.DONE
    assert node.read(node.container_path("p", "app", "cpu.cfs_quota_us")) == "100000"
