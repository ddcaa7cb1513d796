"""The executor: runs a plan's steps in order through injected drivers and stops at the first failure.

It never reorders and never skips ahead: a step that fails ends the run, so no later step (which the
plan ordered on the assumption that this one succeeded) can break the child-within-parent rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from agent.core.model import ContainerID, ContainerValues
from agent.core.plan import CgroupStep, Plan, RestartStep, Step
from cgroupfs.errors import MemoryBelowUsage

STOP_GRACE_S = 30  # the kubelet's default terminationGracePeriodSeconds


class FileWriter(Protocol):
    def write(self, relpath: str, value: str) -> None: ...


class ContainerUpdater(Protocol):
    """The runtime side of a plan (agent.cri.client.CRIClient): resize in place, or stop for a restart."""

    def update_container_resources(self, container_id: ContainerID, values: ContainerValues) -> None: ...

    def stop_container(self, container_id: ContainerID, timeout_s: int) -> None: ...


class CgroupStepRunner(Protocol):
    """How a cgroup step reaches the kernel: a plain file write, or a systemd unit property first."""

    def __call__(self, step: CgroupStep) -> int: ...


@dataclass(frozen=True, slots=True)
class StepOutcome:
    step: Step
    ok: bool
    error: str | None = None
    error_type: str | None = None


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A QoS tier's memory limit the kernel would not lower to `wanted` (usage above it): it was set at
    `set_to`, the usage, so the tier cannot grow further; a later pass lowers it again."""

    path: str
    wanted: int
    set_to: int


@dataclass(slots=True)
class Execution:
    outcomes: list[StepOutcome] = field(default_factory=list)
    writes: int = 0
    skipped: int = 0  # steps not run because an earlier one failed
    shortfalls: list[Shortfall] = field(default_factory=list)

    @property
    def failed(self) -> StepOutcome | None:
        return next((o for o in self.outcomes if not o.ok), None)


def file_runner(files: FileWriter) -> CgroupStepRunner:
    def run(step: CgroupStep) -> int:
        files.write(step.path, step.setting.value)
        return 1

    return run


def execute(
    plan: Plan | Sequence[Step],
    cgroup: CgroupStepRunner,
    containers: ContainerUpdater | None,
    on_step: Callable[[StepOutcome], None] | None = None,
    *,
    stop_grace_s: int = STOP_GRACE_S,
) -> Execution:
    """Run the steps in order and count what was written. A failed step of a pod skips that pod's
    later steps, not the other pods' (siblings do not depend on each other: one pod's fault must not
    spoil another's); the first tier step after any failure stops the run, since what follows may rely
    on it (a tier that shrinks after its pods, a pod that grows after its tier)."""
    steps = plan.steps if isinstance(plan, Plan) else tuple(plan)
    result = Execution()
    failed_pods: set[str] = set()
    for i, step in enumerate(steps):
        pod = getattr(step, "pod", None)
        if failed_pods and (pod is None or pod in failed_pods):
            if pod is None:  # a tier step: nothing after it may run
                result.skipped += len(steps) - i
                return result
            result.skipped += 1
            continue
        try:
            if isinstance(step, CgroupStep):
                if step.at_usage_on_refusal:
                    result.writes += _write_or_clamp(step, cgroup, result)
                else:
                    result.writes += cgroup(step)
            else:
                if containers is None:
                    raise RuntimeError("no CRI endpoint: cannot update containers")
                if isinstance(step, RestartStep):
                    containers.stop_container(step.container_id, stop_grace_s)
                else:
                    containers.update_container_resources(step.container_id, step.values)
                result.writes += 1
        except Exception as err:  # every driver error is typed; report it, then stop (or skip the pod)
            outcome = StepOutcome(step, False, str(err), type(err).__name__)
            result.outcomes.append(outcome)
            if on_step:
                on_step(outcome)
            if pod is None:
                result.skipped += len(steps) - i - 1
                return result
            failed_pods.add(pod)
            continue
        outcome = StepOutcome(step, True)
        result.outcomes.append(outcome)
        if on_step:
            on_step(outcome)
    return result


_CLAMP_ATTEMPTS = 3  # usage moves: each refusal names the usage of that moment


def _write_or_clamp(step: CgroupStep, cgroup: CgroupStepRunner, result: Execution) -> int:
    """The kubelet's retrySetMemoryReserve: a tier limit the kernel refuses (usage above it) is set at
    the usage instead, so that the tier stops growing; the plan then goes on."""
    try:
        return cgroup(step)
    except MemoryBelowUsage as err:
        refusal = err
    for _ in range(_CLAMP_ATTEMPTS):
        usage = refusal.usage
        if usage is None:
            break
        at_usage = replace(step, setting=replace(step.setting, value=str(usage)))
        try:
            written = cgroup(at_usage)
        except MemoryBelowUsage as err:
            refusal = err
            continue
        result.shortfalls.append(Shortfall(step.path, int(step.setting.value), usage))
        return written
    raise refusal


def describe(step: Step) -> str:
    if isinstance(step, CgroupStep):
        return f"write {step.path} = {step.setting.value}"
    if isinstance(step, RestartStep):
        why = ", ".join(step.resources)
        return f"restart container {step.pod}/{step.container} (resize policy RestartContainer: {why})"
    return f"update container {step.pod}/{step.container} ({step.resource})"
