"""The systemd driver: puts a cgroup's values on its slice unit (create only when asked), over D-Bus.

It writes no files: what systemd cannot express (`properties.leftover_values`) is for the caller to write
through the cgroupfs file module afterwards, as runc's systemd managers call `fsMgr.Set` after
`setUnitProperties`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from cgroupfs.naming import to_systemd_unit
from cgroupfs.systemd.properties import Property, unit_properties
from cgroupfs.types import CgroupName, CgroupValues, CgroupVersion, NameError_

Method = Literal["SetUnitProperties", "StartTransientUnit"]


class UnitBus(Protocol):
    """What the driver needs from `cgroupfs.systemd.bus.SystemdBus` (a fake in unit tests)."""

    def set_unit_properties(
        self, unit: str, properties: Sequence[Property], runtime: bool = True
    ) -> None: ...

    def start_transient_slice(
        self,
        unit: str,
        properties: Sequence[Property],
        *,
        description: str | None = None,
        parent: str | None = None,
    ) -> bool: ...


@dataclass(frozen=True, slots=True)
class PropertyCall:
    """One D-Bus call made on a unit: the agent counts these as writes and logs them."""

    method: Method
    unit: str
    properties: tuple[Property, ...]


class SystemdUnits:
    """Applies `CgroupValues` to the slice unit of a `CgroupName`.

    Idempotent: the same values always produce the same properties, and systemd treats re-setting a
    property to its value as a no-op on the kernel side. Nothing is cached, so a value someone else changed
    (the kubelet, an admin's `systemctl set-property`) is corrected on the next apply.
    """

    def __init__(self, bus: UnitBus) -> None:
        self._bus = bus

    def apply(
        self,
        name: CgroupName,
        values: CgroupValues,
        version: CgroupVersion,
        weight_formula: str,
        *,
        create: bool = False,
    ) -> list[PropertyCall]:
        """Set the unit's properties; with `create`, start the slice first as the kubelet does.

        Without `create`, a unit that does not exist raises `bus.NoSuchUnit` (a pod slice not made yet).
        Returns the calls made, in order; empty when `values` hold nothing systemd expresses.
        """
        unit = to_systemd_unit(name)
        properties = unit_properties(values, version, weight_formula)
        if create:
            if not name.parts:
                raise NameError_("the root slice cannot be created")
            parent = to_systemd_unit(name.parent)
            created = self._bus.start_transient_slice(
                unit, properties, description=f"kube-cgroup-agent {name}", parent=parent
            )
            calls = [PropertyCall("StartTransientUnit", unit, properties)]
            if not created:
                calls.append(PropertyCall("SetUnitProperties", unit, properties))
            return calls
        if not properties:
            return []
        self._bus.set_unit_properties(unit, properties, runtime=True)
        return [PropertyCall("SetUnitProperties", unit, properties)]
