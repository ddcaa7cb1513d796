"""Cgroup steps under the systemd driver: unit properties over D-Bus first, files for the rest.

A value systemd manages must be set as a unit property (as runc does), or the next `daemon-reload`
reverts it. Each step sets only the property of its own file, so the plan's ordering holds.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.core.plan import CgroupStep
from agent.pipeline.execute import CgroupStepRunner, FileWriter
from cgroupfs import layout
from cgroupfs.systemd.bus import NoSuchUnit
from cgroupfs.systemd.driver import SystemdUnits
from cgroupfs.systemd.properties import unit_properties
from cgroupfs.types import UNLIMITED, CgroupName, CgroupValues


def step_values(step: CgroupStep, full: CgroupValues) -> CgroupValues | None:
    """The part of a cgroup's desired values that this step's file holds (quota travels with period). A
    memory limit is the step's own: the plan may set a tier at its usage rather than at its value."""
    name = step.setting.filename
    if name in (layout.CPU_SHARES, layout.CPU_WEIGHT):
        return CgroupValues(cpu_shares=full.cpu_shares)
    if name in (layout.CPU_MAX, layout.CPU_QUOTA, layout.CPU_PERIOD):
        return CgroupValues(cpu_quota=full.cpu_quota, cpu_period=full.cpu_period)
    if name in (layout.MEMORY_LIMIT, layout.MEMORY_MAX):
        text = step.setting.value
        return CgroupValues(memory_limit=UNLIMITED if text in ("max", str(UNLIMITED)) else int(text))
    if name == layout.MEMORY_LOW:
        return CgroupValues(memory_reservation=full.memory_reservation)
    return None


def systemd_runner(
    units: SystemdUnits,
    files: FileWriter,
    weight_formula: str,
    desired: Mapping[CgroupName, CgroupValues],
) -> CgroupStepRunner:
    """`desired` holds each tier's and pod's desired values, by cgroup name."""

    def run(step: CgroupStep) -> int:
        full = desired.get(step.setting.cgroup)
        values = step_values(step, full) if full is not None else None
        if values is None or not unit_properties(values, step.setting.version, weight_formula):
            files.write(step.path, step.setting.value)
            return 1
        try:
            return len(units.apply(step.setting.cgroup, values, step.setting.version, weight_formula))
        except NoSuchUnit:
            # the cgroup is there (the plan read it) but no unit holds it any more (a pod slice stopped
            # before its cgroup is removed): systemd will not revert a file it does not manage
            files.write(step.path, step.setting.value)
            return 1

    return run
