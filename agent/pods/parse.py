"""Raw Pod objects (dicts, as YAML/JSON or the API give them) to validated, defaulted `PodView`s.

This is the anti-corruption layer: after it, nothing in the agent sees a raw manifest. It applies
the API server's defaulting that a raw manifest lacks, so a manifest and the same pod read back from
the API compute to the same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, Final

from agent.core.compute.aggregate import Amounts, aggregate, is_supported_pod_level
from agent.core.model import (
    EMPTY,
    NO_HUGEPAGES,
    NO_OTHER,
    ContainerKind,
    ContainerStatusView,
    ContainerView,
    ModelError,
    PodView,
    QOSClass,
    ResizePolicy,
    Resources,
    validate_container_id,
    validate_pod_uid,
)
from agent.infra.errors import PermanentError
from agent.pods import quantity
from agent.pods.sources import DEFAULT_SOURCES, Source, SourceInputError, field_label, merge
from agent.pods.sources.base import MAPS
from agent.pods.sources.pod_level_annotation import POD_RESOURCES_ANNOTATION

__all__ = ["POD_RESOURCES_ANNOTATION", "PodParseError", "parse_pod", "pod_key", "resource_list"]

HUGEPAGES_PREFIX: Final = "hugepages-"
_QOS_CLASSES: Final = {q.value: q for q in QOSClass}


class PodParseError(PermanentError, ValueError):
    """A pod the agent cannot act on; `reason` is the Event's reason (InvalidPod, or a refused annotation's)."""

    def __init__(self, pod: str, message: str, reason: str = "InvalidPod") -> None:
        super().__init__(f"{pod}: {message}", pod=pod)
        self.pod = pod
        self.message = message
        self.reason = reason


def pod_key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") if isinstance(raw, MAPS) else None
    if not isinstance(meta, MAPS):
        return "<pod without metadata>"
    return f"{_shown(meta.get('namespace') or 'default')}/{_shown(meta.get('name') or '<unnamed>')}"


def _shown(v: object) -> str:
    """A name as it can be printed on one line: a hostile name (newlines, escapes) is quoted."""
    return v if isinstance(v, str) and v.isprintable() else repr(v)


def resource_list(raw: object, what: str) -> Resources:
    if raw is None:
        return EMPTY
    if not isinstance(raw, MAPS):
        raise quantity.QuantityError(f"{what} must be a map of resource name to quantity")
    items = tuple(raw.items())
    if all(type(k) is str and type(v) is str for k, v in items):  # what a manifest's lists hold, as keys go
        try:
            return _known_list(items)
        except quantity.QuantityError:
            pass  # parsed again below, for the message to name `what`
    return _resource_list(raw, what)


@lru_cache(maxsize=1024)
def _known_list(items: tuple[tuple[str, str], ...]) -> Resources:
    """A node's pods repeat a few dozen resource lists: each is parsed once, and its (immutable) Resources
    shared. Only lists of strings come here: 1, 1.0 and True would be one key, but not one quantity."""
    return _resource_list(dict(items), "")


def _resource_list(raw: Mapping[Any, Any], what: str) -> Resources:
    cpu = memory = None
    hugepages: dict[int, int] = {}
    other: set[str] = set()
    for name, value in raw.items():
        # a name that would break the one-line message (a newline, a control character) is shown quoted
        where = f"{what}.{name}" if isinstance(name, str) and name.isprintable() else f"{what}[{name!r}]"
        if name == "cpu":
            cpu = quantity.to_milli(value, where)
        elif name == "memory":
            memory = quantity.to_int(value, where)
        elif isinstance(name, str) and name.startswith(HUGEPAGES_PREFIX):
            size = quantity.to_int(name[len(HUGEPAGES_PREFIX) :], f"{what} page size of {name!r}")
            if size <= 0:
                raise quantity.QuantityError(f"{where}: page size must be positive")
            hugepages[size] = quantity.to_int(value, where)
        else:
            quantity.parse(value, where)  # still refuse garbage
            other.add(str(name))
    return Resources(cpu, memory, _sorted(hugepages), frozenset(other) if other else NO_OTHER)


def _sorted(hugepages: Mapping[int, int]) -> Mapping[int, int]:
    """By page size; most lists have no hugepages and share the one empty value."""
    return dict(sorted(hugepages.items())) if hugepages else NO_HUGEPAGES


def _merge_missing(requests: Resources, limits: Resources) -> Resources:
    """SetDefaults_Pod: a resource with a limit and no request gets request = limit."""
    hp = {**limits.hugepages, **requests.hugepages}
    return Resources(
        requests.cpu_milli if requests.cpu_milli is not None else limits.cpu_milli,
        requests.memory if requests.memory is not None else limits.memory,
        _sorted(hp),
        requests.other | limits.other,
    )


def _resize_policy(raw: object, where: str) -> dict[str, ResizePolicy]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise PodParseError(where, "resizePolicy must be a list")
    out: dict[str, ResizePolicy] = {}
    for item in raw:
        if not isinstance(item, MAPS):
            raise PodParseError(where, "resizePolicy entries must be maps")
        name, policy = item.get("resourceName"), item.get("restartPolicy")
        if name not in ("cpu", "memory"):
            raise PodParseError(where, f"resizePolicy resourceName {name!r} is not cpu or memory")
        # seed 000 calls the default "NoRestart"; the API names it NotRequired
        if policy == "NoRestart":
            policy = ResizePolicy.NOT_REQUIRED.value
        try:
            out[name] = ResizePolicy(str(policy))
        except ValueError as err:
            raise PodParseError(where, f"resizePolicy restartPolicy {policy!r} is unknown") from err
    return out


def _container(raw: object, kind: ContainerKind, key: str, seen: set[str]) -> ContainerView:
    if not isinstance(raw, MAPS):
        raise PodParseError(key, "a container must be a map")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise PodParseError(key, "a container has no name")
    if name in seen:
        raise PodParseError(key, f"container name {name!r} is used twice")
    seen.add(name)
    if kind is ContainerKind.INIT and raw.get("restartPolicy") == "Always":
        kind = ContainerKind.SIDECAR
    res = raw.get("resources") or {}
    if not isinstance(res, MAPS):
        raise PodParseError(key, f"container {name!r}: resources must be a map")
    try:
        limits = resource_list(res.get("limits"), f"container {name!r} limits")
        requests = _merge_missing(resource_list(res.get("requests"), f"container {name!r} requests"), limits)
    except quantity.QuantityError as err:
        raise PodParseError(key, str(err)) from err
    return ContainerView(name, kind, requests, limits, _resize_policy(raw.get("resizePolicy"), key))


def _statuses(raw: object, key: str) -> tuple[ContainerStatusView, ...]:
    if not isinstance(raw, list):
        return ()
    out: list[ContainerStatusView] = []
    for st in raw:
        if not isinstance(st, MAPS) or not isinstance(st.get("name"), str):
            continue
        cid = runtime = None
        full = st.get("containerID")
        if isinstance(full, str) and full:
            runtime, sep, bare = full.partition("://")
            if not sep:
                runtime, bare = None, full
            try:
                cid = validate_container_id(bare)
            except ModelError as err:
                raise PodParseError(key, f"container {st['name']!r}: {err}") from err
        state = st.get("state")
        running = isinstance(state, MAPS) and "running" in state
        restarts = st.get("restartCount", 0)
        try:  # what the kubelet admitted (requests only; in-place resize, k8s >= 1.33)
            allocated = resource_list(st["allocatedResources"], f"container {st['name']!r} allocatedResources") if "allocatedResources" in st else None
        except quantity.QuantityError as err:
            raise PodParseError(key, str(err)) from err
        out.append(
            ContainerStatusView(
                st["name"], cid, runtime, running, restarts if isinstance(restarts, int) else 0, allocated
            )
        )
    return tuple(out)


def controller_owner(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, MAPS) and ref.get("controller") is True:
            kind, name = ref.get("kind"), ref.get("name")
            if isinstance(kind, str) and isinstance(name, str):
                return kind, name
    return None


def _pod_level_source(spec: Mapping[str, Any], provenance: Mapping[tuple[str, ...], str]) -> str | None:
    if spec.get("resources") is None:
        return None
    decided = {src for path, src in provenance.items() if path[0] == "pod"}
    return decided.pop() if len(decided) == 1 else "spec"


def _default_pod_level(pod: PodView) -> PodView:
    """defaultHugePagePodLimits, defaultPodRequests, defaultPodLimits (pkg/apis/core/v1/defaults.go)."""
    if pod.pod_requests is None and pod.pod_limits is None:
        return pod
    preq = Amounts.of(pod.pod_requests or EMPTY)
    plim = Amounts.of(pod.pod_limits or EMPTY)
    req_agg = aggregate(pod, pick_limits=False).total
    lim_agg = aggregate(pod, pick_limits=True).total
    containers = (*pod.init_containers, *pod.containers)
    has_reqs = pod.pod_requests is not None and not pod.pod_requests.is_empty()
    has_lims = pod.pod_limits is not None and not pod.pod_limits.is_empty()
    other_req = pod.pod_requests.other if pod.pod_requests else frozenset()
    other_lim = pod.pod_limits.other if pod.pod_limits else frozenset()

    if has_reqs or has_lims:  # hugepage pod limits from the container limits
        for size, amount in lim_agg.hugepages.items():
            if size not in preq.hugepages and size not in plim.hugepages:
                plim.hugepages[size] = amount
    has_lims = has_lims or bool(plim.hugepages)
    if has_lims:  # pod requests from container requests (overcommittable), else from pod limits
        if preq.cpu_milli is None and req_agg.cpu_milli is not None:
            preq.cpu_milli = req_agg.cpu_milli
        if preq.memory is None and req_agg.memory is not None:
            preq.memory = req_agg.memory
        if preq.cpu_milli is None and plim.cpu_milli is not None:
            preq.cpu_milli = plim.cpu_milli
        if preq.memory is None and plim.memory is not None:
            preq.memory = plim.memory
        for size, amount in plim.hugepages.items():
            preq.hugepages.setdefault(size, amount)
    if not is_supported_pod_level(plim.freeze()) and is_supported_pod_level(preq.freeze()):
        # pod limits from container limits when every container has one
        if (
            plim.cpu_milli is None
            and lim_agg.cpu_milli is not None
            and all(c.limits.cpu_milli for c in containers)
        ):
            plim.cpu_milli = lim_agg.cpu_milli
        if plim.memory is None and lim_agg.memory is not None and all(c.limits.memory for c in containers):
            plim.memory = lim_agg.memory

    def frozen(a: Amounts, other: frozenset[str], was: Resources | None) -> Resources | None:
        res = replace(a.freeze(), other=other)
        return None if was is None and res.is_empty() else res

    return replace(
        pod,
        pod_requests=frozen(preq, other_req, pod.pod_requests),
        pod_limits=frozen(plim, other_lim, pod.pod_limits),
    )


def parse_pod(raw: Mapping[str, Any], sources: Sequence[Source] = DEFAULT_SOURCES) -> PodView:
    """Build one PodView with every source's proposal applied; raise PodParseError naming the pod and the
    problem."""
    key = pod_key(raw)
    if not isinstance(raw, MAPS):
        raise PodParseError(key, "a pod must be a map")
    try:
        merged = merge(raw, sources)  # sources of desired state over the spec, by precedence
    except SourceInputError as err:
        raise PodParseError(key, str(err), err.reason) from err
    raw = merged.raw
    kind = raw.get("kind", "Pod")
    if kind != "Pod":
        raise PodParseError(key, f"kind {kind!r} is not a Pod")
    meta = raw.get("metadata")
    spec = raw.get("spec")
    if not isinstance(meta, MAPS) or not isinstance(spec, MAPS):
        raise PodParseError(key, "a pod needs metadata and spec")
    name = meta.get("name")
    namespace = meta.get("namespace") or "default"
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        raise PodParseError(key, "metadata.name and metadata.namespace must be non-empty strings")
    uid = meta.get("uid")
    if uid is None:
        raise PodParseError(key, "metadata.uid is missing: the pod's cgroup is named after its UID")
    try:
        uid = validate_pod_uid(uid)
    except ModelError as err:
        raise PodParseError(key, str(err)) from err

    seen: set[str] = set()
    raw_containers = spec.get("containers")
    if not isinstance(raw_containers, list) or not raw_containers:
        raise PodParseError(key, "spec.containers must list at least one container")
    raw_init = spec.get("initContainers") or []
    if not isinstance(raw_init, list):
        raise PodParseError(key, "spec.initContainers must be a list")
    init = tuple(_container(c, ContainerKind.INIT, key, seen) for c in raw_init)
    containers = tuple(_container(c, ContainerKind.REGULAR, key, seen) for c in raw_containers)

    pod_level = spec.get("resources")
    source = _pod_level_source(spec, merged.provenance)
    try:
        overhead = resource_list(spec.get("overhead"), "spec.overhead")
        if pod_level is not None and not isinstance(pod_level, MAPS):
            raise quantity.QuantityError("pod-level resources must be a map")
        preq = (
            resource_list(pod_level.get("requests"), "pod-level requests") if pod_level is not None else None
        )
        plim = resource_list(pod_level.get("limits"), "pod-level limits") if pod_level is not None else None
    except quantity.QuantityError as err:
        raise PodParseError(key, str(err)) from err

    status = raw.get("status") or {}
    if not isinstance(status, MAPS):
        status = {}
    qos_raw = status.get("qosClass")
    status_qos = _QOS_CLASSES.get(qos_raw) if isinstance(qos_raw, str) else None
    priority = spec.get("priority", 0)
    generation = meta.get("generation", 0)
    node_name = spec.get("nodeName")
    pod = PodView(
        uid=uid,
        namespace=namespace,
        name=name,
        containers=containers,
        init_containers=init,
        overhead=overhead,
        pod_requests=preq,
        pod_limits=plim,
        node_name=node_name if isinstance(node_name, str) else None,
        phase=str(status.get("phase") or "Running"),
        restart_policy=str(spec.get("restartPolicy") or "Always"),
        priority=priority if isinstance(priority, int) else 0,
        generation=generation if isinstance(generation, int) else 0,
        deleting=meta.get("deletionTimestamp") is not None,
        statuses=_statuses(status.get("containerStatuses"), key),
        init_statuses=_statuses(status.get("initContainerStatuses"), key),
        pod_level_source=source,
        status_qos=status_qos,
        provenance={field_label(path): src for path, src in merged.provenance.items()},
        owner=controller_owner(meta),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()} if isinstance(meta.get("labels"), MAPS) else {},
    )
    pod = _default_pod_level(pod)
    try:
        for bound in merged.bounds:  # the pod as the annotations made it, checked as admission would
            bound.check(pod)
    except SourceInputError as err:
        raise PodParseError(key, str(err), err.reason) from err
    return pod
