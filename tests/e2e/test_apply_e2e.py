"""`kube-cgroup-agent apply --cri-endpoint` against the real containerd: running containers (and their pod
cgroups) are resized to the values the kubelet would compute, read back from the kernel; seed 000's
single-container cases; memory below real usage refused; no runtime means no write at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.commands.main import main
from agent.core.compute import ComputeConfig, compute_pod
from agent.pods.parse import parse_pod
from tests.e2e.conftest import E2EEnv, Kernel, Pod, PodRunner, resources

pytestmark = pytest.mark.e2e
MiB = 1 << 20


def _manifest(pod: Pod, containers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": "e2e", "uid": pod.uid},
        "spec": {"containers": [{"name": n, "resources": r} for n, r in containers.items()]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": n, "containerID": f"containerd://{pod.containers[n]}", "state": {"running": {}}}
                for n in containers
            ],
        },
    }


def _start(pods: PodRunner, containers: dict[str, dict[str, Any]], qos: str) -> Pod:
    """Start a pod the way the kubelet would: each container with the values computed for the manifest."""
    probe = parse_pod(
        {
            "metadata": {"name": "probe", "uid": "probe"},
            "spec": {"containers": [{"name": n, "resources": r} for n, r in containers.items()]},
        }
    )
    comp = compute_pod(probe, ComputeConfig())
    start = {
        c.container.name: resources(
            period=c.values.cpu_period,
            quota=c.values.cpu_quota,
            shares=c.values.cpu_shares,
            memory=max(c.values.memory_limit, 0),
        )
        for c in comp.containers
    }
    return pods.run(start, qos=qos)


def _apply(
    env: E2EEnv, tmp_path: Path, manifests: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any]]:
    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"kind": "List", "items": manifests}))
    capsys.readouterr()
    rc = main(
        [
            "apply",
            "--pods",
            str(f),
            "--cgroup-root",
            env.cgroup_root,
            "--cri-endpoint",
            env.endpoint,
            "--hugepage-sizes",
            "",
            "--create-qos-cgroups",  # a bare node: no kubelet made the tiers
            "-o",
            "json",
        ]
    )
    return rc, json.loads(capsys.readouterr().out)


def _expect(kernel: Kernel, pod: Pod, manifest: dict[str, Any]) -> None:
    """The kernel holds what the kubelet computes for `manifest`, for every container and the pod."""
    comp = compute_pod(parse_pod(manifest), ComputeConfig())
    for c in comp.containers:
        cg = pod.container_cgroup(c.container.name)
        v = c.values
        assert kernel.cpu(cg) == (v.cpu_period, v.cpu_quota, v.cpu_shares), c.container.name
        if v.memory_limit > 0:
            assert kernel.memory_limit(cg) == v.memory_limit // 4096 * 4096, c.container.name
    pv = comp.values
    assert kernel.read_int("cpu", pod.cgroup_parent, "cpu.shares") == pv.cpu_shares
    if pv.cpu_quota is not None:
        assert kernel.read_int("cpu", pod.cgroup_parent, "cpu.cfs_quota_us") == pv.cpu_quota
    if pv.memory_limit is not None:
        assert kernel.memory_limit(pod.cgroup_parent) == pv.memory_limit // 4096 * 4096


def g(cpu: str, mem: str) -> dict[str, Any]:
    return {"limits": {"cpu": cpu, "memory": mem}}


def test_apply_resizes_running_containers_and_converges(
    e2e_env: E2EEnv, pods: PodRunner, kernel: Kernel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {
        "app": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
        "side": {"requests": {"cpu": "50m", "memory": "16Mi"}, "limits": {"cpu": "200m", "memory": "64Mi"}},
    }
    pod = _start(pods, spec, "burstable")
    rc, out = _apply(e2e_env, tmp_path, [_manifest(pod, spec)], capsys)
    assert rc == 0, (out["errors"], [s for s in out["steps"] if s["status"] != "done"])
    _expect(kernel, pod, _manifest(pod, spec))  # the pod cgroup got its values

    spec2 = {
        "app": {"requests": {"cpu": "300m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}},
        "side": {"requests": {"cpu": "50m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}},
    }
    rc, out = _apply(e2e_env, tmp_path, [_manifest(pod, spec2)], capsys)
    assert rc == 0, out
    assert out["writes"] > 0
    _expect(kernel, pod, _manifest(pod, spec2))
    kinds = [s["kind"] for s in out["steps"]]
    assert "container" in kinds and "cgroup" in kinds

    rc, out = _apply(e2e_env, tmp_path, [_manifest(pod, spec2)], capsys)
    assert (rc, out["writes"], out["steps"]) == (0, 0, [])


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (g("500m", "128Mi"), g("1", "128Mi")),  # CPU up
        (g("1", "128Mi"), g("250m", "128Mi")),  # CPU down
        (g("500m", "128Mi"), g("500m", "256Mi")),  # memory up
        (g("500m", "256Mi"), g("500m", "96Mi")),  # memory down
        (g("500m", "256Mi"), g("1", "96Mi")),  # CPU up, memory down
        (g("1", "96Mi"), g("250m", "256Mi")),  # CPU down, memory up
    ],
    ids=["cpu-up", "cpu-down", "memory-up", "memory-down", "cpu-up-memory-down", "cpu-down-memory-up"],
)
def test_seed_000_guaranteed_single_container(
    e2e_env: E2EEnv,
    pods: PodRunner,
    kernel: Kernel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    before: dict[str, Any],
    after: dict[str, Any],
) -> None:
    pod = _start(pods, {"c": before}, "guaranteed")
    assert _apply(e2e_env, tmp_path, [_manifest(pod, {"c": before})], capsys)[0] == 0
    rc, out = _apply(e2e_env, tmp_path, [_manifest(pod, {"c": after})], capsys)
    assert rc == 0, out
    _expect(kernel, pod, _manifest(pod, {"c": after}))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"requests": {"cpu": "100m", "memory": "32Mi"}}, {"requests": {"cpu": "400m", "memory": "64Mi"}}),
        (
            {"requests": {"cpu": "100m"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
            {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m", "memory": "192Mi"}},
        ),
        (
            {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}},
            {"requests": {"cpu": "250m", "memory": "48Mi"}, "limits": {"cpu": "1", "memory": "96Mi"}},
        ),
    ],
    ids=["requests-only", "limits-only", "requests-and-limits"],
)
def test_seed_000_burstable_single_container(
    e2e_env: E2EEnv,
    pods: PodRunner,
    kernel: Kernel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    before: dict[str, Any],
    after: dict[str, Any],
) -> None:
    pod = _start(pods, {"c": before}, "burstable")
    assert _apply(e2e_env, tmp_path, [_manifest(pod, {"c": before})], capsys)[0] == 0
    rc, out = _apply(e2e_env, tmp_path, [_manifest(pod, {"c": after})], capsys)
    assert rc == 0, out
    _expect(kernel, pod, _manifest(pod, {"c": after}))


def test_memory_below_real_usage_is_refused_and_the_old_value_kept(
    e2e_env: E2EEnv, pods: PodRunner, kernel: Kernel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {"c": g("500m", "128Mi")}
    pod = _start(pods, spec, "guaranteed")
    assert _apply(e2e_env, tmp_path, [_manifest(pod, spec)], capsys)[0] == 0
    r = pods.exec(
        pod, "c", "/bin/sh", "-c", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=48 2>/dev/null; echo done"
    )
    assert b"done" in r.stdout
    rc, out = _apply(e2e_env, tmp_path, [_manifest(pod, {"c": g("500m", "16Mi")})], capsys)
    assert rc == 2
    assert any("below current usage" in e["message"] for e in out["errors"]), out
    assert kernel.memory_limit(pod.container_cgroup("c")) == 128 * MiB
    assert kernel.memory_limit(pod.cgroup_parent) == 128 * MiB


def test_runtime_not_running_is_a_clear_error_and_nothing_is_written(
    e2e_env: E2EEnv, pods: PodRunner, kernel: Kernel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {"c": g("500m", "128Mi")}
    pod = _start(pods, spec, "guaranteed")
    before = kernel.read("cpu", pod.cgroup_parent, "cpu.cfs_quota_us")
    f = tmp_path / "pods.json"
    f.write_text(json.dumps(_manifest(pod, spec)))
    dead = f"unix://{tmp_path}/no-runtime.sock"
    capsys.readouterr()
    rc = main(
        [
            "apply",
            "--pods",
            str(f),
            "--cgroup-root",
            e2e_env.cgroup_root,
            "--cri-endpoint",
            dead,
            "--hugepage-sizes",
            "",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert "no-runtime.sock" in err and "Traceback" not in err
    assert kernel.read("cpu", pod.cgroup_parent, "cpu.cfs_quota_us") == before
