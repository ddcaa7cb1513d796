"""The `rollout:` config section: graceful in-place updates of opted-in StatefulSets and DaemonSets.

    rollout:
      enabled: false                   # watch StatefulSets and DaemonSets that opt in (default off)
      metadataInPlace: false           # template labels/annotations changes patched on the pod
      resourcesInPlace: false          # container resources changes through pods/resize
      readyTimeout: 5m                 # an updated pod not Ready by then halts the rollout
      allowWithoutAdmissionPolicy: false  # run where the ValidatingAdmissionPolicy API is missing
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.infra.configsection import as_bool, as_seconds, parse_section

if TYPE_CHECKING:
    from agent.rollout.eligibility import Options


@dataclass(frozen=True, slots=True)
class RolloutSettings:
    """The `rollout` section: graceful in-place updates of workloads."""

    enabled: bool = False
    metadata_in_place: bool = False
    resources_in_place: bool = False
    ready_timeout_s: float = 300.0
    allow_without_admission_policy: bool = False

    def options(self) -> Options:
        from agent.rollout.eligibility import Options  # loaded by the rollout, not by the settings

        return Options(self.metadata_in_place, self.resources_in_place)


_BOOLS = {
    "enabled": "enabled",
    "metadataInPlace": "metadata_in_place",
    "resourcesInPlace": "resources_in_place",
    "allowWithoutAdmissionPolicy": "allow_without_admission_policy",
}


def _rollout_key(key: str, value: object) -> dict[str, Any]:
    if key in _BOOLS:
        return {_BOOLS[key]: as_bool(value)}
    if key == "readyTimeout":
        return {"ready_timeout_s": as_seconds(value, "5m", allow_zero=False)}
    raise ValueError("unknown setting")


def parse_rollout_settings(raw: object) -> RolloutSettings:
    """The section; ValueError lists every problem."""
    return parse_section("rollout", raw, RolloutSettings(), _rollout_key)
