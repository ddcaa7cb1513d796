"""The invariant a resize node holds after every single write, from both sides (the agent's cgroup writes
and the runtime's container writes): each child within its parent in CPU (quota/period) and memory, and —
for pods without a pod-level limit — the containers' limits summing within the pod's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from cgroupfs.convert import V1_UNLIMITED_READBACK

if TYPE_CHECKING:
    from tests.resize.harness import ResizeNode


def quota_ratio(quota: str, period: str) -> float:
    """A CFS quota as a share of cores; inf for no quota."""
    q = int(quota)
    return float("inf") if q < 0 else q / int(period)


def memory_limit(text: str) -> float:
    """A v1 memory limit in bytes; inf for unlimited (as read back) or negative."""
    v = int(text)
    return float("inf") if v < 0 or v >= V1_UNLIMITED_READBACK else float(v)


def violations(node: ResizeNode, pods: Iterable[str] | None = None) -> list[str]:
    """Breaches of the invariant on every pod (or on `pods`), as the tree is now."""
    out: list[str] = []
    chosen = list(node.pods.items()) if pods is None else [(p, node.pods[p]) for p in pods]
    for pod, info in chosen:
        pq = node.read(f"cpu/{info.pod_dir}/cpu.cfs_quota_us")
        pp = node.read(f"cpu/{info.pod_dir}/cpu.cfs_period_us")
        pm = memory_limit(node.read(f"memory/{info.pod_dir}/memory.limit_in_bytes"))
        parent = info.pod_dir.rsplit("/", 1)[0]
        tm = memory_limit(node.read(f"memory/{parent}/memory.limit_in_bytes"))
        if pm != float("inf") and pm > tm:
            out.append(f"{pod}: pod memory {pm} above its tier's {tm}")
        pod_level = node.view(pod).pod_limits
        cpu_sum = mem_sum = 0.0
        for name, cid in info.containers.items():
            base = f"{info.pod_dir}/{cid}"
            if not node.tree.path(f"cpu/{base}").exists():
                continue
            cr = quota_ratio(
                node.read(f"cpu/{base}/cpu.cfs_quota_us"), node.read(f"cpu/{base}/cpu.cfs_period_us")
            )
            cm = memory_limit(node.read(f"memory/{base}/memory.limit_in_bytes"))
            if cr != float("inf") and cr > quota_ratio(pq, pp) + 1e-9:
                out.append(f"{pod}/{name}: cpu {cr} above the pod's {quota_ratio(pq, pp)}")
            if cm != float("inf") and cm > pm:
                out.append(f"{pod}/{name}: memory {cm} above the pod's {pm}")
            cpu_sum += cr
            mem_sum += cm
        if pod_level is None and cpu_sum != float("inf") and cpu_sum > quota_ratio(pq, pp) + 1e-9:
            out.append(f"{pod}: containers' cpu sum {cpu_sum} above the pod's {quota_ratio(pq, pp)}")
        if pod_level is None and mem_sum != float("inf") and mem_sum > pm:
            out.append(f"{pod}: containers' memory sum {mem_sum} above the pod's {pm}")
    return out
