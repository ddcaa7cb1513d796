"""The VPA targets applied on this node by the agent's own engine, as kept across restarts (the file's
format; agent.vpastate reads and writes it).

Why: where the agent resizes containers, an applied VPA target lives only in the source (the pod spec is
never changed); after a restart the updater's condition may no longer hold (the pod is inside its
bounds now), and without this file the pod would be resized back to its spec. One small JSON file in
the state directory, written atomically on each change; an unreadable file is set aside and counts as
empty (the next decisions rebuild it), with one warning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from agent.model import Resources
from agent.vpa.policy import ContainerTarget

FILE: Final = "vpa-applied.json"
VERSION: Final = 1

Applied = Mapping[str, tuple[str, tuple[ContainerTarget, ...]]]  # pod uid -> (VPA key, targets)


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


def dumps(applied: Applied) -> bytes:
    pods = {
        uid: {
            "vpa": vpa,
            "targets": [
                {"container": t.container, "requests": _res(t.requests), "limits": _res(t.limits)} for t in targets
            ],
        }
        for uid, (vpa, targets) in sorted(applied.items())
    }
    return json.dumps({"version": VERSION, "pods": pods}, sort_keys=True).encode()


def loads(data: bytes) -> dict[str, tuple[str, tuple[ContainerTarget, ...]]]:
    """The applied targets; ValueError naming the problem for anything else."""
    try:
        doc: Any = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(doc, Mapping) or doc.get("version") != VERSION or not isinstance(doc.get("pods"), Mapping):
        raise ValueError(f"not a version {VERSION} file of applied VPA targets")
    out: dict[str, tuple[str, tuple[ContainerTarget, ...]]] = {}
    for uid, rec in doc["pods"].items():
        if not isinstance(rec, Mapping) or not isinstance(rec.get("vpa"), str) or not isinstance(rec.get("targets"), list):
            raise ValueError(f"pod {uid}: a record needs vpa and targets")
        targets = []
        for t in rec["targets"]:
            if not isinstance(t, Mapping) or not isinstance(t.get("container"), str):
                raise ValueError(f"pod {uid}: a target needs a container name")
            targets.append(ContainerTarget(t["container"], _parse_res(t.get("requests", {})), _parse_res(t.get("limits", {}))))
        out[str(uid)] = (rec["vpa"], tuple(targets))
    return out
