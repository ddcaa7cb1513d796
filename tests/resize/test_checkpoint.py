"""The state store, one record per pod: round trip, checksum; a damaged record (torn, truncated,
edited, foreign version, another pod's) loses only that pod's record, rebuilt from the kernel with a
warning; a save writes only the pods that changed; the single-file checkpoint of earlier releases is
migrated on first start; a kill between any two record writes of a multi-pod resize loses nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.pods.parse import parse_pod
from agent.resize.allocation import allocation_of
from agent.resize.checkpoint import CheckpointStore
from agent.resize.state import PodRecord
from agent.resize.store import PodStore, encode_record
from agent.resize.types import ResizeState
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest
from tests.resize.test_matrix import settle
from tests.support.cgroup_tree import FakeCgroupTree
from tests.support.fake_cri.serving import running_fake_cri


def _record(name: str, cpu: str = "1", arrival: int | None = None) -> PodRecord:
    view = parse_pod(manifest(name, [ctr("a", req={"cpu": "100m"}, lim={"cpu": cpu, "memory": "64Mi"})]))
    alloc = allocation_of(view)
    return PodRecord(view.uid, view.key, alloc, alloc, arrival=arrival, restarted={"a": "ab" * 32})


def test_round_trip_checksum_and_only_changed_records_written(tmp_path: Path) -> None:
    store = PodStore(tmp_path / "state")
    p, q = _record("p", arrival=3), _record("q")
    store.save([p, q])
    assert store.writes == 2
    back = {r.uid: r for r in PodStore(tmp_path / "state").load().records}
    assert back[p.uid].allocated == p.allocated and back[p.uid].arrival == 3
    assert dict(back[p.uid].restarted) == {"a": "ab" * 32}

    p2 = _record("p", cpu="2")
    store.save([p2, q])  # q is the same object: not written again
    assert store.writes == 3
    store.save([p2])  # q left the node: its record goes
    assert sorted(f.name for f in store.path.iterdir()) == [f"{p.uid}.json"]
    assert not list(store.path.glob(".*.tmp"))  # no temp file left behind
    assert oct(store.path.stat().st_mode & 0o777) == "0o700"
    assert oct((store.path / f"{p.uid}.json").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    "damage",
    ["truncate", "zero-length", "edited", "foreign-version", "another-pods-record", "not-json"],
)
def test_a_damaged_record_loses_only_that_pod(tmp_path: Path, damage: str) -> None:
    store = PodStore(tmp_path / "state")
    p, q = _record("p"), _record("q")
    store.save([p, q])
    file = store.path / f"{p.uid}.json"
    raw = file.read_bytes()
    doc = json.loads(raw)
    if damage == "truncate":
        file.write_bytes(raw[: len(raw) // 2])
    elif damage == "zero-length":
        file.write_bytes(b"")
    elif damage == "edited":
        file.write_bytes(raw.replace(b'"cpuMilli":1000', b'"cpuMilli":2000'))
    elif damage == "foreign-version":
        file.write_text(json.dumps({**doc, "version": 99}))
    elif damage == "another-pods-record":
        file.write_bytes(encode_record(q))
    else:
        file.write_bytes(b"\x00\xff garbage")
    loaded = PodStore(tmp_path / "state").load()
    assert [r.uid for r in loaded.records] == [q.uid]
    [bad] = loaded.damaged
    assert bad.uid == p.uid and str(file) in bad.reason
    assert bad.moved_to is not None and bad.moved_to.exists() and not file.exists()


def test_a_damaged_record_is_rebuilt_from_the_kernel_with_one_warning(node: ResizeNode) -> None:
    node.add_pod(manifest("p", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    node.add_pod(manifest("q", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    node.resize("p", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})  # the kernel holds 1 CPU
    assert settle(node, eng, "p") is ResizeState.DONE
    store = PodStore(node.settings.state_dir)
    (store.path / f"{node.view('p').uid}.json").write_bytes(b"{")
    fresh = node.engine()
    warnings = fresh.start(node.views())
    assert len(warnings) == 1 and "rebuilt from the kernel" in warnings[0].message
    recs = {r.uid: r for r in PodStore(node.settings.state_dir).load(persist=False).records}
    assert recs[node.view("p").uid].allocated == allocation_of(node.view("p"))  # what the kernel shows
    assert node.view("q").uid in recs
    fresh.reconcile()
    assert fresh.status(node.view("p").uid) is None  # nothing to do after the rebuild


def test_no_state_at_all_is_rebuilt_from_the_kernel_not_the_spec(node: ResizeNode) -> None:
    """The spec moved on while no state existed: the allocation is what the kernel shows, so the change
    goes through admission as a resize."""
    node.add_pod(manifest("p", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    node.resize("p", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    eng = node.engine()
    warnings = eng.start(node.views())
    assert len(warnings) == 1 and "no resize state" in warnings[0].message
    [rec] = PodStore(node.settings.state_dir).load().records
    assert rec.allocated.containers[0].limits.cpu_milli == 500
    eng.reconcile()
    st = eng.status(node.view("p").uid)
    assert st is not None and st.state is ResizeState.DONE
    assert node.read(node.container_path("p", "app", "cpu.cfs_quota_us")) == "100000"


def test_the_old_single_file_checkpoint_is_migrated_on_first_start(node: ResizeNode) -> None:
    node.add_pod(manifest("p", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    view = node.view("p")
    old_alloc = allocation_of(view)
    # an earlier release checkpointed p with an accepted resize to 1 CPU, not yet actuated
    node.resize("p", {"app": {"limits": {"cpu": "1", "memory": "256Mi"}}})
    new_alloc = allocation_of(node.view("p"))
    assert new_alloc != old_alloc
    CheckpointStore(node.settings.state_dir).save([PodRecord(view.uid, view.key, new_alloc, new_alloc, arrival=1)])
    eng = node.engine()
    warnings = eng.start(node.views())
    assert any("migrated" in w.message for w in warnings)
    assert not (node.settings.state_dir / "resize-checkpoint.json").exists()
    assert (node.settings.state_dir / "resize-checkpoint.json.migrated").exists()
    [rec] = PodStore(node.settings.state_dir).load().records
    assert rec.allocated == new_alloc and rec.arrival == 1  # the in-flight allocation, not the kernel's
    assert settle(node, eng, "p") is ResizeState.DONE
    assert node.read(node.container_path("p", "app", "cpu.cfs_quota_us")) == "100000"


def test_a_corrupt_old_checkpoint_is_set_aside_and_every_pod_rebuilt(node: ResizeNode) -> None:
    node.add_pod(manifest("p", [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
    node.settings.state_dir.mkdir(parents=True, exist_ok=True)
    (node.settings.state_dir / "resize-checkpoint.json").write_text("{torn")
    eng = node.engine()
    warnings = eng.start(node.views())
    assert len(warnings) == 1 and "not valid JSON" in warnings[0].message
    assert (node.settings.state_dir / "resize-checkpoint.json.corrupt").exists()
    [rec] = PodStore(node.settings.state_dir).load().records
    assert rec.allocated == allocation_of(node.view("p"))


class _Killed(BaseException):
    """A SIGKILL at a chosen record write: nothing after it runs, not even cleanup."""


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kill_at=st.integers(min_value=0, max_value=12))
def test_a_kill_between_any_two_record_writes_loses_nothing(tmp_path_factory: pytest.TempPathFactory, kill_at: int) -> None:
    """Three pods resized at once; the process dies before its `kill_at`-th record write (a torn temp
    file may be left); a restart reads every record it finds intact and converges to the desired values."""
    tmp = tmp_path_factory.mktemp("kill")
    with running_fake_cri(tmp) as cri:
        node = ResizeNode(FakeCgroupTree(tmp / "tree", "v1"), cri, tmp / "state")
        try:
            for name in ("p", "q", "r"):
                node.add_pod(manifest(name, [ctr("app", lim={"cpu": "500m", "memory": "256Mi"})]))
            eng = node.engine()
            eng.start(node.views())
            eng.reconcile()
            for name, cpu in (("p", "1"), ("q", "700m"), ("r", "300m")):
                eng.update(node.resize(name, {"app": {"limits": {"cpu": cpu, "memory": "256Mi"}}}))
            writes = [0]
            real_write = os.write

            def dying_write(fd: int, data: bytes | memoryview) -> int:
                if writes[0] == kill_at:
                    real_write(fd, bytes(data)[: len(data) // 2])  # torn temp file
                    raise _Killed
                writes[0] += 1
                return real_write(fd, data)

            os.write = dying_write  # type: ignore[assignment]
            try:
                eng.reconcile()
            except _Killed:
                pass
            finally:
                os.write = real_write  # type: ignore[assignment]
            fresh = node.engine()
            warnings = fresh.start(node.views())
            assert not [w for w in warnings if "corrupt" in w.message or "checksum" in w.message]
            for name in ("p", "q", "r"):
                assert settle(node, fresh, name) in (ResizeState.DONE, None)
            assert node.read(node.container_path("p", "app", "cpu.cfs_quota_us")) == "100000"
            assert node.read(node.container_path("q", "app", "cpu.cfs_quota_us")) == "70000"
            assert node.read(node.container_path("r", "app", "cpu.cfs_quota_us")) == "30000"
            assert node.violations == []
        finally:
            node.close()
