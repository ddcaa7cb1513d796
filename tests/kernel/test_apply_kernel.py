"""`apply` on this machine's real cgroup v1 hierarchies, under a private, uniquely named cgroup root
(the `kernel_root` fixture removes it afterwards, even on failure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent import pipeline
from agent.commands.main import main
from agent.config.settings import Settings, from_mapping
from agent.core.diff import not_yet_created
from agent.core.plan import build_plan
from agent.pipeline.apply import reconcile_once
from agent.pipeline.execute import execute, file_runner
from cgroupfs import layout
from cgroupfs.errors import MemoryBelowUsage, QuotaRefused
from tests.support.kernel import KernelRoot
from tests.unit.podbuild import ctr, pod

pytestmark = pytest.mark.kernel

UID_G = "11111111-0000-4000-8000-00000000000a"
UID_B = "22222222-0000-4000-8000-00000000000b"
UID_E = "33333333-0000-4000-8000-00000000000c"
MI = 1024**2


def _pods(g_memory: str = "64Mi", b_cpu: str = "500m") -> list[dict[str, Any]]:
    return [
        pod("g", [ctr("app", lim={"cpu": "250m", "memory": g_memory})], uid=UID_G),
        pod(
            "b",
            [ctr("app", req={"cpu": "100m", "memory": "32Mi"}, lim={"cpu": b_cpu, "memory": "128Mi"})],
            uid=UID_B,
        ),
        pod("e", [{"name": "app"}], uid=UID_E),
    ]


def _write_pods(path: Path, pods: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"kind": "List", "items": pods}))


def _kubelet_made_pod_cgroups(root: KernelRoot) -> None:
    for h in ("cpu", "memory"):
        root.mkdirs(h, "kubepods", "burstable", f"pod{UID_B}")
        root.mkdirs(h, "kubepods", "besteffort", f"pod{UID_E}")
        root.files.mkdir(root.path(h, "kubepods", f"pod{UID_G}"))


def _settings(root: KernelRoot, pods_file: Path, **extra: Any) -> Settings:
    return from_mapping(
        {
            "cgroupfs": "/sys/fs/cgroup",
            "cgroupRoot": f"/{root.name}",
            "pods": str(pods_file),
            "allocatable": {"cpu": "2", "memory": "1Gi"},
            "qosReserved": {"memory": "50%"},
            "hugepageSizes": [],
            **extra,
        }
    )


def _kernel(root: KernelRoot, h: str, *below: str) -> str:
    text = root.files.read(root.path(h, *below))
    assert text is not None, below
    return text.strip()


def test_apply_sets_the_values_the_kernel_reads_back_and_converges(
    kernel_root: KernelRoot, tmp_path: Path
) -> None:
    root = kernel_root
    _kubelet_made_pod_cgroups(root)
    pods_file = tmp_path / "pods.json"
    _write_pods(pods_file, _pods())
    settings = _settings(root, pods_file)

    first = reconcile_once(settings)
    assert first.ok, first.to_json()
    assert first.execution.writes == len(first.plan.steps) > 0

    # the kernel holds exactly the kubelet's values
    assert _kernel(root, "cpu", "kubepods", "cpu.shares") == "2048"  # allocatable 2 CPUs
    assert _kernel(root, "memory", "kubepods", "memory.limit_in_bytes") == str(1024 * MI)
    assert _kernel(root, "cpu", "kubepods", "burstable", "cpu.shares") == "102"  # b requests 100m
    assert _kernel(root, "cpu", "kubepods", "besteffort", "cpu.shares") == "2"
    # qos-reserved 50%: burstable = 1Gi - 64Mi/2; besteffort = that - 32Mi/2
    assert _kernel(root, "memory", "kubepods", "burstable", "memory.limit_in_bytes") == str(
        1024 * MI - 32 * MI
    )
    assert _kernel(root, "memory", "kubepods", "besteffort", "memory.limit_in_bytes") == str(
        1024 * MI - 48 * MI
    )
    assert _kernel(root, "cpu", "kubepods", f"pod{UID_G}", "cpu.cfs_quota_us") == "25000"
    assert _kernel(root, "cpu", "kubepods", f"pod{UID_G}", "cpu.shares") == "256"
    assert _kernel(root, "memory", "kubepods", f"pod{UID_G}", "memory.limit_in_bytes") == str(64 * MI)
    assert _kernel(root, "cpu", "kubepods", "burstable", f"pod{UID_B}", "cpu.cfs_quota_us") == "50000"
    assert _kernel(root, "cpu", "kubepods", "besteffort", f"pod{UID_E}", "cpu.shares") == "2"

    # a second apply writes nothing, and diff agrees that nothing differs
    second = reconcile_once(settings)
    assert second.ok and second.execution.writes == 0 and second.plan.steps == ()
    rc = main(
        [
            "diff",
            "--pods",
            str(pods_file),
            "--cgroup-root",
            f"/{root.name}",
            "--allocatable",
            "cpu=2,memory=1Gi",
            "--qos-reserved",
            "memory=50%",
            "--hugepage-sizes",
            "",
        ]
    )
    assert rc == 0


def test_memory_limit_below_real_usage_is_refused_and_nothing_of_it_applied(
    kernel_root: KernelRoot, tmp_path: Path
) -> None:
    root = kernel_root
    _kubelet_made_pod_cgroups(root)
    pods_file = tmp_path / "pods.json"
    _write_pods(pods_file, _pods())
    settings = _settings(root, pods_file)
    assert reconcile_once(settings).ok
    pod_mem = root.path("memory", "kubepods", f"pod{UID_G}")
    root.start_hog(pod_mem, 40)  # 40 MiB really in use by a process in the pod cgroup

    # the pod is resized to 16Mi (below usage) while another pod's CPU limit grows
    _write_pods(pods_file, _pods(g_memory="16Mi", b_cpu="800m"))
    report = reconcile_once(settings)
    assert not report.ok
    messages = [e.message for e in report.errors]
    assert any("memory limit 16777216 is below current usage" in m for m in messages), messages
    assert _kernel(root, "memory", "kubepods", f"pod{UID_G}", "memory.limit_in_bytes") == str(64 * MI)
    # the other pod's change still applied
    assert _kernel(root, "cpu", "kubepods", "burstable", f"pod{UID_B}", "cpu.cfs_quota_us") == "80000"


def test_the_kernel_refusal_itself_is_a_typed_error_naming_usage(
    kernel_root: KernelRoot, tmp_path: Path
) -> None:
    """Without the usage guard (a race: usage rose after it was read), the kernel's EBUSY becomes a typed
    error that names the path, the value and the usage, and the executor stops there."""
    root = kernel_root
    _kubelet_made_pod_cgroups(root)
    pods_file = tmp_path / "pods.json"
    _write_pods(pods_file, _pods())
    settings = _settings(root, pods_file)
    assert reconcile_once(settings).ok
    root.start_hog(root.path("memory", "kubepods", f"pod{UID_G}"), 40)
    _write_pods(pods_file, _pods(g_memory="16Mi", b_cpu="800m"))
    env = pipeline.environment(settings)
    node, _ = not_yet_created(pipeline.run(settings, env=env).diff)
    plan = build_plan(node, extra={})  # no usage read: the guard cannot see it
    result = execute(plan, file_runner(env.files), None)
    failed = result.failed
    assert failed is not None and failed.error_type == MemoryBelowUsage.__name__
    assert "16777216" in (failed.error or "") and "usage" in (failed.error or "")
    assert result.skipped > 0  # the CPU phase after it did not run
    assert _kernel(root, "memory", "kubepods", f"pod{UID_G}", "memory.limit_in_bytes") == str(64 * MI)
    assert _kernel(root, "cpu", "kubepods", "burstable", f"pod{UID_B}", "cpu.cfs_quota_us") == "50000"


def test_a_parent_quota_is_never_written_below_a_childs(kernel_root: KernelRoot, tmp_path: Path) -> None:
    """Two containers of 500m shrink to 200m each: the pod quota (100000 -> 40000) may only be lowered
    after the containers. The kernel refuses the other order, which the plan never takes."""
    root = kernel_root
    cids = ["a" * 64, "b" * 64]
    two = pod(
        "two",
        [ctr("c1", lim={"cpu": "500m", "memory": "64Mi"}), ctr("c2", lim={"cpu": "500m", "memory": "64Mi"})],
        uid=UID_G,
    )
    two["status"] = {
        "containerStatuses": [
            {"name": n, "containerID": f"containerd://{c}", "state": {"running": {}}}
            for n, c in zip(("c1", "c2"), cids, strict=True)
        ]
    }
    pods_file = tmp_path / "pods.json"
    _write_pods(pods_file, [two])
    settings = _settings(root, pods_file, createQOSCgroups=True)
    for h in ("cpu", "memory"):
        root.files.mkdir(root.path(h, "kubepods"))
        root.files.mkdir(root.path(h, "kubepods", f"pod{UID_G}"))
        for c in cids:
            root.files.mkdir(root.path(h, "kubepods", f"pod{UID_G}", c))
    # the runtime's container values, then the pod's (all at 500m each)
    for c in cids:
        root.files.write(root.path("cpu", "kubepods", f"pod{UID_G}", c, "cpu.cfs_quota_us"), "50000")
    first = reconcile_once(settings)
    assert first.ok, first.to_json()
    assert _kernel(root, "cpu", "kubepods", f"pod{UID_G}", "cpu.cfs_quota_us") == "100000"

    # the kernel's rule: a parent below a child is refused
    with pytest.raises(QuotaRefused):
        root.files.write(root.path("cpu", "kubepods", f"pod{UID_G}", "cpu.cfs_quota_us"), "40000")

    # resize both containers down; a container update is mirrored into the kernel as the runtime would
    two["spec"]["containers"] = [
        ctr("c1", lim={"cpu": "200m", "memory": "64Mi"}),
        ctr("c2", lim={"cpu": "200m", "memory": "64Mi"}),
    ]
    _write_pods(pods_file, [two])
    env = pipeline.environment(settings)
    node, _ = not_yet_created(pipeline.run(settings, env=env).diff)
    plan = build_plan(node, {})
    order = [
        s.kind + ":" + (s.container if s.kind == "container" else s.setting.filename) for s in plan.steps
    ]  # type: ignore[union-attr]
    assert order.index("cgroup:cpu.cfs_quota_us") > order.index("container:c1")
    assert order.index("cgroup:cpu.cfs_quota_us") > order.index("container:c2")

    class KernelRuntime:
        """Stands in for the runtime: writes the container's own cgroup like runc (period, then quota)."""

        def update_container_resources(self, container_id: str, values: Any) -> None:
            base = root.path("cpu", "kubepods", f"pod{UID_G}", container_id)
            root.files.write(f"{base}/{layout.CPU_PERIOD}", str(values.cpu_period))
            root.files.write(f"{base}/{layout.CPU_QUOTA}", str(values.cpu_quota))

    result = execute(plan, file_runner(env.files), KernelRuntime())  # type: ignore[arg-type]
    assert result.failed is None, result.failed
    assert _kernel(root, "cpu", "kubepods", f"pod{UID_G}", "cpu.cfs_quota_us") == "40000"
    for c in cids:
        assert _kernel(root, "cpu", "kubepods", f"pod{UID_G}", c, "cpu.cfs_quota_us") == "20000"
