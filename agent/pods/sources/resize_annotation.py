"""The resize annotation: a desired state for clusters whose API does not let the pod spec change.

Name: `kube-cgroup-agent.io/resize`. Value: JSON naming containers (regular, or sidecar init
containers) and the requests and/or limits to change, per resource; resources not named keep the
spec's values:

    {"containers": {"app": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "256Mi"}}},
     "initContainers": {"log-shipper": {"limits": {"memory": "64Mi"}}}}

It is a source of desired state (`agent.pods.sources.base`) with the highest precedence: an explicit request
by whoever may annotate the pod wins over the spec and over a recommendation. Its proposal is applied to
the raw manifest before parsing, so the API's defaulting rules apply to it exactly as to the spec;
removing the annotation makes the spec the desired state again. Only the *desired* state comes from
here: admission, the state store and the actuation are the same for every source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, cast

from agent.pods.sources.base import (
    MAPS,
    Bound,
    ContainerResources,
    Proposal,
    Section,
    SourceInputError,
    check_namespace,
)

RESIZE_ANNOTATION: Final = "kube-cgroup-agent.io/resize"
NAME: Final = "resize-annotation"
PRECEDENCE: Final = 100

_SECTIONS: Final = {"containers": "containers", "initContainers": "initContainers"}


class ResizeAnnotationError(SourceInputError):
    """The annotation is present but not the documented JSON form; the message says what is wrong."""


def resize_annotation(raw: Mapping[str, Any]) -> str | None:
    meta = raw.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, MAPS) else None
    if not isinstance(annotations, MAPS):
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
    if not isinstance(value, MAPS) or not value or not set(value) <= set(_SECTIONS):
        raise ResizeAnnotationError(
            f'annotation {RESIZE_ANNOTATION} must be {{"containers": {{NAME: {{"requests": {{..}}, '
            '"limits": {..}}}}} (and optionally "initContainers")'
        )
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for section, containers in value.items():
        if not isinstance(containers, MAPS):
            raise ResizeAnnotationError(
                f"annotation {RESIZE_ANNOTATION}: {section} must map names to resources"
            )
        out[section] = {}
        for name, res in containers.items():
            if not isinstance(res, MAPS) or not set(res) <= {"requests", "limits"}:
                raise ResizeAnnotationError(
                    f"annotation {RESIZE_ANNOTATION}: container {name!r} takes only requests and limits"
                )
            for kind, lst in res.items():
                if not isinstance(lst, MAPS):
                    raise ResizeAnnotationError(
                        f"annotation {RESIZE_ANNOTATION}: container {name!r} {kind} must be a map"
                    )
            out[section][str(name)] = {k: dict(v) for k, v in res.items()}
    return out


class ResizeAnnotationSource:
    """The `kube-cgroup-agent.io/resize` annotation as a source of desired state (in `namespaces` only,
    when given; the pod it makes must satisfy `bound`, the namespace's LimitRanges, when given)."""

    name: Final = NAME
    precedence: Final = PRECEDENCE

    def __init__(self, namespaces: frozenset[str] | None = None, bound: Bound | None = None) -> None:
        self.namespaces = namespaces
        self.bound = bound

    def propose(self, raw: Mapping[str, Any]) -> Proposal | None:
        text = resize_annotation(raw)
        if text is None:
            return None
        check_namespace(raw, RESIZE_ANNOTATION, self.namespaces)
        wanted = parse_resize_annotation(text)
        containers: dict[tuple[Section, str], ContainerResources] = {}
        for section, named in wanted.items():
            for name, res in named.items():
                containers[(cast(Section, section), name)] = cast(ContainerResources, res)
        return Proposal(NAME, containers, note=f"annotation {RESIZE_ANNOTATION}", bound=self.bound)
