"""The pod-level annotation: pod-level resources for API servers that lack `spec.resources`.

Name: `kube-cgroup-agent.io/pod-resources`, value JSON `{"requests": {...}, "limits": {...}}`. It proposes
pod-level resources only when the spec has none (`spec.resources` absent): where the API carries them, the
spec is the truth and the annotation is ignored, so its precedence among sources does not matter.
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
    SourceInputError,
    check_namespace,
)

POD_RESOURCES_ANNOTATION: Final = "kube-cgroup-agent.io/pod-resources"
NAME: Final = "pod-resources-annotation"
PRECEDENCE: Final = 10


class PodLevelAnnotationSource:
    name: Final = NAME
    precedence: Final = PRECEDENCE

    def __init__(self, namespaces: frozenset[str] | None = None, bound: Bound | None = None) -> None:
        self.namespaces = namespaces
        self.bound = bound  # the namespace's LimitRanges, when given

    def propose(self, raw: Mapping[str, Any]) -> Proposal | None:
        spec = raw.get("spec")
        meta = raw.get("metadata")
        if not isinstance(spec, MAPS) or not isinstance(meta, MAPS) or spec.get("resources") is not None:
            return None
        annotations = meta.get("annotations") or {}
        text = annotations.get(POD_RESOURCES_ANNOTATION) if isinstance(annotations, MAPS) else None
        if text is None:
            return None
        check_namespace(raw, POD_RESOURCES_ANNOTATION, self.namespaces)
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as err:
            raise SourceInputError(f"annotation {POD_RESOURCES_ANNOTATION} is not valid JSON: {err}") from err
        if not isinstance(value, MAPS) or not set(value) <= {"requests", "limits"}:
            raise SourceInputError(
                f'annotation {POD_RESOURCES_ANNOTATION} must be {{"requests": ..., "limits": ...}}'
            )
        for kind, lst in value.items():
            if not isinstance(lst, MAPS):
                raise SourceInputError(f"annotation {POD_RESOURCES_ANNOTATION}: {kind} must be a map")
        return Proposal(
            NAME, pod=cast(ContainerResources, dict(value)), note=f"annotation {POD_RESOURCES_ANNOTATION}", bound=self.bound
        )
