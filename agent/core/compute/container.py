"""Container-level values, as the kubelet sends them over CRI (kuberuntime_container_linux.go)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from agent.core.compute.aggregate import pod_level_resources_set
from agent.core.compute.config import ComputeConfig
from agent.core.compute.cpu import milli_cpu_to_quota, milli_cpu_to_shares
from agent.core.model import UNLIMITED, ContainerValues, ContainerView, HugepageLimit, PodView


@dataclass(frozen=True, slots=True)
class ContainerComputation:
    """A running container's CRI values, and whether a limit came from the pod level."""

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
        shares = milli_cpu_to_shares(cpu_limit)  # the create path; see docs/kubelet-differences.md
    else:
        shares = milli_cpu_to_shares(cpu_request or 0)
    period = cfg.cpu_cfs_quota_period_us
    quota = milli_cpu_to_quota(cpu_limit or 0, period) if cfg.cpu_cfs_quota else 0
    values = ContainerValues(
        cpu_shares=shares,
        cpu_quota=quota or UNLIMITED,
        cpu_period=period,
        memory_limit=mem_limit or UNLIMITED,
        hugepage_limits=hugepage_limits(cfg.hugepage_sizes, tuple(c.limits.hugepages.items())),
    )
    return ContainerComputation(c, values, cpu_from_pod, mem_from_pod)


@lru_cache(maxsize=256)
def hugepage_limits(sizes: tuple[int, ...], limits: tuple[tuple[int, int], ...]) -> tuple[HugepageLimit, ...]:
    """Every page size of the node, limited to 0 where the container sets no limit, in size order.

    Pure and keyed by immutable values: a node's containers share a handful of results (most have no
    hugepages), so they are made once and shared."""
    hugepages = dict.fromkeys(sizes, 0)
    hugepages.update(limits)
    return tuple(HugepageLimit(s, v) for s, v in sorted(hugepages.items()))
