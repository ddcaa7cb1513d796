"""The invariant the cluster-fault and upgrade tests sample on each node (tests/e2e_k8s/inflight.py) finds a
child above its parent on both cgroup layouts, and only that: run here on files laid out as the nodes have
them (the script reads plain files, so a temporary directory stands for /sys/fs/cgroup)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e_k8s.inflight import _INVARIANT

UID = "0f3c2b1a-1111-2222-3333-444455556666"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, value in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")


def _check(kind: str, roots: list[list[str]]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _INVARIANT, kind, json.dumps(roots)], capture_output=True, text=True, check=True)
    bad: list[str] = json.loads(out.stdout)["bad"]
    return bad


def _v1(tmp: Path, container_memory: int, container_quota: int) -> list[list[str]]:
    pod = f"kubepods/burstable/pod{UID}"
    _write(tmp / "memory", {
        "kubepods/memory.limit_in_bytes": str(8 << 30),
        "kubepods/burstable/memory.limit_in_bytes": str(6 << 30),
        f"{pod}/memory.limit_in_bytes": str(128 << 20),
        f"{pod}/app/memory.limit_in_bytes": str(container_memory),
        f"{pod}/side/memory.limit_in_bytes": str(32 << 20),
        f"{pod}/sandbox/memory.limit_in_bytes": "9223372036854771712",  # unlimited: under its parent
    })
    _write(tmp / "cpu", {
        "kubepods/cpu.cfs_quota_us": "-1", "kubepods/cpu.cfs_period_us": "100000",
        f"{pod}/cpu.cfs_quota_us": "50000", f"{pod}/cpu.cfs_period_us": "100000",
        f"{pod}/app/cpu.cfs_quota_us": str(container_quota), f"{pod}/app/cpu.cfs_period_us": "100000",
    })
    return [["memory", str(tmp / "memory/kubepods")], ["cpu", str(tmp / "cpu/kubepods")]]


def _v2(tmp: Path, container_memory: str, container_cpu: str) -> list[list[str]]:
    pod = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice"
    _write(tmp, {
        "kubepods.slice/memory.max": str(8 << 30), "kubepods.slice/cpu.max": "max 100000",
        "kubepods.slice/kubepods-burstable.slice/memory.max": "max",
        "kubepods.slice/kubepods-burstable.slice/cpu.max": "max 100000",
        f"{pod}/memory.max": str(96 << 20), f"{pod}/cpu.max": "50000 100000",
        f"{pod}/cri-containerd-a.scope/memory.max": container_memory,
        f"{pod}/cri-containerd-a.scope/cpu.max": container_cpu,
    })
    return [["memory", str(tmp / "kubepods.slice")], ["cpu", str(tmp / "kubepods.slice")]]


def test_a_converged_v1_tree_holds(tmp_path: Path) -> None:
    assert _check("v1", _v1(tmp_path, 64 << 20, 50000)) == []


@pytest.mark.parametrize(("memory", "quota", "found"), [
    (256 << 20, 50000, ["memory", "/app: ", "its containers'"]),  # a container above its pod (so the sum too)
    (100 << 20, 50000, ["its containers'"]),  # each under the pod, together above it
    (64 << 20, 80000, ["cpu", "/app: 0.8 above its parent's 0.5"]),  # a quota ratio above the pod's
])
def test_a_v1_child_above_its_parent_is_found(tmp_path: Path, memory: int, quota: int, found: list[str]) -> None:
    bad = _check("v1", _v1(tmp_path, memory, quota))
    assert bad and all(any(word in b for b in bad) for word in found), bad
    assert len(bad) == (2 if memory > 128 << 20 else 1), bad


def test_a_converged_v2_tree_holds(tmp_path: Path) -> None:
    assert _check("v2", _v2(tmp_path, str(64 << 20), "50000 100000")) == []


@pytest.mark.parametrize(("memory", "cpu", "found"), [
    (str(128 << 20), "50000 100000", "memory"),
    (str(64 << 20), "60000 100000", "cpu"),
    (str(64 << 20), "max 100000", None),  # unlimited: held by its parent
])
def test_a_v2_child_above_its_parent_is_found(tmp_path: Path, memory: str, cpu: str, found: str | None) -> None:
    bad = _check("v2", _v2(tmp_path, memory, cpu))
    assert (found is None and bad == []) or (bad and all(b.startswith(found or "-") for b in bad)), bad


def test_the_cluster_faults_table_is_written_only_from_measured_rows(tmp_path: Path) -> None:
    from tests.reliability.cluster_faults_doc import BEGIN, END, write

    doc = tmp_path / "RELIABILITY.md"
    doc.write_text(f"# R\n{BEGIN}\nNot measured yet.\n{END}\nafter\n")
    results = tmp_path / "e2e_k8s.json"
    results.write_text(json.dumps({"commits": {}}))
    assert write(results, doc) is False and "Not measured yet." in doc.read_text()
    row = {"injected_after_s": 1.0, "rollout_in_flight": 4, "resizes_in_flight": 2, "back_s": 12.5, "converge_s": 30.25,
           "lost": 0, "reverted": 0, "restored": 2, "fights": 0, "kubelet_owned_writes": 0, "invariant_samples": 40,
           "invariant_violations": 0, "max_unavailable": 1, "max_updating": 1}
    results.write_text(json.dumps({"commits": {"cluster_faults": "abc1234"}, "cluster_faults": {"kubelet restarted on n1": row}}))
    assert write(results, doc) is True
    text = doc.read_text()
    assert "| kubelet restarted on n1 | 1.0 s | 4 / 2 | 0 | 0 | 2 | 0 | 0 | 40 / 0 | 1 (1) | 12.5 s | 30.2 s |" in text
    assert "abc1234" in text and text.endswith(f"{END}\nafter\n") and "Not measured yet." not in text
