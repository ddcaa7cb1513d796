"""The `vpa:` config section: VPA in place on this node.

    vpa:
      enabled: true                 # watch VPAs; off: no VPA watch, nothing VPA-driven (default off)
      actuate: opted-in             # or "all": every VPA, without the kube-cgroup-agent.io/vpa-actuator annotation
      treatRecreateAsInPlace: false # Auto/Recreate VPAs too (their updater would evict; the agent never does)
      podLifetimeThreshold: 12h     # VPA's --pod-lifetime-update-threshold
      minChange: 0.1                # VPA's --min-change-priority
      memoryUsageMargin: 0.1        # a memory limit never goes below the working set x 1.1

The panic button is the node label `kube-cgroup-agent.io/vpa=off`: one label on the node, seen through a
watch of the node, stops every new VPA-driven change there; nothing already applied is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from agent.infra.configsection import as_bool, as_seconds, parse_section
from agent.vpa.defaults import MIN_CHANGE, POD_LIFETIME_S

if TYPE_CHECKING:
    from agent.vpa.policy import Options

PANIC_LABEL: Final = "kube-cgroup-agent.io/vpa"  # value "off" on the node


@dataclass(frozen=True, slots=True)
class VPASettings:
    """The `vpa` section: VPA recommendations applied in place."""

    enabled: bool = False
    actuate_all: bool = False
    treat_recreate_as_in_place: bool = False
    pod_lifetime_s: float = POD_LIFETIME_S
    min_change: float = MIN_CHANGE
    usage_margin: float = 0.1

    def options(self) -> Options:
        from agent.vpa.policy import Options  # the policy is loaded by what acts on VPAs, not by the settings

        return Options(
            self.actuate_all,
            self.treat_recreate_as_in_place,
            self.pod_lifetime_s,
            self.min_change,
            self.usage_margin,
        )


def _vpa_key(key: str, value: object) -> dict[str, Any]:
    if key in ("enabled", "treatRecreateAsInPlace"):
        return {"enabled" if key == "enabled" else "treat_recreate_as_in_place": as_bool(value)}
    if key == "actuate":
        if value not in ("opted-in", "all"):
            raise ValueError(f"{value!r} is not opted-in or all")
        return {"actuate_all": value == "all"}
    if key == "podLifetimeThreshold":
        return {"pod_lifetime_s": as_seconds(value, "12h")}
    if key in ("minChange", "memoryUsageMargin"):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 10:
            raise ValueError(f"{value!r} is not a fraction like 0.1")
        return {"min_change" if key == "minChange" else "usage_margin": float(value)}
    raise ValueError("unknown setting")


def parse_vpa_settings(raw: object) -> VPASettings:
    """The section; ValueError lists every problem."""
    return parse_section("vpa", raw, VPASettings(), _vpa_key)
