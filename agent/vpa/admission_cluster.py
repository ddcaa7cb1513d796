"""Every VPA admission parameter object the cluster should hold, from raw VPAs, workloads and LimitRanges
(pure: agent.daemon.vpa_admission reads and writes; agent.vpa.admission computes one object).

Only VPAs that opt in (annotation kube-cgroup-agent.io/vpa-actuator: node, or `actuateAll`) get one: a
cluster may run VPA's own admission controller for the others, and one opt-in covers both the node's
in-place updates and the requests at creation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent.pods.quantity import parse_any
from agent.pods.sources.limitrange_rules import parse_all
from agent.vpa.admission import (
    DEFAULT_OPTIONS,
    NAME,
    AdmissionParams,
    admission_params,
    namespace_object,
    rivals_of,
)
from agent.vpa.model import VPA, VPAParseError
from agent.vpa.parse import parse_vpa
from agent.vpa.policy import Options

# targetRef kind -> (API group version, resource, the path to its pod template's spec)
TARGETS: Final[Mapping[str, tuple[str, str, tuple[str, ...]]]] = {
    "Deployment": ("apps/v1", "deployments", ("spec", "template", "spec")),
    "StatefulSet": ("apps/v1", "statefulsets", ("spec", "template", "spec")),
    "DaemonSet": ("apps/v1", "daemonsets", ("spec", "template", "spec")),
    "ReplicaSet": ("apps/v1", "replicasets", ("spec", "template", "spec")),
    "ReplicationController": ("v1", "replicationcontrollers", ("spec", "template", "spec")),
    "Job": ("batch/v1", "jobs", ("spec", "template", "spec")),
    "CronJob": ("batch/v1", "cronjobs", ("spec", "jobTemplate", "spec", "template", "spec")),
}
_POD_SPEC_KEPT: Final = ("containers", "initContainers", "resources", "overhead")
_CONTAINER_KEPT: Final = ("name", "resources", "restartPolicy")

Key = tuple[str, str]  # (namespace, name)


def template_spec(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    v: Any = obj
    for step in TARGETS[kind][2]:
        v = v.get(step) if isinstance(v, Mapping) else None
    return v if isinstance(v, Mapping) else None


def trimmer(kind: str) -> Any:
    """What the keeper keeps of a workload: its name and its template's resources (a cluster's
    ReplicaSets are many; their images, probes and volumes are not needed)."""

    def keep(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = obj.get("metadata") or {}
        spec = template_spec(kind, obj) or {}
        kept: dict[str, Any] = {k: spec[k] for k in _POD_SPEC_KEPT if k in spec}
        for k in ("containers", "initContainers"):
            kept[k] = [
                {f: c[f] for f in _CONTAINER_KEPT if f in c}
                for c in kept.get(k) or ()
                if isinstance(c, Mapping)
            ]
        return {"metadata": {"namespace": meta.get("namespace"), "name": meta.get("name")}, "template": kept}

    return keep


@dataclass(frozen=True, slots=True)
class Desired:
    """The parameter objects to hold, one per namespace with a VPA that opts in, by (namespace, name);
    `unknown`: namespaces with a VPA whose target's kind could not be listed (their objects are left as
    they are); `problems`: one line per VPA or LimitRange that cannot be read."""

    objects: Mapping[Key, Mapping[str, Any]]
    unknown: frozenset[str]
    problems: tuple[str, ...]


def _vpas(raw_vpas: Iterable[Mapping[str, Any]], problems: list[str]) -> list[tuple[VPA, str]]:
    out = []
    for raw in raw_vpas:
        try:
            vpa = parse_vpa(raw)
        except VPAParseError as err:
            problems.append(str(err))
            continue
        out.append((vpa, str((raw.get("metadata") or {}).get("uid") or "")))
    return out


def desired(
    raw_vpas: Iterable[Mapping[str, Any]],
    workloads: Mapping[str, Mapping[Key, Mapping[str, Any]]],
    raw_limit_ranges: Iterable[Mapping[str, Any]],
    opts: Options = DEFAULT_OPTIONS,
) -> Desired:
    """`workloads`: the trimmed objects of each target kind that was listed (a kind absent: not known)."""
    problems: list[str] = []
    vpas = _vpas(raw_vpas, problems)
    rivals = rivals_of(v for v, _ in vpas)
    lr_objects: dict[str, list[Mapping[str, Any]]] = {}
    for lr in raw_limit_ranges:
        lr_objects.setdefault(str((lr.get("metadata") or {}).get("namespace") or ""), []).append(lr)
    for objs in lr_objects.values():
        objs.sort(key=lambda o: str((o.get("metadata") or {}).get("name") or ""))
    ranges, lr_problems = parse_all(o for objs in lr_objects.values() for o in objs)
    problems.extend(lr_problems)
    by_namespace: dict[str, list[AdmissionParams]] = {}
    unknown: set[str] = set()
    for vpa, uid in vpas:
        if not vpa.opted_in and not opts.actuate_all:
            continue
        spec: Mapping[str, Any] | None = None
        if vpa.target_kind in TARGETS:
            listed = workloads.get(vpa.target_kind)
            if listed is None:
                unknown.add(vpa.namespace)
                continue
            found = listed.get((vpa.namespace, vpa.target_name))
            spec = found.get("template") if found is not None else None
        params = admission_params(
            vpa,
            uid,
            spec,
            lr_objects.get(vpa.namespace, ()),
            ranges.get(vpa.namespace, ()),
            rivals.get(vpa.key, ()),
            opts,
        )
        by_namespace.setdefault(vpa.namespace, []).append(params)
    objects = {(ns, NAME): namespace_object(ns, ps) for ns, ps in by_namespace.items() if ns not in unknown}
    return Desired(objects, frozenset(unknown), tuple(problems))


def differs(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether a held object must be written again (its spec, selecting label or owner changed)."""
    h_meta, w_meta = have.get("metadata") or {}, want.get("metadata") or {}
    return bool(
        have.get("spec") != want.get("spec")
        or (h_meta.get("labels") or {}) != w_meta.get("labels")
        or [r.get("uid") for r in h_meta.get("ownerReferences") or ()]
        != [r["uid"] for r in w_meta["ownerReferences"]]
    )


