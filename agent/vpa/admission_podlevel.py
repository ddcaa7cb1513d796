"""What the VPA admission policy sets on a new pod that sets pod-level resources (`spec.resources`), pure.

The values are the node's own decision for a running pod (agent.vpa.podlevel_decide, `at_creation`):
the pod-level recommendation (the VPA's `podRecommendations`, else its containers' summed), capped by
`podPolicy` and the namespace's LimitRange type Pod, limits proportional; the containers that set their
own resources sized as decide() sizes them (AEP-7571's option 2), every container fitted into the new pod
values as the API server validates them; the QoS class kept. As VPA's admission controller, without the
updater's conditions (a new pod takes the recommendation) and without a working set (nothing runs yet).
Where that decision refuses (a container that cannot be fitted, a class that would change), or the
result would break a LimitRange the template did not already break, the pod is left as it is: the
policy's CEL only copies values, so a pod it cannot size exactly is never half-sized.

`from` of the pod level is what the API server's defaulting makes of the template's `spec.resources`
(defaultPodRequests, defaultPodLimits, agent.pods.parse) before the LimitRanger fills in container
defaults; the policy applies `to` only when the pod's own `spec.resources` are exactly that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.core.model import EMPTY, ContainerKind, ContainerView, PodView, Resources
from agent.pods.sources.limitrange_rules import LimitRange, check_pod
from agent.vpa.admission_pod import template_pod
from agent.vpa.model import VPA
from agent.vpa.podlevel import RESOURCES, get, pod_bounds
from agent.vpa.podlevel_decide import at_creation

RawList = Mapping[str, str]  # a ResourceList as the API writes it: resource name -> quantity text


@dataclass(frozen=True, slots=True)
class ParamPod:
    """The pod level of a workload's entry: `from` the pod's `spec.resources` as the policy sees them,
    `to` the values that change (an empty `to`: only containers move)."""

    from_requests: RawList
    from_limits: RawList
    to_requests: RawList = field(default_factory=dict)
    to_limits: RawList = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # how the pod-level target was capped (for `explain`)


@dataclass(frozen=True, slots=True)
class PodLevelSets:
    """What one VPA sets on a pod-level pod: the pod level, each moved container's changed values by
    name, the parts of the `vpaUpdates` annotation; `refused`: why nothing is set ("" when it is)."""

    pod: ParamPod | None = None
    containers: Mapping[str, tuple[RawList, RawList]] = field(default_factory=dict)
    said: tuple[str, ...] = ()
    refused: str = ""


def _text(res: str, v: int) -> str:
    return f"{v}m" if res == "cpu" else str(v)


def _raw(v: object) -> dict[str, str]:
    return {str(k): str(q) for k, q in v.items()} if isinstance(v, Mapping) else {}


def pod_as_seen(
    namespace: str, template_spec: Mapping[str, Any], limit_ranges: Sequence[Mapping[str, Any]]
) -> tuple[PodView, ParamPod] | None:
    """The new pod as the policy sees it and its pod level's `from` (None: the template sets no pod-level
    resources; raises PodParseError). `spec.resources` as the API server's defaulting makes them from the
    template's own containers (defaultPodRequests, defaultPodLimits), which runs before the LimitRanger
    fills in container defaults, so those are not counted; its raw lists kept for other resources."""
    own = template_pod(namespace, template_spec, ())
    if own.pod_requests is None and own.pod_limits is None:
        return None
    found = template_spec.get("resources")
    stanza: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    lists = []
    for key, r in (("requests", own.pod_requests or EMPTY), ("limits", own.pod_limits or EMPTY)):
        out = _raw(stanza.get(key))
        for res in RESOURCES:
            v = get(r, res)
            if v is not None:
                out[res] = _text(res, v)
        lists.append(out)
    pod = replace(template_pod(namespace, template_spec, limit_ranges), pod_requests=own.pod_requests, pod_limits=own.pod_limits)
    return pod, ParamPod(lists[0], lists[1])


def _changed(before: Resources, after: Resources) -> dict[str, str]:
    return {res: _text(res, v) for res in RESOURCES if (v := get(after, res)) is not None and v != get(before, res)}


def pod_level_sets(vpa: VPA, pod: PodView, seen: ParamPod, ranges: Sequence[LimitRange]) -> PodLevelSets:
    """`pod`: the new pod as the policy sees it (containers after the LimitRanger, `spec.resources` as
    `seen` says); `ranges`: the namespace's LimitRanges (type Pod caps the target; any bound the result
    would break and the template did not leaves the pod as it is)."""
    v = at_creation(pod, vpa, pod_bounds(ranges))
    if not v.apply:
        return PodLevelSets(refused=f"pod-level resources: {v.reason}")
    requests, limits = pod.pod_requests or EMPTY, pod.pod_limits or EMPTY
    new_req, new_lim = (v.pod.requests, v.pod.limits) if v.pod is not None else (requests, limits)
    p = replace(seen, to_requests=_changed(requests, new_req), to_limits=_changed(limits, new_lim), notes=v.notes)
    said = [f"{r} request" for r in p.to_requests] + [f"{r} limit" for r in p.to_limits]
    parts = [f"pod: {', '.join(said)}"] if said else []
    moved = {t.container: t for t in v.containers}
    containers: dict[str, tuple[RawList, RawList]] = {}
    after: dict[str, ContainerView] = {}
    for i, c in enumerate(c for c in pod.containers if c.kind is ContainerKind.REGULAR):
        t = moved.get(c.name)
        if t is not None:
            to = (_changed(c.requests, t.requests), _changed(c.limits, t.limits))
            containers[c.name] = to
            parts.append(f"container {i}: " + ", ".join([f"{r} request" for r in to[0]] + [f"{r} limit" for r in to[1]]))
            after[c.name] = replace(c, requests=t.requests, limits=t.limits)
            for res in RESOURCES:
                req, lim = get(t.requests, res), get(t.limits, res)
                if req is not None and lim is not None and req > lim:
                    return PodLevelSets(refused=f"container {c.name}: the {res} request {req} would be above its limit {lim}")
    containers_after = tuple(after.get(c.name, c) for c in pod.containers)
    result = replace(pod, containers=containers_after, pod_requests=new_req, pod_limits=new_lim)
    before = {x.message for x in check_pod(pod, ranges)}
    broken = [x.message for x in check_pod(result, ranges) if x.message not in before]
    if broken:
        return PodLevelSets(refused=f"the API server would refuse the result ({broken[0]}): the pod is left as it is")
    return PodLevelSets(p, containers, tuple(parts))
