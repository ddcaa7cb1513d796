"""What one pass of the engine did: each driven pod's plan and execution, and the node-wide one."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.core.model import PodUID, Problem
from agent.core.plan import Plan
from agent.pipeline.execute import Execution, Shortfall, StepOutcome
from agent.resize.types import ResizeStatus


@dataclass(frozen=True, slots=True)
class PodPass:
    pod: str | None  # None for the node-wide pass
    plan: Plan
    execution: Execution


@dataclass(slots=True)
class PassReport:
    passes: list[PodPass] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    statuses: tuple[ResizeStatus, ...] = ()
    accepted: list[PodUID] = field(default_factory=list)  # resizes admitted in this pass (for events)

    @property
    def writes(self) -> int:
        return sum(p.execution.writes for p in self.passes)

    @property
    def steps(self) -> list[StepOutcome]:
        return [o for p in self.passes for o in p.execution.outcomes]

    @property
    def shortfalls(self) -> list[Shortfall]:
        return [s for p in self.passes for s in p.execution.shortfalls]

    def plan(self) -> Plan:
        """Every step of the pass in order, as one plan (what `plan` prints)."""
        steps = tuple(s for p in self.passes for s in p.plan.steps)
        warnings = (*self.warnings, *(w for p in self.passes for w in p.plan.warnings))
        errors = (*self.errors, *(e for p in self.passes for e in p.plan.errors))
        blocked = tuple(b for p in self.passes for b in p.plan.blocked)
        return Plan(steps, tuple(warnings), tuple(errors), blocked)
