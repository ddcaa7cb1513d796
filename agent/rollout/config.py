"""The `rollout:` config section: graceful in-place updates of opted-in StatefulSets and DaemonSets.

    rollout:
      enabled: false                   # watch StatefulSets and DaemonSets that opt in (default off)
      metadataInPlace: false           # template labels/annotations changes patched on the pod
      resourcesInPlace: false          # container resources changes through pods/resize
      readyTimeout: 5m                 # an updated pod not Ready by then halts the rollout
      allowWithoutAdmissionPolicy: false  # run where the ValidatingAdmissionPolicy API is missing
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agent.durations import parse_duration_us
from agent.rollout.eligibility import Options


@dataclass(frozen=True, slots=True)
class RolloutSettings:
    enabled: bool = False
    metadata_in_place: bool = False
    resources_in_place: bool = False
    ready_timeout_s: float = 300.0
    allow_without_admission_policy: bool = False

    def options(self) -> Options:
        return Options(self.metadata_in_place, self.resources_in_place)


_BOOLS = {
    "enabled": "enabled",
    "metadataInPlace": "metadata_in_place",
    "resourcesInPlace": "resources_in_place",
    "allowWithoutAdmissionPolicy": "allow_without_admission_policy",
}


def parse_rollout_settings(raw: object) -> RolloutSettings:
    """The section; ValueError lists every problem."""
    if raw is None:
        return RolloutSettings()
    if not isinstance(raw, Mapping):
        raise ValueError("rollout must be a map of settings")
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        try:
            if key in _BOOLS:
                if not isinstance(value, bool):
                    raise ValueError(f"{value!r} is not true or false")
                changes[_BOOLS[key]] = value
            elif key == "readyTimeout":
                seconds = parse_duration_us(str(value)) / 1e6 if isinstance(value, str) else value
                if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
                    raise ValueError(f"{value!r} is not a duration like 5m")
                changes["ready_timeout_s"] = float(seconds)
            else:
                raise ValueError("unknown setting")
        except ValueError as err:
            problems.append(f"rollout.{key}: {err}")
    if problems:
        raise ValueError("; ".join(problems))
    return replace(RolloutSettings(), **changes)
