"""The `vpa:` config section: VPA in place on this node.

    vpa:
      enabled: true                 # watch VPAs; off: no VPA watch, nothing VPA-driven (default off)
      actuate: opted-in             # or "all": every VPA, without the kube-cgroup-agent.io/vpa-actuator annotation
      treatRecreateAsInPlace: false # Auto/Recreate VPAs too (their updater would evict; the agent never does)
      podLifetimeThreshold: 12h     # VPA's --in-recommendation-bounds-eviction-lifetime-threshold
      minChange: 0.1                # VPA's --pod-update-threshold
      memoryUsageMargin: 0.1        # a memory limit never goes below the working set x 1.1
      react:                        # reactions in place, in seconds (agent.vpa.react), for the VPAs acted on
        cpuStarvation: true         # a throttled container gets more CPU, back to the recommendation when calm
        oom: true                   # an OOM-killed container gets VPA's OOM bump of its memory

The panic button is the node label `kube-cgroup-agent.io/vpa=off`: one label on the node, seen through a
watch of the node, stops every new VPA-driven change there; nothing already applied is touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from agent.infra.configsection import as_bool, as_seconds, doc, parse_section
from agent.vpa.defaults import MIN_CHANGE, POD_LIFETIME_S

if TYPE_CHECKING:
    from agent.vpa.policy import Options

PANIC_LABEL: Final = "kube-cgroup-agent.io/vpa"  # value "off" on the node


@dataclass(frozen=True, slots=True)
class VPASettings:
    """The `vpa` section: VPA recommendations applied in place."""

    enabled: bool = field(default=False, metadata=doc(
        "watch VPAs and apply the recommendations of those that opt in; off: no VPA watch, nothing VPA-driven"))
    actuate_all: bool = field(default=False, metadata=doc(
        "`all`: every VPA, without the `kube-cgroup-agent.io/vpa-actuator: node` annotation",
        default="`opted-in`", kind="`opted-in` or `all`"))
    treat_recreate_as_in_place: bool = field(default=False, metadata=doc(
        "act for `Auto` and `Recreate` VPAs too (their updater would evict; the agent never does)"))
    pod_lifetime_s: float = field(default=POD_LIFETIME_S, metadata=doc(
        "VPA's `--in-recommendation-bounds-eviction-lifetime-threshold`: a younger pod is resized only when a request is outside the "
        "recommended bounds, or after a quick OOM"))
    min_change: float = field(default=MIN_CHANGE, metadata=doc(
        "VPA's `--pod-update-threshold`: the summed relative change that resizes an older pod"))
    usage_margin: float = field(default=0.1, metadata=doc(
        "a memory limit never goes below the working set × (1 + this)"))
    react_cpu_starvation: bool = field(default=True, metadata=doc(
        "a container throttled in ≥ 20 % of its CFS periods over 3 s gets its CPU request (and limit, in "
        "proportion) doubled in place, up to maxAllowed and the node's free allocatable; back to the "
        "recommendation after 2 min calm (docs/vpa-reactions.md)"))
    react_oom: bool = field(default=True, metadata=doc(
        "an OOM-killed container gets VPA's OOM bump (max(used + 100Mi, used × 1.2)) of its memory request "
        "in place, up to maxAllowed; never an eviction (docs/vpa-reactions.md)"))

    def options(self) -> Options:
        from agent.vpa.policy import Options  # the policy is loaded by what acts on VPAs, not by the settings

        return Options(
            self.actuate_all,
            self.treat_recreate_as_in_place,
            self.pod_lifetime_s,
            self.min_change,
            self.usage_margin,
        )


KEYS: Final = {
    "enabled": "enabled",
    "actuate": "actuate_all",
    "treatRecreateAsInPlace": "treat_recreate_as_in_place",
    "podLifetimeThreshold": "pod_lifetime_s",
    "minChange": "min_change",
    "memoryUsageMargin": "usage_margin",
    "react.cpuStarvation": "react_cpu_starvation",
    "react.oom": "react_oom",
}
"""The section's keys and the fields they set (`_vpa_key` parses each)."""


REACT_KEYS: Final = {"cpuStarvation": "react_cpu_starvation", "oom": "react_oom"}


def _react(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be a map like {cpuStarvation: true, oom: true}")
    unknown = sorted(str(k) for k in value if k not in REACT_KEYS)
    if unknown:
        raise ValueError(f"unknown setting {unknown[0]!r} (known: {', '.join(REACT_KEYS)})")
    out: dict[str, Any] = {}
    for k, v in value.items():
        try:
            out[REACT_KEYS[k]] = as_bool(v)
        except ValueError as err:
            raise ValueError(f"{k}: {err}") from None
    return out


def _vpa_key(key: str, value: object) -> dict[str, Any]:
    if key == "react":
        return _react(value)
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
