"""What the CLI needs to decide as the daemon does for VPA pods, read once: the VPAs, the owner links
(ReplicaSets), this node's panic-button label, the LimitRanges (type Pod caps a pod-level target) and the
targets the agent applied before (its state file).

From a file (`--vpa FILE`: VPA, ReplicaSet, Node and LimitRange manifests, YAML or JSON, Lists unwrapped) or, when
`vpa.enabled` and the pods come from the API, from the API (read-only lists). Never written, never
watched: `diff`, `plan` and `explain` show what the daemon would do now.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.infra.errors import PermanentError
from agent.vpa.applied import ActuatorState
from agent.vpa.config import PANIC_LABEL
from agent.vpa.model import VPA, VPAParseError
from agent.vpa.parse import parse_vpa
from agent.vpa.podlevel import pod_bounds
from agent.vpa.policy import Options
from agent.vpa.source import VPASource, owners_from
from agent.vpa.state import load_readonly

if TYPE_CHECKING:
    from agent.pods.sources.limitrange_rules import LimitRange


class VPAInputError(PermanentError, ValueError):
    """The VPA input cannot be read (the message names the file or the API call)."""


@dataclass(frozen=True, slots=True)
class VPAInputs:
    vpas: tuple[VPA, ...]
    owners: Mapping[tuple[str, str, str], tuple[str, str]]
    enabled: bool  # False: the node carries the panic-button label
    kubelet_version: str | None = None  # from the Node, when given: whether the kubelet resizes containers
    problems: tuple[str, ...] = ()  # VPAs (and LimitRanges) that could not be parsed (left out, as the daemon does)
    limit_ranges: Mapping[str, tuple[LimitRange, ...]] | None = None  # namespace -> its LimitRanges


def from_objects(objects: Iterable[Mapping[str, Any]], node: str | None) -> VPAInputs:
    """Pure: VPAs parsed (a bad one is a problem, not a stop), owner links, the node's label."""
    vpas: list[VPA] = []
    problems: list[str] = []
    linked: list[Mapping[str, Any]] = []
    ranges: list[Mapping[str, Any]] = []
    enabled = True
    version = None
    for obj in objects:
        kind = obj.get("kind")
        if kind == "VerticalPodAutoscaler":
            try:
                vpas.append(parse_vpa(obj))
            except VPAParseError as err:
                problems.append(str(err))
        elif kind == "Node":
            meta = obj.get("metadata") or {}
            if node is None or meta.get("name") == node:
                enabled = (meta.get("labels") or {}).get(PANIC_LABEL) != "off"
                info = (obj.get("status") or {}).get("nodeInfo") or {}
                version = str(info.get("kubeletVersion") or "") or None
        elif kind == "LimitRange":
            ranges.append(obj)
        elif isinstance((obj.get("metadata") or {}).get("ownerReferences"), list):
            linked.append(obj)
    by_ns = None
    if ranges:  # the rules are loaded only for an input that has some
        from agent.pods.sources.limitrange_rules import parse_all

        by_ns, left_out = parse_all(ranges)
        problems.extend(left_out)
    return VPAInputs(tuple(vpas), owners_from(linked), enabled, version, tuple(problems), by_ns)


def read_file(path: Path, node: str | None) -> VPAInputs:
    from agent.pods.load import objects
    from agent.pods.parse import PodParseError

    try:
        text = path.read_text()
    except OSError as err:
        raise VPAInputError(f"--vpa {path}: {err.strerror or err}") from None
    try:
        return from_objects(objects(text, str(path)), node)
    except PodParseError as err:
        raise VPAInputError(f"--vpa {path}: {err.message}") from None


def cli_source(
    inputs: VPAInputs, opts: Options, state_dir: Path | None, kubelet_resizes: bool
) -> tuple[VPASource, str | None]:
    """A VPA source deciding as the daemon's does, recording for `explain`, never persisting; with the
    targets the agent applied before (bare nodes), and a warning when its state file is unusable."""
    kept, warning = load_readonly(state_dir) if state_dir is not None else (ActuatorState(), None)
    src = VPASource(
        inputs.vpas,
        inputs.owners,
        opts,
        enabled=inputs.enabled,
        propose_changes=not kubelet_resizes,
        record=True,
    )
    src.restore(kept if not kubelet_resizes else ActuatorState(blocked=kept.blocked, floors=kept.floors))
    ranges = inputs.limit_ranges
    if ranges is not None:
        src.pod_bounds = lambda namespace: pod_bounds(ranges.get(namespace, ()))
    return src, warning