def _without_targets(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A parameter object's spec less what follows each new recommendation (each container's `to`, the
    pod level's, and when the recommendation was observed)."""
    workloads = {
        key: {**{k: v for k, v in entry.items() if k not in ("observed", "pod")},
              "containers": [{k: v for k, v in c.items() if k != "to"} for c in entry.get("containers") or ()],
              **({"pod": {k: v for k, v in entry["pod"].items() if k != "to"}} if "pod" in entry else {})}
        for key, entry in (spec.get("workloads") or {}).items()
    }
    return {**spec, "workloads": workloads}


def only_targets_moved(have: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether a held object differs from the wanted one only in its recommended values: the same
    workloads, VPAs, templates (`from`), skipped VPAs, labels and owners. Such a write may wait (the
    keeper batches them, TARGETS_EVERY_S); any other is written at once, since a template change makes the
    policy leave new pods unchanged until it is."""
    h_meta, w_meta = have.get("metadata") or {}, want.get("metadata") or {}
    same_meta = ((h_meta.get("labels") or {}) == w_meta.get("labels")
                 and [r.get("uid") for r in h_meta.get("ownerReferences") or ()] == [r["uid"] for r in w_meta["ownerReferences"]])
    return same_meta and _without_targets(have.get("spec") or {}) == _without_targets(want.get("spec") or {})


def _targets(spec: Mapping[str, Any]) -> dict[tuple[str, str, str, str], float] | None:
    """(workload, container, requests|limits, resource) -> the value set on new pods, the pod level's under
    container "" (agent.vpa.policy.POD); None when unreadable."""
    out: dict[tuple[str, str, str, str], float] = {}
    try:
        for key, entry in (spec.get("workloads") or {}).items():
            pod = [{"name": "", "to": entry["pod"].get("to")}] if "pod" in entry else []
            for c in [*(entry.get("containers") or ()), *pod]:
                for kind in ("requests", "limits"):
                    for res, q in ((c.get("to") or {}).get(kind) or {}).items():
                        out[(str(key), str(c.get("name")), kind, str(res))] = float(parse_any(q))
    except (ValueError, TypeError, AttributeError):
        return None
    return out


def targets_within(have: Mapping[str, Any], want: Mapping[str, Any], fraction: float) -> bool:
    """Whether every value `want` sets on new pods is within `fraction` of the one `have` holds (the same
    containers and resources). Such a move is not written at all: a new pod started 10 % off the latest
    recommendation is about what VPA's updater lets pass (`--pod-update-threshold` 0.1: it ignores an update of a lower priority, the
    relative difference of requests and recommendation), and at 10,000 VPAs
    whose recommender rewrites them every minute, following each move would be the keeper's largest write."""
    a, b = _targets(have.get("spec") or {}), _targets(want.get("spec") or {})
    if a is None or b is None or a.keys() != b.keys():
        return False
    return all(abs(x - b[k]) <= fraction * max(abs(x), abs(b[k])) for k, x in a.items())
