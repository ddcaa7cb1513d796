"""The `rollout:` config section: graceful in-place updates of opted-in StatefulSets and DaemonSets.

    rollout:
      enabled: false                   # watch StatefulSets and DaemonSets that opt in (default off)
      metadataInPlace: false           # template labels/annotations changes patched on the pod
      resourcesInPlace: false          # container resources changes through pods/resize
      readyTimeout: 5m                 # an updated pod not Ready by then halts the rollout
      allowWithoutAdmissionPolicy: false  # run where the ValidatingAdmissionPolicy API is missing
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from agent.infra.configsection import as_bool, as_seconds, doc, parse_section

if TYPE_CHECKING:
    from agent.rollout.eligibility import Options


@dataclass(frozen=True, slots=True)
class RolloutSettings:
    """The `rollout` section: graceful in-place updates of workloads."""

    enabled: bool = field(default=False, metadata=doc("watch the StatefulSets and DaemonSets that opt in"))
    metadata_in_place: bool = field(default=False, metadata=doc(
        "template labels/annotations patched on the pod (the admission policy must then allow those labels)"))
    resources_in_place: bool = field(default=False, metadata=doc(
        "container resources changed through `pods/resize`"))
    ready_timeout_s: float = field(default=300.0, metadata=doc(
        "an updated pod not Ready at the new revision by then halts the rollout"))
    allow_without_admission_policy: bool = field(default=False, metadata=doc(
        "run where the ValidatingAdmissionPolicy API is missing (Kubernetes < 1.30)"))

    def options(self) -> Options:
        from agent.rollout.eligibility import Options  # loaded by the rollout, not by the settings

        return Options(self.metadata_in_place, self.resources_in_place)


_BOOLS = {
    "enabled": "enabled",
    "metadataInPlace": "metadata_in_place",
    "resourcesInPlace": "resources_in_place",
    "allowWithoutAdmissionPolicy": "allow_without_admission_policy",
}


KEYS: Final = _BOOLS | {"readyTimeout": "ready_timeout_s"}
"""The section's keys and the fields they set (`_rollout_key` parses each)."""


def _rollout_key(key: str, value: object) -> dict[str, Any]:
    if key in _BOOLS:
        return {_BOOLS[key]: as_bool(value)}
    if key == "readyTimeout":
        return {"ready_timeout_s": as_seconds(value, "5m", allow_zero=False)}
    raise ValueError("unknown setting")


def parse_rollout_settings(raw: object) -> RolloutSettings:
    """The section; ValueError lists every problem."""
    return parse_section("rollout", raw, RolloutSettings(), _rollout_key)
