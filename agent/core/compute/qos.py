"""QoS class, as the kubelet computes it (pkg/apis/core/v1/helper/qos)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.core.compute.aggregate import all_containers, pod_level_resources_set
from agent.core.model import PodView, QOSClass, Resources


@dataclass(frozen=True, slots=True)
class QOSDecision:
    """A pod's QoS class and why."""

    qos: QOSClass
    reason: str


def _requirements_qos(requests: Resources, limits: Resources) -> QOSClass:
    """resourceQOS: one set of requirements (a container, or the pod-level resources)."""
    if requests.is_empty() and limits.is_empty():
        return QOSClass.BEST_EFFORT
    qos: QOSClass | None = None
    for req, lim in ((requests.cpu_milli, limits.cpu_milli), (requests.memory, limits.memory)):
        if (req or 0) != (lim or 0):
            return QOSClass.BURSTABLE
        best_effort = not req and not lim
        if qos is None:
            qos = QOSClass.BEST_EFFORT if best_effort else QOSClass.GUARANTEED
        elif best_effort != (qos is QOSClass.BEST_EFFORT):
            return QOSClass.BURSTABLE
    assert qos is not None
    return qos


def compute_qos(pod: PodView) -> QOSDecision:
    """ComputePodQOS: pod-level resources decide when set; otherwise every (init) container must agree."""
    if pod_level_resources_set(pod):
        qos = _requirements_qos(pod.pod_requests or Resources(), pod.pod_limits or Resources())
        return QOSDecision(qos, f"pod-level resources are set: {_why(qos, 'the pod-level values')}")
    decided: QOSClass | None = None
    for c in all_containers(pod):
        cq = _requirements_qos(c.requests, c.limits)
        if cq is QOSClass.BURSTABLE:
            return QOSDecision(cq, f"container {c.name!r} is Burstable ({_why(cq, 'its values')})")
        if decided is None:
            decided = cq
        elif decided is not cq:
            return QOSDecision(
                QOSClass.BURSTABLE,
                "some containers are Guaranteed and others BestEffort, so the pod is Burstable",
            )
    if decided is None or decided is QOSClass.BEST_EFFORT:
        return QOSDecision(QOSClass.BEST_EFFORT, "no container sets a CPU or memory request or limit")
    return QOSDecision(decided, "every container has CPU and memory requests equal to its limits")


def _why(qos: QOSClass, what: str) -> str:
    if qos is QOSClass.GUARANTEED:
        return f"CPU and memory requests equal limits in {what}"
    if qos is QOSClass.BEST_EFFORT:
        return f"no CPU or memory request or limit in {what}"
    return f"a CPU or memory request differs from its limit in {what}"
