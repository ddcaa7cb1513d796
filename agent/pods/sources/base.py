"""Sources of desired state: what a pod's containers and the pod itself should get, and who said so.

Why a seam: the pod spec is not the only voice. The resize annotation, the pod-level annotation and, later,
a VPA recommendation each propose resources; the agent must pick one value per field by a stated
precedence and be able to say, in `explain`, which source each value came from. A source sees the raw
Pod (before parsing) and proposes quantities in the API's own form, so the API's defaulting rules (a
limit without a request makes the request equal to it) apply to a proposal exactly as to the spec.

Everything here is pure: a source holding outside state (a VPA cache) is consulted, never awaited.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from agent.core.model import PodView
from agent.infra.errors import PermanentError

Section = Literal["containers", "initContainers"]
Kind = Literal["requests", "limits"]
ResourceMap = Mapping[str, str]  # resource name -> quantity string, as the API writes it
ContainerResources = Mapping[Kind, ResourceMap]

# `isinstance(x, MAPS)`: whether a value of a raw manifest is a map. JSON and YAML give dicts, which the
# exact type answers at once; any other Mapping still passes, through the ABC's slower check (a pod asks
# some 26 times: a sixth of parsing a node's pods).
MAPS: Final = (dict, Mapping)

SPEC: Final = "spec"
"""The name of the implicit lowest source: whatever the pod's own spec says."""

SECTIONS: Final[tuple[Section, ...]] = ("containers", "initContainers")
KINDS: Final[tuple[Kind, ...]] = ("requests", "limits")


class SourceInputError(PermanentError, ValueError):
    """A source's input on the pod (an annotation) is malformed or refused; the message names the problem
    and `reason` is the Event's reason."""

    reason: str = "InvalidPod"


class Bound(Protocol):
    """A check of the pod as its proposals made it (a namespace's LimitRanges): `merge` hands on the
    distinct bounds of the proposals applied, and the pod's parser runs each on the defaulted pod."""

    def check(self, pod: PodView) -> None:
        """Raise SourceInputError when the pod, as proposed, is refused."""
        ...


@dataclass(frozen=True, slots=True)
class Proposal:
    """What one source wants. Only the named fields are proposed; every other field keeps lower sources'.

    `containers` maps (section, container name) to requests/limits; `pod` is pod-level resources
    (`spec.resources`). `note` says why, for `explain` (e.g. "VPA shop/api, target clamped to maxAllowed").
    """

    source: str
    containers: Mapping[tuple[Section, str], ContainerResources] = field(default_factory=dict)
    pod: ContainerResources | None = None
    note: str = ""
    bound: Bound | None = None  # what the pod must still satisfy with this proposal applied


class Source(Protocol):
    """One source of desired state. Higher `precedence` wins field by field; the spec is below all."""

    @property
    def name(self) -> str: ...

    @property
    def precedence(self) -> int: ...

    def propose(self, raw: Mapping[str, Any]) -> Proposal | None:
        """This source's proposal for the raw Pod, or None. Raises SourceInputError on malformed input."""
        ...


def check_namespace(raw: Mapping[str, Any], annotation: str, namespaces: frozenset[str] | None) -> None:
    """Raise when `annotation` is used in a namespace the configuration does not allow it in."""
    if namespaces is None:
        return
    meta = raw.get("metadata")
    ns = (meta.get("namespace") if isinstance(meta, MAPS) else None) or "default"
    if ns not in namespaces:
        raise SourceInputError(
            f"annotation {annotation} is not allowed in namespace {ns!r} (annotationNamespaces: "
            f"{', '.join(sorted(namespaces)) or 'none'})"
        )


FieldPath = tuple[str, ...]
"""("containers", name, kind, resource) or ("pod", kind, resource)."""


@dataclass(frozen=True, slots=True)
class Merged:
    """A pod with the winning proposals of its sources written in, and who decided what."""

    raw: Mapping[str, Any]  # the Pod with every winning proposal written in (a copy when anything changed)
    provenance: Mapping[FieldPath, str]  # only fields a source other than the spec decided
    notes: tuple[tuple[str, str], ...] = ()  # (source, note) of each source that proposed something
    bounds: tuple[Bound, ...] = ()  # the distinct bounds of the proposals applied


def field_label(path: FieldPath) -> str:
    return "/".join(path)


def merge(raw: Mapping[str, Any], sources: Iterable[Source]) -> Merged:
    """Apply every source's proposal to `raw`, lowest precedence first, so the highest writes last and wins.

    Raises SourceInputError (from a source, or when a proposal names a container the pod does not have).
    Sources of equal precedence apply in the order given.
    """
    ordered = sorted(enumerate(sources), key=lambda pair: (pair[1].precedence, pair[0]))
    proposals = [p for _, s in ordered if (p := s.propose(raw)) is not None]
    if not proposals:
        return Merged(raw, {})
    out = copy.deepcopy(dict(raw))
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return Merged(out, {})
    provenance: dict[FieldPath, str] = {}
    for prop in proposals:
        for (section, name), wanted in prop.containers.items():
            listed = spec.get(section) or []
            target = next((c for c in listed if isinstance(c, dict) and c.get("name") == name), None)
            if target is None:
                kind_word = "container" if section == "containers" else "init container"
                raise SourceInputError(f"{prop.source}: the pod has no {kind_word} named {name!r}")
            _write(target, wanted, ("containers", name), prop.source, provenance)
        if prop.pod is not None:
            _write(spec, prop.pod, ("pod",), prop.source, provenance)
    notes = tuple((p.source, p.note) for p in proposals if p.note)
    bounds = tuple(dict.fromkeys(p.bound for p in proposals if p.bound is not None))
    return Merged(out, provenance, notes, bounds)


def _write(
    holder: dict[str, Any],
    wanted: ContainerResources,
    prefix: FieldPath,
    source: str,
    provenance: dict[FieldPath, str],
) -> None:
    resources = holder.get("resources")
    if resources is None:
        resources = holder["resources"] = {}
    if not isinstance(resources, dict):
        raise SourceInputError(f"{source}: {'/'.join(prefix)} resources must be a map")
    for kind, values in wanted.items():
        current = resources.get(kind) or {}
        if not isinstance(current, dict):
            raise SourceInputError(f"{source}: {'/'.join(prefix)} {kind} must be a map")
        resources[kind] = {**current, **values}
        for resource in values:
            provenance[(*prefix, kind, resource)] = source
