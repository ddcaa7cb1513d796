"""Reconcile a node once: compute -> diff -> plan -> execute (the `apply` command, and the daemon's tiers).

Only differing values are written, so a converged node gets zero writes. When a CRI endpoint is given
the runtime is checked first: if it does not answer, nothing is written at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent import pipeline
from agent.config.settings import Settings
from agent.core.compute import NodeComputation
from agent.core.diff import Owner, not_yet_created
from agent.core.model import UNLIMITED, ContainerValues, PodView, Problem
from agent.core.plan import CgroupStep, Plan
from agent.pipeline.execute import CgroupStepRunner, Execution, execute, file_runner

if TYPE_CHECKING:
    from agent.cri.client import CRIClient


@dataclass(frozen=True, slots=True)
class ApplyReport:
    plan: Plan
    execution: Execution
    waiting: tuple[str, ...]
    warnings: tuple[Problem, ...]
    errors: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        return not self.errors and self.execution.failed is None

    def to_json(self) -> dict[str, Any]:
        steps: list[dict[str, Any]] = []
        for o in self.execution.outcomes:
            item = o.step.to_json() | {"status": "done" if o.ok else "failed"}
            if o.error:
                item["error"] = o.error
            steps.append(item)
        done = len(self.execution.outcomes)
        steps.extend(s.to_json() | {"status": "skipped"} for s in self.plan.steps[done:])
        errors = [{"pod": e.pod, "message": e.message} for e in self.errors]
        failed = self.execution.failed
        if failed is not None:
            pod = getattr(failed.step, "pod", None)
            errors.append({"pod": pod, "message": failed.error or "failed"})
        return {
            "writes": self.execution.writes,
            "steps": steps,
            "waiting": list(self.waiting),
            "warnings": [{"pod": w.pod, "message": w.message} for w in self.warnings],
            "errors": errors,
        }


def ensure_tiers(env: pipeline.Environment) -> None:
    """--create-qos-cgroups: make the tier cgroups (bare nodes without a kubelet-made tree)."""
    from agent.core.compute.tiers import tier_names
    from cgroupfs.layout import cgroup_directory
    from cgroupfs.types import Controller

    names = tier_names(env.settings.cgroup_root_name)
    for name in names.values():
        for controller in Controller:
            d = cgroup_directory(name, controller, env.hierarchy, env.settings.cgroup_driver)
            if d is not None and not env.files.exists(d):
                env.files.mkdir(d)


def reconcile_once(settings: Settings, env: pipeline.Environment | None = None) -> ApplyReport:
    env = env or pipeline.environment(settings)
    cri = None
    enrich = None
    if settings.cri_endpoint:
        from agent.cri.client import CRIClient
        from agent.cri.runtime_ids import with_runtime_ids

        cri = CRIClient(settings.cri_endpoint)
        runtime = (
            cri.version().runtime_name
        )  # a runtime that does not answer stops everything before any write
        client = cri

        def enrich(pods: tuple[PodView, ...]) -> tuple[PodView, ...]:
            return with_runtime_ids(pods, client, runtime)

    if settings.create_qos_cgroups:
        ensure_tiers(env)
    result = pipeline.run(settings, include_containers=True, env=env, enrich=enrich)
    node, waiting = not_yet_created(result.diff)
    from agent.core.plan import build_plan

    plan = build_plan(node, result.extra, include_containers=cri is not None)
    warnings = list(node.warnings) + list(plan.warnings)
    if cri is None and any(f.differs for f in node.changes if f.desired.owner.value == "container"):
        warnings.append(
            Problem(None, "no --cri-endpoint: container values that differ are left to the runtime")
        )
    runner = file_runner(env.files)
    if settings.cgroup_driver.value == "systemd":
        from agent.pipeline.systemd import systemd_runner
        from cgroupfs.systemd.bus import SystemdBus
        from cgroupfs.systemd.driver import SystemdUnits

        desired = {t.cgroup: t.values for t in result.diff.computation.tiers}
        desired |= {p.cgroup: p.values for p in result.diff.computation.pods}
        runner = systemd_runner(
            SystemdUnits(SystemdBus()), env.files, settings.cpu_weight_formula.value, desired
        )
    if cri is not None:
        runner = _notify_sandboxes(runner, cri, result.diff.computation)
    execution = execute(plan, runner, cri)
    return ApplyReport(plan, execution, waiting, tuple(warnings), (*node.errors, *plan.errors))


def _notify_sandboxes(runner: CgroupStepRunner, cri: CRIClient, comp: NodeComputation) -> CgroupStepRunner:
    """Before a pod's first pod-level write, tell the runtime its new resources (UpdatePodSandboxResources,
    best effort, as the kubelet does); a runtime without the rpc (containerd 1.6) is not asked again.
    The agent writes the pod cgroup itself either way: runtimes only record the values and run NRI hooks."""
    by_key = {p.pod.key: p for p in comp.pods}
    told: set[str] = set()
    supported = True

    def run(step: CgroupStep) -> int:
        nonlocal supported
        pod = by_key.get(step.pod or "") if step.owner is Owner.POD else None
        if supported and pod is not None and pod.pod.key not in told:
            told.add(pod.pod.key)
            sandboxes = [s for s in cri.list_sandboxes(pod_uid=pod.pod.uid) if s.ready]
            if sandboxes:
                v = pod.values
                resources = ContainerValues(
                    cpu_shares=v.cpu_shares or 2,
                    cpu_quota=v.cpu_quota or UNLIMITED,
                    cpu_period=v.cpu_period or 100_000,
                    memory_limit=v.memory_limit or UNLIMITED,
                )
                supported = cri.update_pod_sandbox_resources(sandboxes[0].id, None, resources)
        return runner(step)

    return run
