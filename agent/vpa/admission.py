"""What the MutatingAdmissionPolicy of deploy/vpa-admission sets on a new pod of a VPA's target (pure).

The policy's CEL copies values; this module computes them, with the node's own rules (agent.vpa.policy),
into one parameter object per namespace (`VPAAdmissionParams` named `vpa-admission`, an entry per VPA's
workload) that the keeper (agent.daemon.vpa_admission) keeps up to date:

- `from`: each container's requests and limits as the pod reaches the policy, its template after the
  API server's defaulting (a request defaults to its limit, SetDefaults_Pod) and the LimitRanger's
  (each Container item's `default` and `defaultRequest`, which run before any mutating policy);
- `to`: what VPA's admission controller sets (admission-controller/resource/pod/recommendation):
  the target capped first to the namespace's Container LimitRange (capping.go applyContainerLimitRange,
  proportionally to the container's limit/request: GetBoundaryRequest), then to the container policy's
  minAllowed/maxAllowed, then with RequestsOnly to the container's limit; limits proportional
  (GetProportionalLimit) under RequestsAndLimits. Only `spec.containers`, as VPA: init containers and
  sidecars are never changed. A container whose policy is Off, or without a recommendation, is left as
  it is; updateMode Off or no recommendation sets nothing;
- `skipped`: why nothing is set for this VPA's pods. Beyond VPA, so that a pod is never refused because of
  the policy: a result the API server would refuse (a request above its limit, a LimitRange bound left
  broken after the capping — a Pod-scope LimitRange, which VPA caps with a further step not done here)
  sets nothing, and two VPAs for one workload set nothing (VPA's admission controller picks one).

The policy applies `to` only when the pod's containers are exactly `from` (names, order, every
resource): a pod of another template revision (an old ReplicaSet, a StatefulSet partition) is left as
it is, and the node agent resizes it later if its VPA lets it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from agent.core.model import ContainerKind, ContainerView, PodView, Resources
from agent.pods import quantity
from agent.pods.parse import PodParseError
from agent.pods.sources.limitrange_rules import LimitRange, check_pod
from agent.vpa.admission_pod import admitted_containers, container_bounds, limit_range_capped, template_pod
from agent.vpa.admission_podlevel import ParamPod, pod_as_seen, pod_level_sets
from agent.vpa.model import VPA, ContainerPolicy, ControlledValues, UpdateMode
from agent.vpa.policy import ContainerTarget, Options, container_target

GROUP: Final = "kube-cgroup-agent.io"
VERSION: Final = "v1alpha1"
KIND: Final = "VPAAdmissionParams"
PLURAL: Final = "vpaadmissionparams"
NAME: Final = "vpa-admission"  # the one object of a namespace: the binding's paramRef names it
PARAMS_LABEL: Final = f"{GROUP}/vpa-admission"  # on every parameter object the keeper writes
UPDATES_ANNOTATION: Final = "vpaUpdates"  # VPA's admission controller's own annotations
OBSERVED_ANNOTATION: Final = "vpaObservedContainers"

DEFAULT_OPTIONS: Final = Options()

RawList = Mapping[str, str]  # a ResourceList as the API writes it: resource name -> quantity text


@dataclass(frozen=True, slots=True)
class Owner:
    """How the policy knows a new pod of the VPA's target from the pod's controller reference alone.
    `via`: "" the controller is the target itself; "Deployment": a ReplicaSet named
    <name>-<the pod's pod-template-hash label>; "CronJob": a Job named <name>-<digits>."""

    kind: str
    name: str
    via: str = ""


# targetRef kinds the policy covers (what a pod's controller reference says at creation)
_OWNERS: Final = {
    "Deployment": ("ReplicaSet", "Deployment"),
    "StatefulSet": ("StatefulSet", ""),
    "DaemonSet": ("DaemonSet", ""),
    "ReplicaSet": ("ReplicaSet", ""),
    "ReplicationController": ("ReplicationController", ""),
    "Job": ("Job", ""),
    "CronJob": ("Job", "CronJob"),
}


