"""A new pod as the VPA admission policy sees it, and VPA's LimitRange capping of a target (pure).

- the template after the API server's defaulting (a request defaults to its limit, SetDefaults_Pod) and
  the LimitRanger's (each Container item's `default` and `defaultRequest`), which both run before any
  mutating policy;
- capping.go applyContainerLimitRange: the target raised to the min and lowered to the max that the
  namespace's Container LimitRange allows for the container's limit/request ratio (GetBoundaryRequest),
  the items merged as VPA's LimitRangeCalculator merges them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from agent.core.model import EMPTY, ContainerView, PodView, Resources
from agent.pods import quantity
from agent.pods.parse import parse_pod

TEMPLATE_UID: Final = "00000000-0000-4000-8000-000000000000"  # a template has no UID; parse_pod wants one


# ---- the pod as the policy sees it ------------------------------------------------------------------


def _raw_list(v: object) -> dict[str, str]:
    return {str(k): str(q) for k, q in v.items()} if isinstance(v, Mapping) else {}


def defaulted_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A Container item as the API server stores it (SetDefaults_LimitRangeItem): a `default` limit where
    only `max` names the resource, a `defaultRequest` from `default`, else from `min`. LimitRanges read
    from the API already are; one from a file may not be."""
    out = dict(item)
    if item.get("type") != "Container":
        return out
    default, request = _raw_list(item.get("default")), _raw_list(item.get("defaultRequest"))
    for r, q in _raw_list(item.get("max")).items():
        default.setdefault(r, q)
    for source in (default, _raw_list(item.get("min"))):
        for r, q in source.items():
            request.setdefault(r, q)
    for key, values in (("default", default), ("defaultRequest", request)):
        if values:  # an empty one is not stored
            out[key] = values
    return out


def _container_items(limit_ranges: Sequence[Mapping[str, Any]]) -> list[tuple[str, int, dict[str, Any]]]:
    """(LimitRange name, index, the item defaulted) of every Container item, in the order given."""
    out = []
    for lr in limit_ranges:
        spec = lr.get("spec")
        for i, item in enumerate(spec.get("limits") or () if isinstance(spec, Mapping) else ()):
            if isinstance(item, Mapping) and item.get("type") == "Container":
                out.append((str((lr.get("metadata") or {}).get("name")), i, defaulted_item(item)))
    return out


def _container_defaults(limit_ranges: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """(default limits, default requests) of the namespace's Container items, the first LimitRange (by
    name) naming a resource winning: LimitRanger fills a value only where none is set yet, taking the
    namespace's LimitRanges in no set order; a pod two of them default differently is created unchanged
    (the policy's `from` check)."""
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    for _, _, item in _container_items(limit_ranges):
        for target, key in ((limits, "default"), (requests, "defaultRequest")):
            for res, q in _raw_list(item.get(key)).items():
                target.setdefault(res, q)
    return limits, requests


def admitted_containers(
    template_spec: Mapping[str, Any], limit_ranges: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The template's containers as the admission chain hands them to mutating policies: a request
    defaults to its limit (SetDefaults_Pod), then LimitRanger's defaults fill what is still missing."""
    default_limits, default_requests = _container_defaults(limit_ranges)
    out = []
    for c in template_spec.get("containers") or ():
        if not isinstance(c, Mapping):
            continue
        found = c.get("resources")
        res: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        limits = _raw_list(res.get("limits"))
        requests = _raw_list(res.get("requests"))
        for r, q in limits.items():
            requests.setdefault(r, q)
        for r, q in default_limits.items():
            limits.setdefault(r, q)
        for r, q in default_requests.items():
            requests.setdefault(r, q)
        resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
        out.append({**c, "resources": resources})
    return out


def template_pod(
    namespace: str, template_spec: Mapping[str, Any], limit_ranges: Sequence[Mapping[str, Any]]
) -> PodView:
    """The pod a template makes, as the policy sees it (raises PodParseError for a template the API
    server would refuse as a pod)."""
    spec = {**template_spec, "containers": admitted_containers(template_spec, limit_ranges)}
    raw = {
        "kind": "Pod",
        "metadata": {"name": "template", "namespace": namespace, "uid": TEMPLATE_UID},
        "spec": spec,
    }
    return parse_pod(raw, ())


# ---- LimitRange capping, as VPA's admission controller caps ------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerBounds:
    """The namespace's Container LimitRange items merged as VPA's LimitRangeCalculator merges them: the
    lowest max, the highest min, the last default; in millicores and bytes."""

    min: Resources = EMPTY
    max: Resources = EMPTY
    default: Resources = EMPTY


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _higher(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _cpu_mem(v: object, where: str) -> Resources:
    raw = _raw_list(v)
    cpu = quantity.to_milli(raw["cpu"], f"{where}.cpu") if "cpu" in raw else None
    mem = quantity.to_int(raw["memory"], f"{where}.memory") if "memory" in raw else None
    return Resources(cpu, mem)


def container_bounds(limit_ranges: Sequence[Mapping[str, Any]]) -> ContainerBounds | None:
    """None when no Container item has a min, max or default (VPA then caps nothing)."""
    lo, hi, default = EMPTY, EMPTY, EMPTY
    found = False
    for name, i, item in _container_items(limit_ranges):
        if not any(item.get(k) is not None for k in ("min", "max", "default")):
            continue
        found = True
        where = f"LimitRange {name} spec.limits[{i}]"
        if item.get("default") is not None:
            default = _cpu_mem(item.get("default"), f"{where}.default")
        mn, mx = _cpu_mem(item.get("min"), f"{where}.min"), _cpu_mem(item.get("max"), f"{where}.max")
        lo = Resources(_higher(lo.cpu_milli, mn.cpu_milli), _higher(lo.memory, mn.memory))
        hi = Resources(_lower(hi.cpu_milli, mx.cpu_milli), _lower(hi.memory, mx.memory))
    return ContainerBounds(lo, hi, default) if found else None


def _boundary(request: int | None, limit: int | None, bound: int | None, default: int | None) -> int | None:
    """GetBoundaryRequest: the request whose proportional limit is `bound` (None or 0: no bound)."""
    if not limit:
        limit = default
    if not limit or not bound:
        return None
    if not request:
        return bound
    return request * bound // limit


def _cap(v: int | None, lo: int | None, hi: int | None) -> int | None:
    if v is None:
        return None
    if lo and v < lo:
        v = lo
    if hi and v > hi:
        v = hi
    return v


def limit_range_capped(target: Resources, c: ContainerView, bounds: ContainerBounds | None) -> Resources:
    """applyContainerLimitRange: the target raised to the minimum and lowered to the maximum the
    LimitRange allows for this container's limit/request ratio (min first, then max)."""
    if bounds is None:
        return target
    out = {}
    for res, value, req, lim, mn, mx, dflt in (
        (
            "cpu",
            target.cpu_milli,
            c.requests.cpu_milli,
            c.limits.cpu_milli,
            bounds.min.cpu_milli,
            bounds.max.cpu_milli,
            bounds.default.cpu_milli,
        ),
        (
            "memory",
            target.memory,
            c.requests.memory,
            c.limits.memory,
            bounds.min.memory,
            bounds.max.memory,
            bounds.default.memory,
        ),
    ):
        lo = _higher(_boundary(req, lim, mn, dflt), mn)
        hi = _boundary(req, lim, mx, dflt)
        out[res] = _cap(value, lo, hi)
    return replace(target, cpu_milli=out["cpu"], memory=out["memory"])
