"""The pod-level decision (agent.vpa.podlevel_decide) in the VPA source's terms (pure).

Why one more ContainerTarget: everything the source keeps per pod — applied, pending, sent, blocked, the
retry rule, the state file across restarts — holds a tuple of ContainerTargets keyed by container name.
The new `spec.resources` travel in that tuple as the target named POD (""), which no container can be
named, next to the containers that move with it; only the ends that write it out — the proposal's
`pod`, the `pods/resize` body's `spec.resources`, `explain` — tell the two apart (`split`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agent.core.model import EMPTY, PodView
from agent.vpa.model import VPA, PodRecommendation
from agent.vpa.podlevel import PodBounds, PodTarget, pod_recommendation, pod_target
from agent.vpa.podlevel_decide import PodUsage, decide_pod_level
from agent.vpa.policy import POD, ContainerTarget, Options, Verdict


def sets_pod_level(pod: PodView) -> bool:
    """Whether the pod sets pod-level resources: then the pod level is decided, not its containers alone."""
    return pod.pod_requests is not None or pod.pod_limits is not None


@dataclass(frozen=True, slots=True)
class PodLevelRecord:
    """What `explain` shows of a pod-level decision: the recommendation as the VPA gives it (or its
    containers' summed), as capped, by what (`notes`) and within which LimitRange type Pod (`bounds`),
    the `spec.resources` it makes (whether or not applied now), the containers restarted for it."""

    recommendation: PodRecommendation | None
    capped: PodRecommendation | None = None
    bounds: PodBounds | None = None
    notes: tuple[str, ...] = ()
    target: PodTarget | None = None
    restarts: tuple[str, ...] = ()


def decide_pod(
    pod: PodView,
    vpa: VPA,
    age_s: float | None,
    quick_oom: bool,
    opts: Options,
    usage: Mapping[str, int] | None,
    bounds: PodBounds | None,
    reaction: str | None,
) -> tuple[Verdict, PodLevelRecord]:
    """decide_pod_level as a Verdict whose targets are the POD target (when the pod level moves) and the
    containers moved with it. `usage`: the working sets the node read, the pod cgroup's under POD."""
    read = None if usage is None else PodUsage(usage.get(POD), {k: v for k, v in usage.items() if k != POD})
    v = decide_pod_level(pod, vpa, age_s, quick_oom, opts, read, bounds, reaction)
    targets = ((ContainerTarget(POD, v.pod.requests, v.pod.limits),) if v.pod is not None else ()) + v.containers
    shown = v.pod or (pod_target(pod, v.recommendation.target, vpa.pod_policy) if v.recommendation else None)
    record = PodLevelRecord(pod_recommendation(pod, vpa), v.recommendation, bounds, v.notes, shown, v.restarts)
    return Verdict(v.apply, v.reason, targets, v.held, v.restarts), record


def pod_values(pod: PodView) -> ContainerTarget:
    """The pod's own `spec.resources` as the POD target (what a sent resize is compared with)."""
    return ContainerTarget(POD, pod.pod_requests or EMPTY, pod.pod_limits or EMPTY)


def split(targets: Iterable[ContainerTarget]) -> tuple[ContainerTarget | None, tuple[ContainerTarget, ...]]:
    """(the POD target or None, the containers' targets)."""
    pod, containers = None, []
    for t in targets:
        if t.container == POD:
            pod = t
        else:
            containers.append(t)
    return pod, tuple(containers)
