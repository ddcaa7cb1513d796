"""Whether a pod at one revision can reach another in place, as seed 004 defines it (pure).

The seed's rule (`eligibleForInPlaceUpgrade`): the same number of containers in `spec.containers`, and
the two templates semantically equal once the update's images are copied into the current one → patch
the images in place; anything else → Recreate. Semantically equal is apimachinery's `Semantic.DeepEqual`:
quantities compare by value (`1000m` == `1`), and an empty list or map equals an absent one.

Beyond the seed, each switched on separately: a change of template labels/annotations only (patched on
the pod), and of container resources only (applied through `pods/resize`). Init containers, volumes,
env, commands and everything else still mean Recreate.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any


class Kind(enum.StrEnum):
    NONE = "None"  # the templates are equal: only the revision labels move
    IN_PLACE = "InPlace"
    RECREATE = "Recreate"


@dataclass(frozen=True, slots=True)
class Options:
    metadata_in_place: bool = False  # template labels/annotations changes are patched on the pod
    resources_in_place: bool = False  # container resources changes go through pods/resize


@dataclass(frozen=True, slots=True)
class Change:
    kind: Kind
    reason: str
    images: Mapping[str, str] = field(default_factory=dict)  # container -> new image
    labels: Mapping[str, str | None] = field(default_factory=dict)  # template label -> new value (None: removed)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    resources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # container -> new resources


Quantity = Callable[[object], Decimal]
"""A quantity parser (agent.pods.quantity.parse_any): injected, so this module stays pure."""


def normalized(v: Any, quantity: Quantity, in_resources: bool = False) -> Any:
    """The value as Semantic.DeepEqual sees it: empty lists/maps and nulls dropped, quantities by value."""
    if isinstance(v, Mapping):
        out = {}
        for k, x in v.items():
            n = normalized(x, quantity, in_resources or k in ("resources", "overhead"))
            if n not in (None, [], {}):
                out[k] = n
        return out
    if isinstance(v, list):
        return [normalized(x, quantity, in_resources) for x in v]
    if in_resources and isinstance(v, str | int | float) and not isinstance(v, bool):
        try:
            return ("quantity", quantity(v).normalize())
        except ValueError:
            return v
    return v


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The first path where two normalized values differ (for a reason a person can act on)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in sorted(a.keys() | b.keys()):
            d = first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
            if d is not None:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} → {len(b)})"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d is not None:
                return d
        return None
    return None if a == b else path or "the template"


def _map_changes(cur: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, str | None]:
    out: dict[str, str | None] = {k: str(v) for k, v in new.items() if cur.get(k) != v}
    out.update({k: None for k in cur if k not in new})
    return out


def classify(
    current: Mapping[str, Any], update: Mapping[str, Any], quantity: Quantity, opts: Options = Options()
) -> Change:
    """How a pod made from template `current` reaches template `update` (both PodTemplateSpecs)."""
    cur_spec = dict(current.get("spec") or {})
    upd_spec = dict(update.get("spec") or {})
    cur_containers = [dict(c) for c in cur_spec.get("containers") or []]
    upd_containers = list(upd_spec.get("containers") or [])
    if len(cur_containers) != len(upd_containers):
        return Change(Kind.RECREATE, f"the number of containers changed ({len(cur_containers)} → {len(upd_containers)})")
    images: dict[str, str] = {}
    resources: dict[str, Mapping[str, Any]] = {}
    for cur, upd in zip(cur_containers, upd_containers, strict=True):
        if cur.get("image") != upd.get("image"):
            images[str(upd.get("name"))] = str(upd.get("image"))
            cur["image"] = upd.get("image")
        same_name = cur.get("name") == upd.get("name")
        if opts.resources_in_place and same_name and normalized(cur.get("resources"), quantity, True) != normalized(upd.get("resources"), quantity, True):
            resources[str(upd.get("name"))] = dict(upd.get("resources") or {})
            cur["resources"] = upd.get("resources")
    cur_spec["containers"] = cur_containers
    differs = first_difference(normalized(cur_spec, quantity), normalized(upd_spec, quantity))
    if differs is not None:
        return Change(Kind.RECREATE, f"spec.{differs} differs (only images{' and resources' if opts.resources_in_place else ''} change in place)")
    cur_meta, upd_meta = current.get("metadata") or {}, update.get("metadata") or {}
    labels = _map_changes(cur_meta.get("labels") or {}, upd_meta.get("labels") or {})
    annotations = _map_changes(cur_meta.get("annotations") or {}, upd_meta.get("annotations") or {})
    if (labels or annotations) and not opts.metadata_in_place:
        return Change(Kind.RECREATE, "the template's labels or annotations changed (metadata in place is off)")
    if not (images or resources or labels or annotations):
        return Change(Kind.NONE, "the templates are equal")
    what = [f"image of {', '.join(sorted(images))}"] if images else []
    what += [f"resources of {', '.join(sorted(resources))}"] if resources else []
    what += ["template labels/annotations"] if labels or annotations else []
    return Change(Kind.IN_PLACE, "only " + " and ".join(what) + " changed", images, labels, annotations, resources)


def template_of(revision: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod template a ControllerRevision records (`data.spec.template`), or None when it holds none."""
    data = revision.get("data")
    spec = data.get("spec") if isinstance(data, Mapping) else None
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if not isinstance(template, Mapping):
        return None
    return {k: v for k, v in template.items() if k != "$patch"}
