"""The node recommender in the scale harness: the agents' config turns it on, the fake cgroup tree carries
the counter files its sampler reads (with usage that moves), the project's objects are measured with the
NodeHistories split into their base and their entries, and its requests are told apart in the audit log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bench.scale import nodes, objects, storage, usage
from bench.scale.audit import (
    Record,
    patches_by_age,
    recommender_part,
    split_recommender,
    tally_recommender,
    tally_status,
)
from tests.support.cgroup_tree import FakeCgroupTree

SHIPPED = {"cgroupfs": "/host/sys/fs/cgroup", "kubeletConfig": "/k", "stateDir": "/s", "resyncPeriod": "60s",
           "vpa": {"enabled": True}, "rollout": {"enabled": True}}


def _node(tmp_path: Path) -> nodes.SimNode:
    return nodes.SimNode("sim-000", 0, tmp_path / "sim-000", 6600, 9900, 9901)


def test_the_agents_run_the_shipped_config_with_the_recommender_on_at_the_harness_interval(tmp_path: Path) -> None:
    cfg = nodes.agent_config(SHIPPED, _node(tmp_path))
    assert cfg["recommender"] == {"enabled": True, "recommenderInterval": "20s"}
    assert {k: v for k, v in cfg.items() if k not in ("recommender", "cgroupfs", "kubeletConfig", "stateDir")} == {
        "resyncPeriod": "60s", "vpa": {"enabled": True}, "rollout": {"enabled": True}}
    shipped = {**SHIPPED, "recommender": {"enabled": False, "sampleInterval": "2s"}}
    assert nodes.agent_config(shipped, _node(tmp_path), 30.0)["recommender"] == {
        "enabled": True, "sampleInterval": "2s", "recommenderInterval": "30s"}
    assert "recommender" not in nodes.agent_config(SHIPPED, _node(tmp_path), None)


def test_the_config_the_harness_writes_loads_with_the_recommender_on(tmp_path: Path) -> None:
    from agent.config.settings import load_file

    node = _node(tmp_path)
    nodes.write_files(node, SHIPPED)
    settings = load_file(node.config)
    assert settings.recommender.enabled and settings.recommender.recommender_interval_s == 20.0
    assert settings.recommender.sample_interval_s == 1.0


@pytest.mark.parametrize(("cpu", "memory", "cores", "ws"), [
    (200, 256 << 20, (0.07, 0.13), (0.42 * (256 << 20), 0.78 * (256 << 20))),  # half the CPU, 60 % of the memory, ±30 %
    (50, 64 << 20, (0.0175, 0.0325), (0.42 * (64 << 20), 0.78 * (64 << 20))),
    (None, None, (0.014, 0.026), (0.7 * (48 << 20), 1.3 * (48 << 20))),  # BestEffort
])
def test_a_containers_usage_sits_below_its_requests(cpu: int | None, memory: int | None, cores: tuple[float, float],
                                                    ws: tuple[float, float]) -> None:
    got = [usage.base_usage(f"ns/p-{i}", "app", cpu, memory) for i in range(50)]
    assert all(cores[0] <= c <= cores[1] and ws[0] <= w <= ws[1] for c, w in got), got
    assert len({c for c, _ in got}) > 40  # the pods of one workload differ
    assert usage.base_usage("ns/p-1", "app", cpu, memory) == got[1]  # deterministic


def test_a_cpu_counter_only_counts_up() -> None:
    c = usage.Counter(Path("/nonexistent"), 0.5)
    assert c.advance(2.0, 1.0) == 1_000_000_000
    assert c.advance(1.0, 0.0) == 1_000_000_000
    assert c.advance(1.0, -3.0) == 1_000_000_000
    assert c.advance(0.5, 2.0) == 1_500_000_000


def _pod_on_tree(tree: FakeCgroupTree) -> tuple[Any, Any]:
    """One Burstable pod with two containers (app and the proxy sidecar), its cgroups as converging leaves them
    (the cpu and memory hierarchies: the kubelet writes nothing in cpuacct)."""
    from agent.pods.parse import parse_pod
    from agent.recommender.sampler import targets
    from cgroupfs.types import CgroupName, DriverKind

    raw = objects.pod("p", "ns", "sim-000", objects.template("svc", 0, 0, objects.OWN_RESOURCES), "own")
    raw["metadata"]["uid"] = objects.uid("pod", "p")
    raw.update(objects.pod_status(raw, "2026-01-01T00:00:00Z", "10.0.0.1"))
    view = parse_pod(raw)
    wanted = targets([view], CgroupName(()), DriverKind.CGROUPFS, tree.hierarchy)
    assert [t.container for t in wanted] == ["app", "proxy"]
    for t in wanted:
        for mount in ("cpu", "memory"):
            path = next(p for n, p in t.files if p.startswith(mount + "/"))
            tree.create(path.rpartition("/")[0].partition("/")[2], controllers=[mount])
    return view, wanted


def test_the_tree_carries_every_file_the_sampler_reads_and_it_samples_cpu_and_memory(tmp_path: Path) -> None:
    from agent.recommender.counters import V1_FILES
    from agent.recommender.sampler import Sampler, reader_for
    from cgroupfs.types import CgroupName, DriverKind

    tree = FakeCgroupTree(tmp_path / "cgroupfs", "hybrid")
    _, wanted = _pod_on_tree(tree)
    counters = [nodes.sampler_files(tree, t.pod, t.container, dict(t.files), 200 if t.container == "app" else 50,
                                    t.memory_request) for t in wanted]
    for t in wanted:
        assert {n for n, _ in t.files} == {n for names in V1_FILES.values() for n in names}
        assert all(tree.path(p).exists() for n, p in t.files if n != "cpu.stat")  # cpu.stat: only with cpuStarvation
    sampler = Sampler(reader_for(tree.root, CgroupName(()), DriverKind.CGROUPFS, tree.hierarchy))
    first, _ = sampler.tick(100.0, wanted)
    for c in counters:  # a second at twice the base rate
        c.path.write_text(f"{c.advance(1.0, 2.0)}\n")
    second, _ = sampler.tick(101.0, wanted)
    sampler.close()
    assert [s.cpu for s in first] == [None, None]  # a rate needs two readings
    assert [round(s.cpu or 0, 4) for s in second] == [round(2 * c.cores, 4) for c in counters]
    for s, t in zip(second, wanted, strict=True):
        _, ws = usage.base_usage(t.pod, t.container, 200 if t.container == "app" else 50, t.memory_request)
        assert s.memory == ws  # the working set: usage less the inactive file pages of memory.stat


def test_the_updater_advances_the_counters_in_place(tmp_path: Path) -> None:
    paths = [tmp_path / f"c{i}" for i in range(3)]
    for p in paths:
        p.write_text("0\n")
    up = usage.Updater(period_s=0.05)
    up.add([usage.Counter(p, 1.0) for p in paths])
    up.start()
    try:
        deadline = time.monotonic() + 5
        while up.passes < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        up.stop.set()
        up.join(5)
    values = [int(p.read_text()) for p in paths]
    assert up.passes >= 3 and not up.errors
    assert all(v > 0 for v in values)
    assert all(p.read_text().count("\n") == 1 for p in paths)  # one number, nothing left of a shorter one


def _history(node: str, entries: dict[str, int]) -> dict[str, Any]:
    """A NodeHistory as the API server returns it: labels, managed fields, an entry per VPA."""
    labels = {f"{storage.HISTORY_LABEL}{k.replace('/', '-')}": "" for k in entries}
    return {
        "apiVersion": "kube-cgroup-agent.io/v1alpha1", "kind": "NodeHistory",
        "metadata": {"name": node, "uid": "u", "resourceVersion": "12", "labels": labels,
                     "managedFields": [{"manager": "kube-cgroup-agent", "operation": "Update", "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}},
                                                     "f:spec": {".": {}, "f:node": {}, "f:updated": {}, "f:vpas": {}}}}]},
        "spec": {"node": node, "updated": "2026-01-01T00:00:00.000000Z",
                 "vpas": {k: {"containers": {f"c{i}": "[1," + "9" * 100 + "]" for i in range(n)}} for k, n in entries.items()}},
    }


def test_a_nodehistorys_bytes_split_into_its_base_and_its_entries() -> None:
    empty = _history("n1", {})
    one = _history("n1", {"ns/a": 1})
    three = _history("n2", {"ns/a": 1, "ns/b": 2, "ns/c": 1})
    assert storage.size(storage.without_entries(three)) == storage.size(empty)
    assert storage.without_entries(three)["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:labels"] == {".": {}}
    assert three["spec"]["vpas"]  # the object measured is left as it was
    got = storage.histories([one, three])
    assert got["count"] == 2 and got["entries"] == 4 and got["containers"] == 5
    assert got["bytes"] == storage.size(one) + storage.size(three)
    assert got["base_bytes"] == 2 * storage.size(empty)
    entry = storage.size(one) - storage.size(empty)
    assert entry > 100 + 60  # the history, its label and the label's managed field
    assert got["entry_bytes"] == got["bytes"] - got["base_bytes"]


def test_the_recommenders_leases_are_counted_apart() -> None:
    def lease(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"holderIdentity": "sim-000"}}

    got = storage.leases([lease("kcg-rec-a"), lease("kcg-rec-b"), lease("kcg-rollout-statefulset-s-0"), lease("sim-000")])
    assert got["leases kcg-rec-*"]["count"] == 2 and got["leases kcg-* (others)"]["count"] == 1
    assert got["leases kcg-rec-*"]["bytes"] == 2 * storage.size(lease("kcg-rec-a"))


@pytest.mark.parametrize(("verb", "resource", "target", "part"), [
    ("update", "nodehistories", "/sim-000", "nodehistories"),
    ("create", "nodehistories", "/sim-000", "nodehistories"),
    ("list", "nodehistories", "", "nodehistories"),
    ("update", "leases", "own-sim-000/kcg-rec-svc-2", "leases kcg-rec-*"),
    ("get", "leases", "own-sim-000/kcg-rec-svc-2", "leases kcg-rec-*"),
    ("patch", "verticalpodautoscalers/status", "own-sim-000/svc-2", "verticalpodautoscalers/status"),
    ("update", "leases", "own-sim-000/kcg-rollout-statefulset-store-0", None),
    ("watch", "verticalpodautoscalers", "", None),
    ("get", "nodes", "/sim-000", None),
])
def test_the_recommenders_requests_are_told_apart(verb: str, resource: str, target: str, part: str | None) -> None:
    assert recommender_part(Record(0.0, "agent:sim-000", verb, resource, 200, target)) == part


def test_the_recommenders_requests_tallied() -> None:
    recs = [Record(0.0, "agent:n", "update", "nodehistories", 200, "/n"),
            Record(0.0, "agent:n", "update", "nodehistories", 200, "/n"),
            Record(0.0, "agent:n", "update", "leases", 200, "ns/kcg-rec-v"),
            Record(0.0, "agent:n", "watch", "pods", 200, "")]
    rec, other = split_recommender(recs)
    assert (len(rec), len(other)) == (3, 1)
    assert tally_recommender(recs) == {"update nodehistories": 2, "update leases kcg-rec-*": 1}


def _patch(target: str, verb: str = "patch", resource: str = "verticalpodautoscalers/status") -> Record:
    return Record(0.0, "agent:sim-000", verb, resource, 200, target)


AGED = {"own-sim-000/svc-2", "own-sim-000/svc-3"}
HELD = AGED | {"own-sim-000/svc-4"}


@pytest.mark.parametrize(("records", "by_vpa", "aged", "young"), [
    # after their first merge, VPAs with days of history are rarely patched; the young one at most merges
    ([_patch("own-sim-000/svc-4")] * 5 + [_patch("own-sim-000/svc-2")], {"own-sim-000/svc-4": 5, "own-sim-000/svc-2": 1},
     {"vpas": 2, "patches": 1}, {"vpas": 1, "patches": 5}),
    ([], {}, {"vpas": 2, "patches": 0}, {"vpas": 1, "patches": 0}),
    # the holder's other requests are not status patches
    ([_patch("own-sim-000/svc-2", "get"), _patch("own-sim-000/kcg-rec-svc-2", "update", "leases"),
      _patch("/sim-000", "update", "nodehistories"), _patch("own-sim-000/svc-3")],
     {"own-sim-000/svc-3": 1}, {"vpas": 2, "patches": 1}, {"vpas": 1, "patches": 0}),
])
def test_the_holders_status_patches_are_told_apart_by_vpa_and_age(records: list[Record], by_vpa: dict[str, int],
                                                                  aged: dict[str, int], young: dict[str, int]) -> None:
    rec, _ = split_recommender(records)
    assert tally_status(rec) == by_vpa
    assert patches_by_age(by_vpa, HELD, AGED) == {"aged": aged, "young": young}


@pytest.mark.parametrize(("held", "aged", "split"), [
    (HELD, AGED, ({"vpas": 2, "patches": 3}, {"vpas": 1, "patches": 4})),
    (HELD, set(), ({"vpas": 0, "patches": 0}, {"vpas": 3, "patches": 7})),  # nothing seeded: every VPA young
])
def test_a_node_without_seeded_histories_holds_young_vpas_only(held: set[str], aged: set[str],
                                                              split: tuple[dict[str, int], dict[str, int]]) -> None:
    by_vpa = {"own-sim-000/svc-2": 1, "own-sim-000/svc-3": 2, "own-sim-000/svc-4": 4}
    assert patches_by_age(by_vpa, held, aged) == {"aged": split[0], "young": split[1]}
