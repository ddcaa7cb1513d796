"""`apply` through the cgroupfs driver on strict fake trees: v1, v2 and hybrid layouts. Values land in
the files the kernel has for each layout, a second apply writes nothing, and a file the real kernel
would not have fails instead of being created."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.apply import reconcile_once
from agent.settings import Settings, from_mapping
from cgroupfs.types import CgroupName
from tests.fakes.cgroup_tree import FakeCgroupTree
from tests.unit.podbuild import ctr, pod

UID_G = "aaaaaaaa-0000-4000-8000-000000000001"
UID_B = "bbbbbbbb-0000-4000-8000-000000000002"
MI = 1024**2


def _setup(tree: FakeCgroupTree, tmp_path: Path, root: str = "/") -> Settings:
    pods = [
        pod("g", [ctr("app", lim={"cpu": "1", "memory": "256Mi", "hugepages-2Mi": "4Mi"})], uid=UID_G),
        pod(
            "b",
            [ctr("app", req={"cpu": "250m", "memory": "64Mi"}, lim={"cpu": "500m", "memory": "128Mi"})],
            uid=UID_B,
        ),
    ]
    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"kind": "List", "items": pods}))
    base = CgroupName(tuple(p for p in root.split("/") if p))
    for name in (
        ("kubepods",),
        ("kubepods", "burstable"),
        ("kubepods", "besteffort"),
        ("kubepods", f"pod{UID_G}"),
        ("kubepods", "burstable", f"pod{UID_B}"),
    ):
        tree.create(CgroupName((*base.parts, *name)))
    raw: dict[str, Any] = {
        "cgroupfs": str(tree.root),
        "cgroupRoot": root,
        "pods": str(f),
        "allocatable": {"cpu": "4", "memory": "8Gi", "hugepages-2Mi": "64Mi"},
        "qosReserved": {"memory": "100%"},
        "hugepageSizes": ["2Mi", "1Gi"],
    }
    return from_mapping(raw)


EXPECTED: dict[str, dict[str, str]] = {
    "v1": {
        "cpu/kubepods/cpu.shares": "4096",
        "cpu/kubepods/podaaaaaaaa-0000-4000-8000-000000000001/cpu.cfs_quota_us": "100000",
        "memory/kubepods/podaaaaaaaa-0000-4000-8000-000000000001/memory.limit_in_bytes": str(256 * MI),
        "hugetlb/kubepods/podaaaaaaaa-0000-4000-8000-000000000001/hugetlb.2MB.limit_in_bytes": str(4 * MI),
        "hugetlb/kubepods/podaaaaaaaa-0000-4000-8000-000000000001/hugetlb.1GB.limit_in_bytes": "0",
        "hugetlb/kubepods/burstable/hugetlb.2MB.limit_in_bytes": str(1 << 62),
        "memory/kubepods/burstable/memory.limit_in_bytes": str(8192 * MI - 256 * MI),
        "memory/kubepods/besteffort/memory.limit_in_bytes": str(8192 * MI - 256 * MI - 64 * MI),
    },
    "v2": {
        "kubepods/cpu.weight": "157",  # 4096 shares, the kubelet's linear formula
        "kubepods/podaaaaaaaa-0000-4000-8000-000000000001/cpu.max": "100000 100000",
        "kubepods/podaaaaaaaa-0000-4000-8000-000000000001/memory.max": str(256 * MI),
        "kubepods/podaaaaaaaa-0000-4000-8000-000000000001/hugetlb.2MB.max": str(4 * MI),
        "kubepods/burstable/cpu.weight": "10",  # 256 shares
        "kubepods/burstable/podbbbbbbbb-0000-4000-8000-000000000002/cpu.max": "50000 100000",
        "kubepods/besteffort/memory.max": str(8192 * MI - 256 * MI - 64 * MI),
    },
    "hybrid": {
        "cpu/kubepods/burstable/podbbbbbbbb-0000-4000-8000-000000000002/cpu.cfs_quota_us": "50000",
        "memory/kubepods/burstable/podbbbbbbbb-0000-4000-8000-000000000002/memory.limit_in_bytes": str(
            128 * MI
        ),
        "unified/kubepods/podaaaaaaaa-0000-4000-8000-000000000001/hugetlb.2MB.max": str(4 * MI),
        "unified/kubepods/burstable/hugetlb.1GB.max": str(1 << 62),
    },
}


@pytest.mark.parametrize("mode", ["v1", "v2", "hybrid"])
def test_apply_writes_each_layouts_files_and_converges(
    mode: str, fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path
) -> None:
    tree = fake_cgroup_tree(mode)
    settings = _setup(tree, tmp_path)
    first = reconcile_once(settings)
    assert first.ok, first.to_json()
    assert first.execution.writes > 0
    for path, value in EXPECTED[mode].items():
        assert tree.read(path) == value, path
    second = reconcile_once(settings)
    assert second.ok and second.execution.writes == 0, second.to_json()


def test_under_a_custom_cgroup_root(fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path) -> None:
    tree = fake_cgroup_tree("v2")
    settings = _setup(tree, tmp_path, root="/k8s/nodes")
    assert reconcile_once(settings).ok
    assert tree.read("k8s/nodes/kubepods/burstable/cpu.weight") == "10"


def test_a_file_the_kernel_would_not_have_fails_instead_of_being_created(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path
) -> None:
    """The memory controller is not enabled in the pod's v2 cgroup (its parent's subtree_control lacks it):
    memory.max does not exist there, so the write fails with a typed error naming the path."""
    tree = fake_cgroup_tree("v2")
    settings = _setup(tree, tmp_path)
    pod_dir = "kubepods/podaaaaaaaa-0000-4000-8000-000000000001"
    tree.remove(pod_dir)
    tree.path(pod_dir).mkdir()
    tree._seed_v2(pod_dir, ("cpu",))
    report = reconcile_once(settings)
    assert not report.ok
    failed = report.execution.failed
    assert failed is not None and failed.error_type == "CgroupNotFound"
    assert "memory.max" in (failed.error or "")
    assert not tree.path("kubepods/podaaaaaaaa-0000-4000-8000-000000000001/memory.max").exists()


def test_a_missing_pod_cgroup_means_not_yet(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path
) -> None:
    tree = fake_cgroup_tree("hybrid")
    settings = _setup(tree, tmp_path)
    tree.remove("cpu/kubepods/burstable/podbbbbbbbb-0000-4000-8000-000000000002")
    tree.remove("memory/kubepods/burstable/podbbbbbbbb-0000-4000-8000-000000000002")
    tree.remove("unified/kubepods/burstable/podbbbbbbbb-0000-4000-8000-000000000002")
    report = reconcile_once(settings)
    assert report.ok, report.to_json()
    assert report.waiting == ("default/b",)
    assert not report.errors
