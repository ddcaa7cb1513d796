"""The knobs the pure computation needs, passed in explicitly (no global feature gates)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.core.compute.cpu import QUOTA_PERIOD_US
from agent.core.model import CgroupName, Resources


@dataclass(frozen=True, slots=True)
class ComputeConfig:
    """What the computation takes from the kubelet's configuration."""

    cgroup_root: CgroupName = field(default_factory=lambda: CgroupName(()))
    cpu_cfs_quota: bool = True  # kubelet cpuCFSQuota: enforce CPU limits
    cpu_cfs_quota_period_us: int = QUOTA_PERIOD_US  # kubelet cpuCFSQuotaPeriod
    hugepage_sizes: tuple[int, ...] = ()  # the node's huge page sizes, in bytes
    allocatable: Resources | None = None  # what the kubepods tree is sized with (capacity - reserved)
    # The kubelet sizes kubepods with its capacity instead when enforceNodeAllocatable lacks "pods"; qos-reserved
    # limits still come from allocatable (createNodeAllocatableCgroups vs the QoS manager).
    kubepods_size: Resources | None = None
    qos_reserved_memory_percent: int | None = None  # kubelet qosReserved memory=<p>%
    pod_memory_reservation: bool = True  # soft limit / memory.low from a pod-level memory request
