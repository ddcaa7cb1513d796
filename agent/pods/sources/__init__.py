"""Sources of desired state (see `agent.pods.sources.base`): the spec is implicit; these are the others.

Precedence (higher wins, field by field): the resize annotation (100) over a VPA recommendation (50, when
enabled) over the spec; the pod-level annotation (10) fills pod-level resources only where the spec has none.
A pod changed by an annotation must still satisfy its namespace's LimitRanges (`agent.pods.sources.limitrange`).
"""

from __future__ import annotations

from typing import Final

from agent.pods.sources.base import (
    SPEC,
    Bound,
    Merged,
    Proposal,
    Source,
    SourceInputError,
    field_label,
    merge,
)
from agent.pods.sources.pod_level_annotation import PodLevelAnnotationSource
from agent.pods.sources.resize_annotation import ResizeAnnotationSource

DEFAULT_SOURCES: Final[tuple[Source, ...]] = (PodLevelAnnotationSource(), ResizeAnnotationSource())


def default_sources(annotation_namespaces: frozenset[str] | None, limit_ranges: Bound | None = None) -> tuple[Source, ...]:
    """The annotation sources, honoured only in `annotation_namespaces` (None: every namespace). In any other
    namespace a pod carrying one of them is an error naming the setting: its limits are not changed
    around admission by someone who may only annotate it. With `limit_ranges` (the namespaces' LimitRanges,
    `agent.pods.sources.limitrange.LimitRanges`), a pod they change must also pass what the API server's
    LimitRanger would check, or it is refused."""
    if annotation_namespaces is None and limit_ranges is None:
        return DEFAULT_SOURCES
    return (
        PodLevelAnnotationSource(annotation_namespaces, limit_ranges),
        ResizeAnnotationSource(annotation_namespaces, limit_ranges),
    )

__all__ = [
    "DEFAULT_SOURCES",
    "SPEC",
    "Bound",
    "Merged",
    "PodLevelAnnotationSource",
    "Proposal",
    "ResizeAnnotationSource",
    "Source",
    "SourceInputError",
    "default_sources",
    "field_label",
    "merge",
]