def owner_for(kind: str, name: str) -> Owner | None:
    """None for a target the policy cannot recognise from a pod (a custom workload resource)."""
    found = _OWNERS.get(kind)
    return Owner(found[0], name, found[1]) if found is not None else None


@dataclass(frozen=True, slots=True)
class ParamContainer:
    name: str
    from_requests: RawList
    from_limits: RawList
    to_requests: RawList = field(default_factory=dict)
    to_limits: RawList = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # how the target was capped, in VPA's words (for `explain`)


@dataclass(frozen=True, slots=True)
class AdmissionParams:
    """One VPA's parameter object: empty `containers` with `skipped` saying why nothing is set."""

    namespace: str
    vpa: str
    vpa_uid: str
    target: str  # target_key of the VPA's targetRef
    owner: Owner | None
    containers: tuple[ParamContainer, ...] = ()
    updates: str = ""
    observed: str = ""
    skipped: str = ""
    pod: ParamPod | None = None  # the pod level, for a template that sets `spec.resources`

    @property
    def sets(self) -> bool:
        moved = (self.pod.to_requests or self.pod.to_limits) if self.pod is not None else False
        return not self.skipped and (bool(moved) or any(c.to_requests or c.to_limits for c in self.containers))


# ---- one VPA's parameter object ---------------------------------------------------------------------


