"""The namespace's LimitRanges as the bound of annotation-driven changes: reading them and checking a pod
(`agent.pods.sources.limitrange.LimitRanges` holds the namespaces' ones and loads this module once it has
some to read or a pod to check).

Why: the resize and pod-level annotations change a pod's resources without the API server's admission.
The API server would refuse the same change sent through `pods/resize` when it breaks one of the
namespace's LimitRanges, so the agent refuses it too, for that pod only (a `LimitRangeViolation`: an
Event on the pod, nothing of it changed), and never clamps it.

The rules are the LimitRanger admission plugin's validation (plugin/pkg/admission/limitranger/admission.go,
`PodValidateLimitFunc`; since v1.33 it also runs on the `resize` subresource and then checks the whole
new pod, not only what the resize changed):

- every LimitRange of the namespace applies; `default`/`defaultRequest` are mutation at creation, so an
  annotation is never defaulted by them, only validated;
- `type: Container`, for every container, init containers and sidecars included: `min` needs a request
  at least min (and a limit, when present, at least min); `max` needs a limit at most max (and a request,
  when present, at most max); `maxLimitRequestRatio` needs a non-zero request and limit with
  limit <= request * ratio;
- `type: Pod`: the same three rules on the pod's requests and limits as `podRequests`/`podLimits` there
  compute them: regular containers and sidecars summed, each init container (with the sidecars started
  before it) a floor, a resource present when any container names it, pod overhead left out; pod-level
  `spec.resources` replace the sum for cpu and memory.

Handled resources: cpu, memory and hugepages-<size>, in the units the agent computes with (millicores,
bytes), rounded up as the API server rounds a stored quantity. Other resources (ephemeral-storage,
extended resources) are not checked: the agent writes nothing for them. A LimitRange that cannot be read
is left out with a warning naming it (it does not block the namespace's pods; the API server never
stores one, so only a hand-written file or a newer API can bring it); its namespace's other LimitRanges
still apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal

from agent.core.compute.aggregate import aggregate
from agent.core.model import PodView, Resources
from agent.infra.errors import PermanentError
from agent.pods import quantity
from agent.pods.sources.base import SourceInputError

Scope = Literal["Container", "Pod"]
Rule = Literal["min", "max", "maxLimitRequestRatio"]

HUGEPAGES: Final = "hugepages-"
_RULES: Final[tuple[Rule, ...]] = ("min", "max", "maxLimitRequestRatio")


class LimitRangeParseError(PermanentError, ValueError):
    """A LimitRange object the agent cannot read; the message names it."""


class LimitRangeViolation(SourceInputError):
    """The pod, with its annotations applied, breaks a LimitRange of its namespace."""

    reason = "LimitRangeExceeded"

    def __init__(self, violations: Sequence[Violation]) -> None:
        super().__init__(
            "refused: with its annotations the pod breaks its namespace's LimitRange: "
            + "; ".join(v.message for v in violations),
            pod=violations[0].pod if violations else "",
        )
        self.violations = tuple(violations)


class LimitRangesUnavailable(SourceInputError):
    """The namespace's LimitRanges are not known (not listed yet, or the list failed): an annotation-driven
    change cannot be checked, so it is refused until they are."""


@dataclass(frozen=True, slots=True)
class Limit:
    """One resource's bound in one rule of a LimitRange item: `amount` in the agent's units (a ratio: in
    thousandths)."""

    resource: str  # as the LimitRange names it
    hugepage_size: int | None  # bytes, for hugepages-<size>
    amount: int
    shown: str  # the LimitRange's own quantity, for messages


@dataclass(frozen=True, slots=True)
class Item:
    """One limit of a LimitRange (`spec.limits[]`): its scope and bounds."""

    scope: Scope
    min: tuple[Limit, ...] = ()
    max: tuple[Limit, ...] = ()
    ratio: tuple[Limit, ...] = ()  # maxLimitRequestRatio, in thousandths


@dataclass(frozen=True, slots=True)
class LimitRange:
    """A namespace's LimitRange, reduced to the bounds the annotations must keep."""

    namespace: str
    name: str
    items: tuple[Item, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Violation:
    """A bound of a LimitRange that a pod, as its annotations make it, would break."""

    pod: str  # namespace/name
    limit_range: str  # namespace/name
    scope: Scope
    container: str | None  # None for a Pod-scope bound
    resource: str
    rule: Rule
    field: str  # "request", "limit" or "limit/request"
    value: str | None  # what the pod has (None: nothing, or 0 for a ratio)
    bound: str

    @property
    def message(self) -> str:
        who = f"container {self.container}" if self.container is not None else "the pod"
        per = f"LimitRange {self.limit_range}: {self.resource}"
        if self.rule == "maxLimitRequestRatio":
            have = f"{who} has {self.value}" if self.value is not None else f"{who} has no non-zero request and limit"
            return f"{per} limit/request ratio per {self.scope} is at most {self.bound}, but {have}"
        word = "minimum" if self.rule == "min" else "maximum"
        have = f"{who} has {self.field} {self.value}" if self.value is not None else f"{who} has no {self.field}"
        return f"{per} {word} per {self.scope} is {self.bound}, but {have}"


# ---- reading a LimitRange -------------------------------------------------------------------------


def _bound(resource: object, value: object, ratio: bool, where: str) -> Limit | None:
    """A handled resource's bound; None for a resource the agent does not act on (its value is still
    checked to be a quantity)."""
    what = f"{where} {resource}"
    if not isinstance(resource, str):
        raise quantity.QuantityError(f"{where}: resource name {resource!r} is not a string")
    shown = str(value)
    if resource == "cpu" or ratio:
        amount = quantity.to_milli(value, what)
    elif resource == "memory" or resource.startswith(HUGEPAGES):
        amount = quantity.to_int(value, what)
    else:
        quantity.parse(value, what)
        return None
    if resource in ("cpu", "memory"):
        return Limit(resource, None, amount, shown)
    if resource.startswith(HUGEPAGES):
        size = quantity.to_int(resource[len(HUGEPAGES) :], f"{where} page size of {resource!r}")
        if size <= 0:
            raise quantity.QuantityError(f"{where}: page size of {resource!r} must be positive")
        return Limit(resource, size, amount, shown)
    return None  # a ratio of a resource the agent does not act on


def parse_limit_range(raw: Mapping[str, Any]) -> LimitRange:
    """A LimitRange object as the API returns it; items of other types (PersistentVolumeClaim) are left out."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "<unnamed>")
    key = f"LimitRange {namespace}/{name}"
    spec = raw.get("spec")
    limits = spec.get("limits") if isinstance(spec, Mapping) else None
    if not isinstance(limits, list):
        raise LimitRangeParseError(f"{key}: spec.limits must be a list", limit_range=f"{namespace}/{name}")
    items: list[Item] = []
    for i, entry in enumerate(limits):
        where = f"spec.limits[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("type"), str):
            raise LimitRangeParseError(f"{key}: {where} must be a map with a type", limit_range=f"{namespace}/{name}")
        scope = entry["type"]
        rules: dict[Rule, tuple[Limit, ...]] = {}
        for field in _RULES:
            values = entry.get(field)
            if values is None:
                continue
            if not isinstance(values, Mapping):
                raise LimitRangeParseError(f"{key}: {where}.{field} must be a map", limit_range=f"{namespace}/{name}")
            try:
                found = (_bound(r, v, field == "maxLimitRequestRatio", f"{where}.{field}") for r, v in values.items())
                rules[field] = tuple(b for b in found if b is not None)
            except quantity.QuantityError as err:
                raise LimitRangeParseError(f"{key}: {err}", limit_range=f"{namespace}/{name}") from err
        if scope == "Container" or scope == "Pod":
            items.append(Item(scope, rules.get("min", ()), rules.get("max", ()), rules.get("maxLimitRequestRatio", ())))
    return LimitRange(namespace, name, tuple(items))


def parse_all(objects: Iterable[Mapping[str, Any]], namespaces: frozenset[str] | None = None) -> tuple[dict[str, tuple[LimitRange, ...]], list[str]]:
    """The LimitRanges by namespace (only `namespaces`, when given), sorted by name, and one problem line per
    LimitRange left out."""
    by_ns: dict[str, list[LimitRange]] = {}
    problems: list[str] = []
    for raw in objects:
        meta = raw.get("metadata")
        ns = (meta.get("namespace") if isinstance(meta, Mapping) else None) or "default"
        if namespaces is not None and ns not in namespaces:
            continue
        try:
            lr = parse_limit_range(raw)
        except LimitRangeParseError as err:
            problems.append(f"{err} (left out: the namespace's other LimitRanges still apply)")
            continue
        by_ns.setdefault(lr.namespace, []).append(lr)
    return {ns: tuple(sorted(lrs, key=lambda x: x.name)) for ns, lrs in by_ns.items()}, problems


# ---- checking a pod (pure) ------------------------------------------------------------------------


def _amount(res: Resources, limit: Limit) -> int | None:
    if limit.hugepage_size is not None:
        return res.hugepages.get(limit.hugepage_size)
    return res.cpu_milli if limit.resource == "cpu" else res.memory


def shown(limit: Limit, amount: int) -> str:
    """An amount as a quantity a user reads (500m, 2, 256Mi, 1000)."""
    if limit.resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    for suffix, unit in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if amount and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)


def _ratio(limit: int, request: int) -> str:
    return format((Decimal(limit) / Decimal(request)).quantize(Decimal("0.001")).normalize(), "f")


def _check(lr: LimitRange, item: Item, pod: str, container: str | None, requests: Resources, limits: Resources) -> list[Violation]:
    out: list[Violation] = []

    def broke(b: Limit, rule: Rule, field: str, value: str | None) -> None:
        out.append(Violation(pod, lr.key, item.scope, container, b.resource, rule, field, value, b.shown))

    for b in item.min:
        req, lim = _amount(requests, b), _amount(limits, b)
        if req is None or req < b.amount:
            broke(b, "min", "request", None if req is None else shown(b, req))
        elif lim is not None and lim < b.amount:
            broke(b, "min", "limit", shown(b, lim))
    for b in item.max:
        req, lim = _amount(requests, b), _amount(limits, b)
        if lim is None or lim > b.amount:
            broke(b, "max", "limit", None if lim is None else shown(b, lim))
        elif req is not None and req > b.amount:
            broke(b, "max", "request", shown(b, req))
    for b in item.ratio:
        req, lim = _amount(requests, b), _amount(limits, b)
        if not req or not lim:
            broke(b, "maxLimitRequestRatio", "limit/request", None)
        elif lim * 1000 > req * b.amount:
            broke(b, "maxLimitRequestRatio", "limit/request", _ratio(lim, req))
    return out


def pod_totals(pod: PodView) -> tuple[Resources, Resources]:
    """(requests, limits) of the pod as LimitRanger's podRequests/podLimits compute them: the container
    aggregate (sidecar rules, no overhead) with pod-level cpu and memory in its place where set."""
    totals = []
    for pick_limits, level in ((False, pod.pod_requests), (True, pod.pod_limits)):
        agg = aggregate(pod, pick_limits).total
        if level is not None:
            cpu = level.cpu_milli if level.cpu_milli is not None else agg.cpu_milli
            memory = level.memory if level.memory is not None else agg.memory
            agg = Resources(cpu, memory, agg.hugepages)
        totals.append(agg)
    return totals[0], totals[1]


def check_pod(pod: PodView, ranges: Sequence[LimitRange]) -> tuple[Violation, ...]:
    """Every rule of `ranges` that `pod` breaks (empty: the API server would admit it)."""
    out: list[Violation] = []
    for lr in ranges:
        for item in lr.items:
            if item.scope == "Container":
                for c in (*pod.containers, *pod.init_containers):
                    out.extend(_check(lr, item, pod.key, c.name, c.requests, c.limits))
            else:
                requests, limits = pod_totals(pod)
                out.extend(_check(lr, item, pod.key, None, requests, limits))
    return tuple(out)
