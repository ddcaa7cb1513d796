"""The resize annotation: a desired state for clusters whose API does not let the pod spec change.

Name: `kube-cgroup-agent.io/resize`. Value: JSON naming containers (regular, or sidecar init
containers) and the requests and/or limits to change, per resource; resources not named keep the
spec's values:

    {"containers": {"app": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "256Mi"}}},
     "initContainers": {"log-shipper": {"limits": {"memory": "64Mi"}}}}

The overlay is applied to the raw manifest before parsing, so the API's defaulting rules (a limit
without a request makes the request equal the limit) apply to it exactly as to the spec. When the
annotation is present it wins over the spec; removing it makes the spec the desired state again.
Only the *desired* state comes from here: admission, the checkpoint and the actuation are the same.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final

RESIZE_ANNOTATION: Final = "kube-cgroup-agent.io/resize"

_SECTIONS: Final = {"containers": "containers", "initContainers": "initContainers"}


class ResizeAnnotationError(ValueError):
    """The annotation is present but not the documented JSON form; the message says what is wrong."""


def resize_annotation(raw: Mapping[str, Any]) -> str | None:
    meta = raw.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    value = annotations.get(RESIZE_ANNOTATION)
    return value if isinstance(value, str) else None


def parse_resize_annotation(text: str) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """section -> container -> "requests"/"limits" -> resource -> quantity (checked for shape only;
    quantities are checked when the overlaid manifest is parsed)."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ResizeAnnotationError(f"annotation {RESIZE_ANNOTATION} is not valid JSON: {err}") from err
    if not isinstance(value, Mapping) or not value or not set(value) <= set(_SECTIONS):
        raise ResizeAnnotationError(
            f'annotation {RESIZE_ANNOTATION} must be {{"containers": {{NAME: {{"requests": {{..}}, '
            '"limits": {..}}}}} (and optionally "initContainers")'
        )
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for section, containers in value.items():
        if not isinstance(containers, Mapping):
            raise ResizeAnnotationError(
                f"annotation {RESIZE_ANNOTATION}: {section} must map names to resources"
            )
        out[section] = {}
        for name, res in containers.items():
            if not isinstance(res, Mapping) or not set(res) <= {"requests", "limits"}:
                raise ResizeAnnotationError(
                    f"annotation {RESIZE_ANNOTATION}: container {name!r} takes only requests and limits"
                )
            for kind, lst in res.items():
                if not isinstance(lst, Mapping):
                    raise ResizeAnnotationError(
                        f"annotation {RESIZE_ANNOTATION}: container {name!r} {kind} must be a map"
                    )
            out[section][str(name)] = {k: dict(v) for k, v in res.items()}
    return out


def overlay_resize(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The manifest with the annotation's values written into the containers' resources (a copy), or
    `raw` itself when there is no annotation. Raises ResizeAnnotationError naming the problem."""
    text = resize_annotation(raw)
    if text is None:
        return raw
    wanted = parse_resize_annotation(text)
    out = copy.deepcopy(dict(raw))
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    for section, containers in wanted.items():
        listed = spec.get(_SECTIONS[section]) or []
        by_name = {c.get("name"): c for c in listed if isinstance(c, dict)}
        for name, res in containers.items():
            target = by_name.get(name)
            if target is None:
                raise ResizeAnnotationError(
                    f"annotation {RESIZE_ANNOTATION}: the pod has no {section[:-1]} named {name!r}"
                )
            resources = target.setdefault("resources", {})
            if not isinstance(resources, dict):
                raise ResizeAnnotationError(f"container {name!r}: resources must be a map")
            for kind, values in res.items():
                current = resources.get(kind) or {}
                resources[kind] = {**current, **values}
    return out
