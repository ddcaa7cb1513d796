"""A qos-reserved tier limit the formula puts below zero (the pods, as they ask, want more memory than
allocatable: a growth not admitted counts) is set at the tier's usage, as the kubelet's retry does after
the kernel refuses the negative value; through every driver (the systemd runner takes the step's value)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agent.core.compute import ComputeConfig, compute_node
from agent.core.diff import NodeDiff, Observation, desired_files, diff
from agent.core.model import Resources
from agent.core.plan import CgroupStep, build_plan
from agent.core.plan.tiers import _below_zero
from agent.pipeline.systemd import step_values
from agent.pods.parse import parse_pod
from cgroupfs.layout import Hierarchy, RenderOptions
from cgroupfs.types import UNLIMITED, CgroupValues

GI = 1 << 30
MI = 1 << 20
HIERARCHY = Hierarchy(v1={"cpu": "cpu", "memory": "memory"})
BURSTABLE = "memory/kubepods/burstable/memory.limit_in_bytes"
BESTEFFORT = "memory/kubepods/besteffort/memory.limit_in_bytes"


def _pod(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": "Running"},
    }


def _node(guaranteed_memory: str) -> NodeDiff:
    """A 4 GiB node at qos-reserved 100 %: one Guaranteed pod, one Burstable pod asking 512 MiB; every
    file as it was when the Guaranteed pod asked 1 GiB."""
    cfg = ComputeConfig(allocatable=Resources(8000, 4 * GI), qos_reserved_memory_percent=100)
    opts = RenderOptions()

    def comp(memory: str) -> Any:
        g = _pod("g", {"limits": {"cpu": "1", "memory": memory}})
        b = _pod("b", {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}})
        return compute_node([parse_pod(g), parse_pod(b)], cfg)

    before = comp("1Gi")
    current = {f.setting.path: f.setting.value for f in desired_files(before, HIERARCHY, opts, opts, False)}
    now = comp(guaranteed_memory)
    wanted = desired_files(now, HIERARCHY, opts, opts, False)
    return diff(now, wanted, Observation(current, {p.rsplit("/", 1)[0]: True for p in current}))


def _tier_writes(steps: Any) -> dict[str, str]:
    return {s.path: s.setting.value for s in steps if isinstance(s, CgroupStep) and s.path in (BURSTABLE, BESTEFFORT)}


def test_the_formula_below_zero_sets_each_tier_at_its_usage() -> None:
    node = _node("6Gi")  # the Guaranteed pod asks 6 GiB of a 4 GiB node (Infeasible: counted as it asks)
    assert {f.setting.path: int(f.setting.value) for f in node.changes if f.setting.path in (BURSTABLE, BESTEFFORT)} == {
        BURSTABLE: -2 * GI,
        BESTEFFORT: -2 * GI - 512 * MI,
    }
    usage = {
        "memory/kubepods/burstable/memory.usage_in_bytes": str(700 * MI),
        "memory/kubepods/besteffort/memory.usage_in_bytes": str(30 * MI),
    }
    plan = build_plan(node, usage)
    assert plan.refused is None, plan.refused
    assert _tier_writes(plan.steps) == {BURSTABLE: str(700 * MI), BESTEFFORT: str(30 * MI)}
    assert not any(int(s.setting.value) < 0 for s in plan.steps if isinstance(s, CgroupStep) and s.resource == "memory")
    notes = [w.message for w in plan.warnings if "below zero" in w.message]
    assert len(notes) == 2 and all("as the kubelet does" in n for n in notes), plan.warnings


def test_without_its_usage_a_tier_below_zero_is_left_as_it_is() -> None:
    node = _node("6Gi")
    plan = build_plan(node, {"memory/kubepods/burstable/memory.usage_in_bytes": str(700 * MI)})
    assert _tier_writes(plan.steps) == {BURSTABLE: str(700 * MI)}
    assert any("could not be read: left as it is" in w.message for w in plan.warnings), plan.warnings


def test_a_tier_above_zero_is_written_as_computed() -> None:
    node = _node("2Gi")
    plan = build_plan(node, {"memory/kubepods/burstable/memory.usage_in_bytes": str(700 * MI),
                             "memory/kubepods/besteffort/memory.usage_in_bytes": str(30 * MI)})
    assert _tier_writes(plan.steps) == {BURSTABLE: str(2 * GI), BESTEFFORT: str(1536 * MI)}
    assert not any("below zero" in w.message for w in plan.warnings)


@pytest.mark.parametrize(
    ("value", "below"),
    [("-2", True), (str(-4 * GI), True), ("-1", False), ("0", False), ("4096", False), ("max", False)],
)
def test_below_zero_is_any_negative_but_v1s_own_unlimited(value: str, below: bool) -> None:
    assert _below_zero(value) is below


@pytest.mark.parametrize(("text", "limit"), [(str(700 * MI), 700 * MI), ("max", UNLIMITED), ("-1", UNLIMITED)])
def test_the_systemd_runner_sets_the_memory_limit_the_step_holds(text: str, limit: int) -> None:
    node = _node("6Gi")
    step = next(
        s for s in build_plan(node, {"memory/kubepods/burstable/memory.usage_in_bytes": "1"}).steps
        if isinstance(s, CgroupStep) and s.path == BURSTABLE
    )
    step = replace(step, setting=replace(step.setting, value=text))
    assert step_values(step, CgroupValues(cpu_shares=1024, memory_limit=-2 * GI)) == CgroupValues(memory_limit=limit)
