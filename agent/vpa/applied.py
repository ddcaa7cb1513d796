"""What the VPA actuator keeps across restarts (the file's format; agent.vpa.state reads and writes it):
the targets applied by the agent's own engine, the resizes refused or put off, and the reactions' floors
(agent.vpa.react: without them a raised pod would be decided back down after a restart, and an OOM kill
the pod status still shows would be counted again).

Why: where the agent resizes containers, an applied VPA target lives only in the source (the pod spec is
never changed); after a restart the updater's condition may no longer hold (the pod is inside its
bounds now), and without this file the pod would be resized back to its spec. A refused resize kept
here is not sent again after a restart, and `explain` can say why a pod waits. One small JSON file in
the state directory, written atomically on each change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agent.core.model import Resources
from agent.vpa.floors import Floor
from agent.vpa.policy import Blocked, ContainerTarget, ResizeBlock

FILE: Final = "vpa-applied.json"
VERSION: Final = 1

Kept = tuple[str, tuple[ContainerTarget, ...]]  # (VPA key, targets)


@dataclass(frozen=True, slots=True)
class ActuatorState:
    applied: Mapping[str, Kept] = field(default_factory=dict)  # pod uid -> applied by the agent's engine
    blocked: Mapping[str, Blocked] = field(default_factory=dict)  # pod uid -> refused or put off
    floors: Mapping[str, Mapping[str, Floor]] = field(default_factory=dict)  # pod uid -> container -> floor


def _res(r: Resources) -> dict[str, int]:
    return {k: v for k, v in (("cpuMilli", r.cpu_milli), ("memory", r.memory)) if v is not None}


def _int(v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{v!r} is not a non-negative integer")
    return v


def _parse_res(raw: object) -> Resources:
    if not isinstance(raw, Mapping):
        raise ValueError("resources must be a map")
    return Resources(_int(raw.get("cpuMilli")), _int(raw.get("memory")))


def _targets(targets: tuple[ContainerTarget, ...]) -> list[dict[str, Any]]:
    return [
        {"container": t.container, "requests": _res(t.requests), "limits": _res(t.limits)} for t in targets
    ]


def _parse_targets(uid: str, raw: object) -> tuple[ContainerTarget, ...]:
    if not isinstance(raw, list):
        raise ValueError(f"pod {uid}: targets must be a list")
    out = []
    for t in raw:
        if not isinstance(t, Mapping) or not isinstance(t.get("container"), str):
            raise ValueError(f"pod {uid}: a target needs a container name")
        out.append(
            ContainerTarget(
                t["container"], _parse_res(t.get("requests", {})), _parse_res(t.get("limits", {}))
            )
        )
    return tuple(out)


def dumps(state: ActuatorState) -> bytes:
    pods = {uid: {"vpa": vpa, "targets": _targets(t)} for uid, (vpa, t) in sorted(state.applied.items())}
    blocked = {
        uid: {"vpa": b.vpa, "targets": _targets(b.targets), "state": b.state.value, "message": b.message}
        for uid, b in sorted(state.blocked.items())
    }
    floors = {
        uid: {c: {k: v for k, v in (("cpuMilli", f.cpu_milli), ("memory", f.memory), ("oomAt", f.oom_at), ("cpuLimitBefore", f.cpu_limit_before)) if v is not None}
              for c, f in sorted(per_pod.items())}
        for uid, per_pod in sorted(state.floors.items())
    }
    out = {"version": VERSION, "pods": pods, "blocked": blocked, **({"floors": floors} if floors else {})}
    return json.dumps(out, sort_keys=True).encode()


def _parse_floors(raw: object) -> dict[str, dict[str, Floor]]:
    if not isinstance(raw, Mapping):
        raise ValueError("floors must be a map")
    out: dict[str, dict[str, Floor]] = {}
    for uid, per_pod in raw.items():
        if not isinstance(per_pod, Mapping):
            raise ValueError(f"pod {uid}: floors must be a map of containers")
        for container, f in per_pod.items():
            if not isinstance(f, Mapping):
                raise ValueError(f"pod {uid}: container {container}: a floor must be a map")
            at = f.get("oomAt")
            if at is not None and (isinstance(at, bool) or not isinstance(at, int | float)):
                raise ValueError(f"pod {uid}: container {container}: oomAt {at!r} is not a time")
            out.setdefault(str(uid), {})[str(container)] = Floor(
                _int(f.get("cpuMilli")), _int(f.get("memory")), None if at is None else float(at),
                _int(f.get("cpuLimitBefore")),
            )
    return out


def loads(data: bytes) -> ActuatorState:
    """The kept state; ValueError naming the problem for anything else."""
    try:
        doc: Any = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"not JSON: {err}") from None
    if (
        not isinstance(doc, Mapping)
        or doc.get("version") != VERSION
        or not isinstance(doc.get("pods"), Mapping)
    ):
        raise ValueError(f"not a version {VERSION} file of the VPA actuator's state")
    applied: dict[str, Kept] = {}
    for uid, rec in doc["pods"].items():
        if not isinstance(rec, Mapping) or not isinstance(rec.get("vpa"), str):
            raise ValueError(f"pod {uid}: a record needs vpa and targets")
        applied[str(uid)] = (rec["vpa"], _parse_targets(uid, rec.get("targets")))
    blocked: dict[str, Blocked] = {}
    raw_blocked = doc.get("blocked", {})
    if not isinstance(raw_blocked, Mapping):
        raise ValueError("blocked must be a map")
    for uid, rec in raw_blocked.items():
        if (
            not isinstance(rec, Mapping)
            or not isinstance(rec.get("vpa"), str)
            or not isinstance(rec.get("message", ""), str)
        ):
            raise ValueError(f"pod {uid}: a blocked record needs vpa, targets, state and message")
        try:
            state = ResizeBlock(str(rec.get("state")))
        except ValueError:
            raise ValueError(f"pod {uid}: state {rec.get('state')!r} is not Infeasible or Deferred") from None
        blocked[str(uid)] = Blocked(
            rec["vpa"], _parse_targets(uid, rec.get("targets")), state, rec.get("message", "")
        )
    return ActuatorState(applied, blocked, _parse_floors(doc.get("floors", {})))
