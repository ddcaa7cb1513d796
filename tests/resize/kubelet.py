"""What the kubelet would have written: every pod and container file for a pod's current spec, and the
files that differ from it (empty once the agent has applied the spec)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from agent.core.compute import compute_pod
from agent.core.compute.container import compute_container
from cgroupfs.convert import V1_UNLIMITED_READBACK

if TYPE_CHECKING:
    from tests.resize.harness import ResizeNode


def kubelet_files(node: ResizeNode, pod: str) -> dict[str, str]:
    """Every pod and container file as the kubelet would have it for the pod's current spec (path: text)."""
    view = node.view(pod)
    cfg = node.settings.compute_config(())
    v = compute_pod(view, cfg).values
    wanted = {
        node.pod_path(pod, "cpu.shares"): str(v.cpu_shares),
        node.pod_path(pod, "cpu.cfs_quota_us"): str(v.cpu_quota if v.cpu_quota is not None else -1),
    }
    if v.memory_limit is not None and v.memory_limit > 0:
        wanted[node.pod_path(pod, "memory.limit_in_bytes")] = str(v.memory_limit // 4096 * 4096)
    for c in view.containers:
        cv = compute_container(view, c, cfg).values
        wanted[node.container_path(pod, c.name, "cpu.shares")] = str(cv.cpu_shares)
        wanted[node.container_path(pod, c.name, "cpu.cfs_quota_us")] = str(cv.cpu_quota)
        memory = cv.memory_limit // 4096 * 4096 if cv.memory_limit > 0 else V1_UNLIMITED_READBACK
        wanted[node.container_path(pod, c.name, "memory.limit_in_bytes")] = str(memory)
    return wanted


def file_mismatches(node: ResizeNode, wanted: Mapping[str, str]) -> list[str]:
    """The files that do not hold their wanted text, as `path: found != wanted`."""
    found = {path: node.read(path) for path in wanted}
    return [f"{path}: {found[path]} != {want}" for path, want in wanted.items() if found[path] != want]


def kubelet_mismatches(node: ResizeNode, pod: str) -> list[str]:
    """The pod's files that differ from what the kubelet would write for its current spec; empty once
    the spec is applied."""
    return file_mismatches(node, kubelet_files(node, pod))
