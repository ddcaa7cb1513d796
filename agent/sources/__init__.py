"""Sources of desired state (see `agent.sources.base`): the spec is implicit; these are the others.

Precedence (higher wins, field by field): the resize annotation (100) over a VPA recommendation (50, when
enabled) over the spec; the pod-level annotation (10) fills pod-level resources only where the spec has none.
"""

from __future__ import annotations

from typing import Final

from agent.sources.base import SPEC, Merged, Proposal, Source, SourceInputError, field_label, merge
from agent.sources.pod_level_annotation import PodLevelAnnotationSource
from agent.sources.resize_annotation import ResizeAnnotationSource

DEFAULT_SOURCES: Final[tuple[Source, ...]] = (PodLevelAnnotationSource(), ResizeAnnotationSource())

__all__ = [
    "DEFAULT_SOURCES",
    "SPEC",
    "Merged",
    "PodLevelAnnotationSource",
    "Proposal",
    "ResizeAnnotationSource",
    "Source",
    "SourceInputError",
    "field_label",
    "merge",
]
