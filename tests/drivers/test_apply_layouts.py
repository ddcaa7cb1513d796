"""`apply` through the cgroupfs driver, one suite over several backends (tests/backends/): the strict fake
tree of each layout (v1, v2, hybrid), this host's real kernel (root), and the real cgroup v2 kernel of the
`make e2e-v2` guest. Values land in the files the kernel has for each layout and read back as written, a
second apply writes nothing and `diff` agrees, a memory limit below real usage is refused; on the fakes, a
file the real kernel would not have fails instead of being created."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.commands.main import main
from agent.config.settings import Settings, from_mapping
from agent.pipeline.apply import reconcile_once
from cgroupfs.convert import hugepage_size_name
from cgroupfs.types import CgroupName
from tests.backends.cgroupfs_trees import BACKENDS, Backend
from tests.support.cgroup_tree import FakeCgroupTree
from tests.unit.podbuild import ctr, pod

UID_G = "aaaaaaaa-0000-4000-8000-000000000001"
UID_B = "bbbbbbbb-0000-4000-8000-000000000002"
MI = 1024**2
POD_G = f"kubepods/pod{UID_G}"
POD_B = f"kubepods/burstable/pod{UID_B}"


def _pods(g_memory: str = "256Mi", b_cpu: str = "500m") -> list[dict[str, Any]]:
    return [
        pod("g", [ctr("app", lim={"cpu": "1", "memory": g_memory, "hugepages-2Mi": "4Mi"})], uid=UID_G),
        pod(
            "b",
            [ctr("app", req={"cpu": "250m", "memory": "64Mi"}, lim={"cpu": b_cpu, "memory": "128Mi"})],
            uid=UID_B,
            pod_resources={"requests": {"memory": "64Mi"}},  # pod-level: memory.low / the v1 soft limit
        ),
    ]


def _raw(backend: Backend, pods_file: Path) -> dict[str, Any]:
    return {
        "cgroupfs": str(backend.cgroupfs),
        "cgroupRoot": backend.cgroup_root,
        "pods": str(pods_file),
        "allocatable": {"cpu": "4", "memory": "8Gi", "hugepages-2Mi": "64Mi"},
        "qosReserved": {"memory": "100%"},
        "hugepageSizes": [hugepage_size_name(s).replace("B", "i") for s in backend.hugepage_sizes],
    }


def _setup(backend: Backend, tmp_path: Path) -> Settings:
    """The kubelet's tree (tiers and pod cgroups, made by the test) and the agent's settings for it."""
    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"kind": "List", "items": _pods()}))
    for name in ("kubepods/burstable", "kubepods/besteffort", POD_G, POD_B):
        backend.create(_name(name))
    raw = _raw(backend, f)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
    return from_mapping(raw)


def _name(text: str) -> CgroupName:
    return CgroupName(tuple(text.split("/")))


def _expected(backend: Backend) -> dict[tuple[str, str], str]:
    """(cgroup below the root, file) -> what the kernel holds after apply, for this backend's layout and
    huge page sizes (a size the kernel does not have has no file)."""
    sizes = {hugepage_size_name(s) for s in backend.hugepage_sizes}
    rows = EXPECTED[backend.mode]
    return {
        k: v for k, v in rows.items() if not k[1].startswith("hugetlb.") or k[1].split(".")[1] in sizes
    }


EXPECTED: dict[str, dict[tuple[str, str], str]] = {
    "v1": {
        ("kubepods", "cpu.shares"): "4096",
        (POD_G, "cpu.cfs_quota_us"): "100000",
        (POD_G, "memory.limit_in_bytes"): str(256 * MI),
        (POD_G, "hugetlb.2MB.limit_in_bytes"): str(4 * MI),
        (POD_G, "hugetlb.1GB.limit_in_bytes"): "0",
        ("kubepods/burstable", "hugetlb.2MB.limit_in_bytes"): str(1 << 62),
        ("kubepods/burstable", "memory.limit_in_bytes"): str(8192 * MI - 256 * MI),
        ("kubepods/besteffort", "memory.limit_in_bytes"): str(8192 * MI - 256 * MI - 64 * MI),
    },
    "v2": {
        ("kubepods", "cpu.weight"): "157",  # 4096 shares, the kubelet's linear formula
        (POD_G, "cpu.max"): "100000 100000",
        (POD_G, "memory.max"): str(256 * MI),
        (POD_G, "hugetlb.2MB.max"): str(4 * MI),
        ("kubepods/burstable", "cpu.weight"): "10",  # 256 shares
        (POD_B, "cpu.max"): "50000 100000",
        (POD_B, "cpu.weight"): "10",  # 256 shares
        (POD_B, "memory.max"): str(128 * MI),
        (POD_B, "memory.low"): str(64 * MI),  # the pod-level memory request
        ("kubepods/besteffort", "memory.max"): str(8192 * MI - 256 * MI - 64 * MI),
    },
    "hybrid": {
        (POD_B, "cpu.cfs_quota_us"): "50000",
        (POD_B, "memory.limit_in_bytes"): str(128 * MI),
        (POD_B, "memory.soft_limit_in_bytes"): str(64 * MI),
        (POD_G, "hugetlb.2MB.max"): str(4 * MI),
        ("kubepods/burstable", "hugetlb.1GB.max"): str(1 << 62),
    },
}


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_apply_writes_each_layouts_files_and_converges(backend: Backend, tmp_path: Path) -> None:
    settings = _setup(backend, tmp_path)
    expected = _expected(backend)
    assert expected, "nothing to check"
    assert any(backend.read(_name(c), f) != v for (c, f), v in expected.items()), "converged before apply"

    first = reconcile_once(settings)
    assert first.ok, first.to_json()
    assert first.execution.writes > 0
    for (cgroup, filename), value in expected.items():
        assert backend.read(_name(cgroup), filename) == value, (cgroup, filename)

    second = reconcile_once(settings)
    assert second.ok and second.execution.writes == 0 and second.plan.steps == (), second.to_json()
    assert main(["diff", "--config", str(tmp_path / "config.yaml")]) == 0


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_memory_limit_below_real_usage_is_refused_and_the_rest_applied(
    backend: Backend, tmp_path: Path
) -> None:
    """On v1 the kernel itself refuses (EBUSY); on v2 it would take the limit and reclaim or OOM-kill, so
    the agent's usage guard is what protects the pod: the process lives, the limit stays."""
    settings = _setup(backend, tmp_path)
    assert reconcile_once(settings).ok
    limit_file = "memory.max" if backend.mode == "v2" else "memory.limit_in_bytes"
    holder = backend.hold_memory(_name(POD_G), 40)  # 40 MiB in use in the pod cgroup

    (tmp_path / "pods.json").write_text(json.dumps({"kind": "List", "items": _pods("16Mi", "800m")}))
    report = reconcile_once(settings)
    assert not report.ok
    messages = [e.message for e in report.errors]
    assert any("memory limit 16777216 is below current usage" in m for m in messages), messages
    assert backend.read(_name(POD_G), limit_file) == str(256 * MI)
    assert holder.alive()
    b_quota = ("cpu.max", "80000 100000") if backend.mode == "v2" else ("cpu.cfs_quota_us", "80000")
    assert backend.read(_name(POD_B), b_quota[0]) == b_quota[1], "the other pod's change still applied"


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_check_reports_the_mode_and_driver(
    backend: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _setup(backend, tmp_path)
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text(f"kind: KubeletConfiguration\ncgroupDriver: cgroupfs\ncgroupRoot: {backend.cgroup_root}\n")
    capsys.readouterr()
    argv = ["check", "--cgroupfs", str(backend.cgroupfs), "--cgroup-root", backend.cgroup_root]
    rc = main([*argv, "--cgroup-driver", "cgroupfs", "--kubelet-config", str(kubelet), "-o", "json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["cgroup mode"]["detail"].startswith(f"{backend.mode}:"), checks["cgroup mode"]
    assert checks["kubelet cgroup driver"]["verdict"] == "ok", checks["kubelet cgroup driver"]
    assert checks["kubelet cgroup driver"]["detail"].startswith("cgroupfs")
    assert "agent cgroup driver" not in checks
    failed = [c for c in checks.values() if c["verdict"] == "fail"]
    assert not failed and rc == 0, failed

    rc = main([*argv, "--cgroup-driver", "systemd", "--kubelet-config", str(kubelet), "-o", "json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["agent cgroup driver"]["verdict"] == "fail", checks
    assert rc == 2


def test_a_file_the_kernel_would_not_have_fails_instead_of_being_created(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path
) -> None:
    """The memory controller is not enabled in the pod's v2 cgroup (its parent's subtree_control lacks it):
    memory.max does not exist there, so the write fails with a typed error naming the path."""
    tree = fake_cgroup_tree("v2")
    settings = _fake_setup(tree, tmp_path)
    tree.remove(POD_G)
    tree.path(POD_G).mkdir()
    tree._seed_v2(POD_G, ("cpu",))
    report = reconcile_once(settings)
    assert not report.ok
    failed = report.execution.failed
    assert failed is not None and failed.error_type == "CgroupNotFound"
    assert "memory.max" in (failed.error or "")
    assert not tree.path(f"{POD_G}/memory.max").exists()


def _fake_setup(tree: FakeCgroupTree, tmp_path: Path, root: str = "/") -> Settings:
    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"kind": "List", "items": _pods()}))
    base = CgroupName(tuple(p for p in root.split("/") if p))
    for name in ("kubepods/burstable", "kubepods/besteffort", POD_G, POD_B):
        tree.create(CgroupName((*base.parts, *name.split("/"))))
    return from_mapping(
        {
            "cgroupfs": str(tree.root),
            "cgroupRoot": root,
            "pods": str(f),
            "allocatable": {"cpu": "4", "memory": "8Gi", "hugepages-2Mi": "64Mi"},
            "qosReserved": {"memory": "100%"},
            "hugepageSizes": ["2Mi", "1Gi"],
        }
    )


def test_under_a_custom_cgroup_root(fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path) -> None:
    tree = fake_cgroup_tree("v2")
    settings = _fake_setup(tree, tmp_path, root="/k8s/nodes")
    assert reconcile_once(settings).ok
    assert tree.read("k8s/nodes/kubepods/burstable/cpu.weight") == "10"


def test_a_missing_pod_cgroup_means_not_yet(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path
) -> None:
    tree = fake_cgroup_tree("hybrid")
    settings = _fake_setup(tree, tmp_path)
    tree.remove(f"cpu/{POD_B}")
    tree.remove(f"memory/{POD_B}")
    tree.remove(f"unified/{POD_B}")
    report = reconcile_once(settings)
    assert report.ok, report.to_json()
    assert report.waiting == ("default/b",)
    assert not report.errors


@pytest.mark.parametrize("tier", ["besteffort", "burstable"])
def test_a_missing_qos_tier_waits_and_everything_else_is_applied(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, tier: str
) -> None:
    """A tier the kubelet has not created yet is "not yet" for that tier alone: the pods' memory and CPU
    values (the CPU phase runs after the memory phase) are still written, the tier waits with a warning.
    (Removing burstable removes the Burstable pod below it too, which then waits as well.)"""
    tree = fake_cgroup_tree("v1")
    settings = _fake_setup(tree, tmp_path)
    for mount in ("cpu", "cpuacct", "memory"):
        if tree.path(f"{mount}/kubepods/{tier}").exists():
            tree.remove(f"{mount}/kubepods/{tier}")
    report = reconcile_once(settings)
    assert report.ok, report.to_json()
    assert tree.read(f"cpu/{POD_G}/cpu.cfs_quota_us") == "100000"  # the Guaranteed pod's CPU limit (1 core)
    assert tree.read(f"memory/{POD_G}/memory.limit_in_bytes") == str(256 * MI)
    assert any(f"kubepods/{tier}" in w.message and "does not exist yet" in w.message for w in report.warnings), report.warnings
    if tier == "besteffort":
        assert tree.read(f"cpu/{POD_B}/cpu.cfs_quota_us") == "50000"
        assert tree.read("cpu/kubepods/burstable/cpu.shares") == str(250 * 1024 // 1000)
    else:
        assert report.waiting == ("default/b",)
    assert reconcile_once(settings).ok  # and again: still waiting, nothing fails


def test_hugetlb_not_enabled_is_a_warning_and_everything_else_is_applied(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path
) -> None:
    """A hybrid node whose unified hierarchy has no hugetlb controller in the pods' cgroups (as this
    machine's realk8s node): the hugetlb limits are left alone with one warning per cgroup, the CPU and
    memory values of every pod are written, the pass is ok."""
    tree = fake_cgroup_tree("hybrid")
    settings = _fake_setup(tree, tmp_path)
    for name in ("kubepods", "kubepods/burstable", "kubepods/besteffort", POD_G, POD_B):
        for f in tree.path(f"unified/{name}").glob("hugetlb.*"):
            f.unlink()
    report = reconcile_once(settings)
    assert report.ok, report.to_json()
    assert any("hugetlb is not enabled" in w.message for w in report.warnings), report.warnings
    assert tree.read(f"cpu/{POD_G}/cpu.cfs_quota_us") == "100000"
    assert tree.read(f"memory/{POD_G}/memory.limit_in_bytes") == str(256 * MI)
    assert tree.read(f"cpu/{POD_B}/cpu.cfs_quota_us") == "50000"
    assert not list(tree.path(f"unified/{POD_G}").glob("hugetlb.*"))  # nothing created
