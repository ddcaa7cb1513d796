"""Who owns each value the agent can manage: the agent, the kubelet, or nobody (observe only).

Why: on a node whose kubelet already actuates a thing (in-place resize, pod-level resources,
qos-reserved), an agent that also writes it fights the kubelet over the same file. `auto` decides from
the kubelet's version and feature gates; the table is written down in docs/ownership.md. Pure.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


class Thing(enum.StrEnum):
    QOS_TIERS = "qosTiers"  # kubepods sizing and the tiers' cpu.shares
    QOS_RESERVED_MEMORY = "qosReservedMemory"  # the tiers' memory limits from qosReserved
    POD_CGROUPS = "podCgroups"  # pod cgroup values derived from the containers
    POD_LEVEL_LIMITS = "podLevelLimits"  # pod cgroup limits from spec.resources (KEP-2837)
    CONTAINER_RESIZES = "containerResizes"  # UpdateContainerResources for in-place resize


class Owner(enum.StrEnum):
    AGENT = "agent"  # the agent writes it and re-applies it when it drifts
    KUBELET = "kubelet"  # the agent never writes it and does not report its differences as drift
    OBSERVE = "observe"  # the agent never writes it and reports differences as drift


@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str | None) -> Version | None:
        """ "v1.33.2", "1.34.0-eks-1" -> 1.33, 1.34; None when absent or unreadable."""
        if not text:
            return None
        m = re.match(r"^v?(\d+)\.(\d+)", text.strip())
        return cls(int(m.group(1)), int(m.group(2))) if m else None

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)


# gate -> (first minor where it exists as alpha, first minor where it is on by default)
_GATES: Final[Mapping[Thing, tuple[str, int, int | None]]] = {
    Thing.CONTAINER_RESIZES: ("InPlacePodVerticalScaling", 27, 33),
    Thing.POD_LEVEL_LIMITS: ("PodLevelResources", 32, 34),
    Thing.QOS_RESERVED_MEMORY: ("QOSReserved", 8, None),  # alpha since 1.8, never on by default
}


def kubelet_does(thing: Thing, version: Version | None, gates: Mapping[str, bool]) -> bool:
    """Whether a kubelet of this version with these gates actuates `thing` itself."""
    if version is None:
        return False  # no kubelet (a bare node) or unknown: nobody else writes it
    if thing is Thing.POD_CGROUPS:
        return kubelet_does(Thing.CONTAINER_RESIZES, version, gates)
    if thing is Thing.QOS_TIERS:
        return False  # the kubelet writes the same values, but only every 60 s: the agent leads
    gate, alpha, default_on = _GATES[thing]
    if not version.at_least(1, alpha):
        return False
    if gate in gates:
        return gates[gate]
    return default_on is not None and version.at_least(1, default_on)


@dataclass(frozen=True, slots=True)
class Ownership:
    owners: Mapping[Thing, Owner]
    reasons: Mapping[Thing, str]

    def owner(self, thing: Thing) -> Owner:
        return self.owners[thing]

    def writes(self, thing: Thing) -> bool:
        return self.owners[thing] is Owner.AGENT


def resolve(
    settings: Mapping[str, str],
    kubelet_version: str | None,
    gates: Mapping[str, bool],
    observe_only: bool = False,
) -> Ownership:
    """Each thing's owner from its setting (auto, agent, kubelet, observe), the kubelet and the mode."""
    version = Version.parse(kubelet_version)
    owners: dict[Thing, Owner] = {}
    reasons: dict[Thing, str] = {}
    for thing in Thing:
        wanted = settings.get(thing.value, "auto")
        if observe_only:
            owners[thing], reasons[thing] = Owner.OBSERVE, "observe-only mode"
        elif wanted != "auto":
            owners[thing], reasons[thing] = Owner(wanted), f"set to {wanted}"
        elif kubelet_does(thing, version, gates):
            owners[thing] = Owner.KUBELET
            reasons[thing] = f"auto: kubelet {kubelet_version} actuates it"
        else:
            owners[thing] = Owner.AGENT
            who = f"kubelet {kubelet_version}" if version else "no kubelet version known"
            reasons[thing] = f"auto: {who} does not actuate it"
    return Ownership(owners, reasons)
