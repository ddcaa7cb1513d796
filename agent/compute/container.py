"""Container-level values, as the kubelet sends them over CRI (kuberuntime_container_linux.go)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.compute.aggregate import pod_level_resources_set
from agent.compute.config import ComputeConfig
from agent.compute.cpu import milli_cpu_to_quota, milli_cpu_to_shares
from agent.model import UNLIMITED, ContainerValues, ContainerView, HugepageLimit, PodView


@dataclass(frozen=True, slots=True)
class ContainerComputation:
    container: ContainerView
    values: ContainerValues
    cpu_limit_from_pod: bool  # the container has no CPU limit of its own and gets the pod-level one
    memory_limit_from_pod: bool


def compute_container(pod: PodView, c: ContainerView, cfg: ComputeConfig) -> ContainerComputation:
    cpu_request = c.requests.cpu_milli
    cpu_limit = c.limits.cpu_milli
    mem_limit = c.limits.memory
    cpu_from_pod = mem_from_pod = False
    if pod_level_resources_set(pod) and pod.pod_limits is not None:
        # getCPULimit / getMemoryLimit: a container without its own limit gets the pod-level limit.
        if not cpu_limit and pod.pod_limits.cpu_milli:
            cpu_limit, cpu_from_pod = pod.pod_limits.cpu_milli, True
        if not mem_limit and pod.pod_limits.memory:
            mem_limit, mem_from_pod = pod.pod_limits.memory, True
    if cpu_request is None and cpu_limit is not None:
        shares = milli_cpu_to_shares(cpu_limit)  # the create path; see README "where the kubelet disagrees"
    else:
        shares = milli_cpu_to_shares(cpu_request or 0)
    period = cfg.cpu_cfs_quota_period_us
    quota = milli_cpu_to_quota(cpu_limit or 0, period) if cfg.cpu_cfs_quota else 0
    hugepages = {size: 0 for size in cfg.hugepage_sizes}
    hugepages.update(c.limits.hugepages)
    values = ContainerValues(
        cpu_shares=shares,
        cpu_quota=quota or UNLIMITED,
        cpu_period=period,
        memory_limit=mem_limit or UNLIMITED,
        hugepage_limits=tuple(HugepageLimit(s, v) for s, v in sorted(hugepages.items())),
    )
    return ContainerComputation(c, values, cpu_from_pod, mem_from_pod)