def _to_lists(
    t: ContainerTarget, c: ContainerView, vpa: VPA
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(requests, limits, what the annotation names) VPA's admission controller writes for one container:
    every controlled resource the recommendation has, and the limits it scales."""
    policy = vpa.policy_for(c.name)
    controlled = policy.controlled if policy is not None else frozenset({"cpu", "memory"})
    scales_limits = policy is None or policy.values is ControlledValues.REQUESTS_AND_LIMITS
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for res, req, lim in (
        ("cpu", t.requests.cpu_milli, t.limits.cpu_milli),
        ("memory", t.requests.memory, t.limits.memory),
    ):
        if res not in controlled or req is None:
            continue
        requests[res] = f"{req}m" if res == "cpu" else str(req)
        if scales_limits and lim is not None:
            limits[res] = f"{lim}m" if res == "cpu" else str(lim)
    said = [f"{r} request" for r in requests] + [f"{r} limit" for r in limits]
    return requests, limits, said


def _valid(pod: PodView, targets: Mapping[str, ContainerTarget], ranges: Sequence[LimitRange]) -> str:
    """Why the API server would refuse the pod with `targets` set when it admits it without them ("" when
    the targets break nothing the template did not already break)."""
    containers = []
    for c in pod.containers:
        t = targets.get(c.name)
        if t is not None:
            for res, req, lim in (
                ("cpu", t.requests.cpu_milli, t.limits.cpu_milli),
                ("memory", t.requests.memory, t.limits.memory),
            ):
                if req is not None and lim is not None and req > lim:
                    return f"container {c.name}: the {res} request {req} would be above its limit {lim}"
            c = replace(c, requests=t.requests, limits=t.limits)
        containers.append(c)
    before = {v.message for v in check_pod(pod, ranges)}
    broken = [
        v.message
        for v in check_pod(replace(pod, containers=tuple(containers)), ranges)
        if v.message not in before
    ]
    return broken[0] if broken else ""


def _capping_notes(
    target: Resources, within: Resources, t: ContainerTarget, policy: ContainerPolicy | None
) -> tuple[str, ...]:
    """What moved the request away from the recommendation, as VPA's capping annotations say it."""
    notes = []
    for res, rec, lr, final, most in (
        (
            "cpu",
            target.cpu_milli,
            within.cpu_milli,
            t.requests.cpu_milli,
            policy.max_allowed.cpu_milli if policy else None,
        ),
        (
            "memory",
            target.memory,
            within.memory,
            t.requests.memory,
            policy.max_allowed.memory if policy else None,
        ),
    ):
        if rec is None or lr is None or final is None:
            continue
        if lr != rec:
            notes.append(f"{res} capped to fit {'Max' if lr < rec else 'Min'} in container LimitRange")
        if final > lr:
            notes.append(f"{res} capped to minAllowed")
        elif final < lr:
            notes.append(f"{res} capped to {'maxAllowed' if final == most else 'container limit'}")
    return tuple(notes)


def _skip(vpa: VPA, uid: str, owner: Owner | None, why: str) -> AdmissionParams:
    return AdmissionParams(
        vpa.namespace, vpa.name, uid, target_key(vpa.target_kind, vpa.target_name), owner, skipped=why
    )


def admission_params(
    vpa: VPA,
    uid: str,
    template_spec: Mapping[str, Any] | None,
    limit_ranges: Sequence[Mapping[str, Any]],
    ranges: Sequence[LimitRange],
    rivals: Sequence[str] = (),
    opts: Options = DEFAULT_OPTIONS,
) -> AdmissionParams:
    """The parameter object for one VPA. `template_spec`: its target's pod template spec (None: the target
    is not found); `limit_ranges`: the namespace's LimitRange objects, `ranges` the same parsed for the
    final check; `rivals`: the other VPAs of the same target."""
    owner = owner_for(vpa.target_kind, vpa.target_name)
    target = f"{vpa.target_kind}/{vpa.target_name}"
    if owner is None:
        return _skip(
            vpa,
            uid,
            None,
            f"a {vpa.target_kind} target: a new pod's controller reference cannot tell its pods",
        )
    if not vpa.opted_in and not opts.actuate_all:
        return _skip(
            vpa, uid, owner, "the VPA does not opt in (annotation kube-cgroup-agent.io/vpa-actuator: node)"
        )
    if rivals:
        return _skip(
            vpa,
            uid,
            owner,
            f"{len(rivals) + 1} VPAs target {target} ({', '.join(sorted([vpa.key, *rivals]))})",
        )
    if vpa.mode is UpdateMode.OFF:
        return _skip(vpa, uid, owner, "updateMode Off")
    if not vpa.recommendations and vpa.pod_recommendation is None:
        return _skip(vpa, uid, owner, "the VPA has no recommendation yet")
    if template_spec is None:
        return _skip(vpa, uid, owner, f"{target} is not found")
    try:
        pod = template_pod(vpa.namespace, template_spec, limit_ranges)
        bounds = container_bounds(limit_ranges)
        pod_level = pod_as_seen(vpa.namespace, template_spec, limit_ranges)
    except (PodParseError, quantity.QuantityError) as err:
        return _skip(vpa, uid, owner, f"{target}'s pod template: {err}")
    raw = admitted_containers(template_spec, limit_ranges)
    if pod_level is not None:
        return _pod_level(vpa, uid, owner, *pod_level, raw, ranges)
    targets: dict[str, ContainerTarget] = {}
    containers: list[ParamContainer] = []
    updates: list[str] = []
    for i, (c, rc) in enumerate(
        zip((c for c in pod.containers if c.kind is ContainerKind.REGULAR), raw, strict=True)
    ):
        res = rc["resources"]
        entry = ParamContainer(c.name, res.get("requests", {}), res.get("limits", {}))
        rec = vpa.recommendation_for(c.name)
        if rec is not None:
            policy = vpa.policy_for(c.name)
            within = limit_range_capped(rec.target, c, bounds)
            t = container_target(c, replace(rec, target=within), policy)
            requests, limits, said = _to_lists(t, c, vpa) if t is not None else ({}, {}, [])
            if t is not None and said:
                targets[c.name] = t
                notes = _capping_notes(rec.target, within, t, policy)
                entry = replace(entry, to_requests=requests, to_limits=limits, notes=notes)
                updates.append(f"container {i}: " + ", ".join(said))
        containers.append(entry)
    if not updates:
        return _skip(vpa, uid, owner, "no container of the template has a recommendation to set")
    why = _valid(pod, targets, ranges)
    if why:
        return _skip(
            vpa, uid, owner, f"the API server would refuse the result ({why}): the pod is left as it is"
        )
    return AdmissionParams(
        vpa.namespace,
        vpa.name,
        uid,
        target_key(vpa.target_kind, vpa.target_name),
        owner,
        tuple(containers),
        f"Pod resources updated by {vpa.name}: " + "; ".join(updates),
        ", ".join(c.name for c in containers),
    )


def _pod_level(
    vpa: VPA,
    uid: str,
    owner: Owner,
    pod: PodView,
    seen: ParamPod,
    raw: Sequence[Mapping[str, Any]],
    ranges: Sequence[LimitRange],
) -> AdmissionParams:
    """A template that sets pod-level resources: the node's pod-level decision (agent.vpa.admission_podlevel),
    the pod level judged as the node judges it, with the containers `from` as for any template."""
    sets = pod_level_sets(vpa, pod, seen, ranges)
    if sets.refused:
        return _skip(vpa, uid, owner, sets.refused)
    regular = (c for c in pod.containers if c.kind is ContainerKind.REGULAR)
    containers = tuple(
        ParamContainer(c.name, rc["resources"].get("requests", {}), rc["resources"].get("limits", {}),
                       *sets.containers.get(c.name, ({}, {})))
        for c, rc in zip(regular, raw, strict=True)
    )
    key = target_key(vpa.target_kind, vpa.target_name)
    observed = ", ".join(c.name for c in containers)
    updates = f"Pod resources updated by {vpa.name}: " + "; ".join(sets.said)
    return AdmissionParams(vpa.namespace, vpa.name, uid, key, owner, containers, updates, observed, pod=sets.pod)


def rivals_of(vpas: Iterable[VPA]) -> dict[str, tuple[str, ...]]:
    """For each VPA (by key), the other VPAs of its namespace with the same target."""
    by_target: dict[tuple[str, str, str], list[str]] = {}
    for v in vpas:
        by_target.setdefault((v.namespace, v.target_kind, v.target_name), []).append(v.key)
    return {k: tuple(o for o in keys if o != k) for keys in by_target.values() for k in keys}


def target_key(kind: str, name: str) -> str:
    """How the namespace's object names a workload ("Deployment/web"): the policy derives the same key
    from a new pod's controller reference."""
    return f"{kind}/{name}"


def entry(p: AdmissionParams) -> dict[str, Any]:
    """One workload's entry: what the policy sets on its new pods."""
    return {
        "vpa": p.vpa,
        "containers": [
            {
                "name": c.name,
                "from": {"requests": dict(c.from_requests), "limits": dict(c.from_limits)},
                "to": {"requests": dict(c.to_requests), "limits": dict(c.to_limits)},
            }
            for c in p.containers
        ],
        "updates": p.updates,
        "observed": p.observed,
    } | ({"pod": {
        "from": {"requests": dict(p.pod.from_requests), "limits": dict(p.pod.from_limits)},
        "to": {"requests": dict(p.pod.to_requests), "limits": dict(p.pod.to_limits)},
    }} if p.pod is not None else {})


def namespace_object(namespace: str, params: Sequence[AdmissionParams]) -> dict[str, Any]:
    """The namespace's one parameter object (the policy is evaluated once per object of the namespace, so
    one object keeps a pod's creation cost flat however many VPAs the namespace has). `workloads`: by
    target, what to set; `skipped`: the VPAs whose pods are left as they are, and why. Owned by every VPA
    in it: the object goes when the last one does (the VPA CRD removed, the namespace's VPAs deleted)."""
    ordered = sorted(params, key=lambda p: p.vpa)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "labels": {PARAMS_LABEL: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "autoscaling.k8s.io/v1",
                    "kind": "VerticalPodAutoscaler",
                    "name": p.vpa,
                    "uid": p.vpa_uid,
                }
                for p in ordered
            ],
        },
        "spec": {
            "workloads": {p.target: entry(p) for p in ordered if not p.skipped},
            "skipped": [
                {"vpa": p.vpa, "target": p.target, "reason": p.skipped} for p in ordered if p.skipped
            ],
        },
    }
