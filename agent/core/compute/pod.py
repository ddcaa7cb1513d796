"""Pod cgroup values: the kubelet's ResourceConfigForPod, plus pod-level validation (KEP-2837)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from agent.core.compute.aggregate import (
    Aggregate,
    aggregate,
    limits_declared,
    pod_level_resources_set,
    pod_limits,
    pod_requests,
)
from agent.core.compute.config import ComputeConfig
from agent.core.compute.container import ContainerComputation, compute_container
from agent.core.compute.cpu import MIN_SHARES, milli_cpu_to_quota, milli_cpu_to_shares
from agent.core.compute.qos import QOSDecision, compute_qos
from agent.core.model import (
    UNLIMITED,
    CgroupName,
    CgroupValues,
    ContainerKind,
    PodView,
    QOSClass,
    Resources,
)
from agent.infra.errors import PermanentError


class PodComputeError(PermanentError, ValueError):
    """A pod whose values cannot be computed (for instance a pod limit below its containers' requests)."""

    def __init__(self, pod: str, message: str) -> None:
        super().__init__(f"{pod}: {message}")
        self.pod = pod
        self.message = message


@dataclass(frozen=True, slots=True)
class PodComputation:
    """Everything derived for one pod, with the intermediate sums kept for `explain`."""

    pod: PodView
    qos: QOSDecision
    requests_aggregate: Aggregate
    limits_aggregate: Aggregate
    requests: Resources  # PodRequests, overhead included
    limits: Resources  # PodLimits, overhead on non-zero limits
    cpu_limits_declared: bool
    memory_limits_declared: bool
    cgroup: CgroupName
    values: CgroupValues
    containers: tuple[ContainerComputation, ...]
    warnings: tuple[str, ...]


def pod_cgroup_name(root: CgroupName, qos: QOSClass, uid: str) -> CgroupName:
    """kubepods/pod<uid> (Guaranteed), kubepods/burstable/pod<uid>, kubepods/besteffort/pod<uid>."""
    return _qos_cgroup(root, qos).child(f"pod{uid}")


@lru_cache(maxsize=16)
def _qos_cgroup(root: CgroupName, qos: QOSClass) -> CgroupName:
    """The parent of a QoS class's pods: one (immutable) name for all of them, built and checked once."""
    base = root.child("kubepods")
    if qos is not QOSClass.GUARANTEED:
        base = base.child(qos.value.lower())
    return base


def _fmt_mem(b: int) -> str:
    return f"{b} bytes"


def validate_pod_level(pod: PodView, requests_agg: Aggregate, limits_agg: Aggregate) -> tuple[str, ...]:
    """Refuse pod-level values the API would refuse; warn where seed 001 says to warn."""
    if not pod_level_resources_set(pod):
        return ()
    warnings: list[str] = []
    req_total = requests_agg.total
    plim = pod.pod_limits or Resources()
    preq = pod.pod_requests or Resources()
    for res, limit, request, agg in (
        ("cpu", plim.cpu_milli, preq.cpu_milli, req_total.cpu_milli),
        ("memory", plim.memory, preq.memory, req_total.memory),
    ):
        unit = "m" if res == "cpu" else " bytes"
        if limit is not None and agg is not None and agg > limit:
            raise PodComputeError(
                pod.key,
                f"pod-level {res} limit {limit}{unit} is below the sum of container requests {agg}{unit}",
            )
        if request is not None and agg is not None and agg > request:
            raise PodComputeError(
                pod.key,
                f"pod-level {res} request {request}{unit} is below the sum of container requests {agg}{unit}",
            )
        if limit is not None and request is not None and request > limit:
            raise PodComputeError(
                pod.key, f"pod-level {res} request {request}{unit} is above the pod-level limit {limit}{unit}"
            )
        for c in (*pod.init_containers, *pod.containers):
            own = c.limits.cpu_milli if res == "cpu" else c.limits.memory
            if limit is not None and own is not None and own > limit:
                raise PodComputeError(
                    pod.key,
                    f"container {c.name!r} {res} limit {own}{unit} is above the pod-level limit {limit}{unit}",
                )
    lim_running = limits_agg.running.memory
    all_have_memory_limit = all(c.limits.memory for c in pod.containers)
    if (
        plim.memory is not None
        and lim_running is not None
        and all_have_memory_limit
        and plim.memory < lim_running
    ):
        warnings.append(
            f"pod-level memory limit {plim.memory} bytes is below the sum of container memory limits "
            f"{lim_running} bytes: not every container can reach its own limit"
        )
    return tuple(warnings)


def compute_pod(pod: PodView, cfg: ComputeConfig) -> PodComputation:
    """ResourceConfigForPod over the (allocated) pod, and the container values under it."""
    req_agg = aggregate(pod, pick_limits=False)
    lim_agg = aggregate(pod, pick_limits=True)
    warnings = validate_pod_level(pod, req_agg, lim_agg)
    decision = compute_qos(pod)
    if pod.status_qos is not None and pod.status_qos is not decision.qos:
        warnings += (
            f"status.qosClass says {pod.status_qos.value} but the spec computes to {decision.qos.value}; "
            f"using {pod.status_qos.value} as the kubelet does",
        )
        decision = QOSDecision(
            pod.status_qos, f"status.qosClass is {pod.status_qos.value} (the kubelet trusts it)"
        )
    qos = decision.qos
    reqs = pod_requests(pod, containers=req_agg)
    limits = pod_limits(pod, containers=lim_agg)
    cpu_declared, mem_declared = limits_declared(pod)

    period = cfg.cpu_cfs_quota_period_us
    shares = milli_cpu_to_shares(reqs.cpu_milli or 0)
    quota = milli_cpu_to_quota(limits.cpu_milli or 0, period)
    if not cfg.cpu_cfs_quota:
        quota = UNLIMITED
    memory = limits.memory or 0

    hugetlb = {size: 0 for size in cfg.hugepage_sizes}  # "for each page size omitted, limit to 0"
    hugetlb.update(reqs.hugepages)

    reservation = None
    if cfg.pod_memory_reservation and pod.pod_requests is not None and pod.pod_requests.memory:
        reservation = reqs.memory

    if qos is QOSClass.GUARANTEED:
        values = CgroupValues(
            shares, quota or None, period if quota else None, memory or None, reservation, hugetlb
        )
    elif qos is QOSClass.BURSTABLE:
        values = CgroupValues(
            cpu_shares=shares,
            cpu_quota=(quota or None) if cpu_declared else None,
            cpu_period=period if cpu_declared and quota else None,
            memory_limit=(memory or None) if mem_declared else None,
            memory_reservation=reservation,
            hugetlb=hugetlb,
        )
    else:
        values = CgroupValues(cpu_shares=MIN_SHARES, hugetlb=hugetlb)

    running = [c for c in (*pod.init_containers, *pod.containers) if c.kind is not ContainerKind.INIT]
    containers = tuple(compute_container(pod, c, cfg) for c in running)
    return PodComputation(
        pod=pod,
        qos=decision,
        requests_aggregate=req_agg,
        limits_aggregate=lim_agg,
        requests=reqs,
        limits=limits,
        cpu_limits_declared=cpu_declared,
        memory_limits_declared=mem_declared,
        cgroup=pod_cgroup_name(cfg.cgroup_root, qos, pod.uid),
        values=values,
        containers=containers,
        warnings=warnings,
    )
