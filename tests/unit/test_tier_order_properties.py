"""Hypothesis: whatever pods grow, shrink, arrive or leave, the plan keeps the higher tiers' memory
requests protected at every step (qos-reserved), and still converges.

The property is stated on the kernel files, replayed step by step, independently of the plan's own
invariant check: whenever a step changes a pod's or a container's memory, the Burstable and BestEffort
tier limits are at or below both what the old pods' requests and what the new pods' requests ask of them.
"""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.compute import ComputeConfig, compute_node
from agent.core.diff import Observation, Owner, desired_files, diff, not_yet_created
from agent.core.model import Resources
from agent.core.plan import CgroupStep, ContainerStep, RestartStep, build_plan
from agent.pods.parse import parse_pod
from cgroupfs.layout import Hierarchy, RenderOptions

GI = 1 << 30
MI = 1 << 20
HIERARCHY = Hierarchy(v1={"cpu": "cpu", "memory": "memory"})
TIER_FILES = {
    "burstable": "memory/kubepods/burstable/memory.limit_in_bytes",
    "besteffort": "memory/kubepods/besteffort/memory.limit_in_bytes",
}
mem = st.sampled_from([64, 128, 256, 512, 1024, 3072]).map(lambda m: f"{m}Mi")


def _cid(pod: str, container: str) -> str:
    return hashlib.sha256(f"{pod}/{container}".encode()).hexdigest()


def _raw(name: str, qos: str, sizes: list[str]) -> dict[str, Any]:
    containers = []
    for i, size in enumerate(sizes):
        if qos == "Guaranteed":
            res = {"limits": {"cpu": "250m", "memory": size}}
        else:
            res = {"requests": {"cpu": "100m", "memory": size}, "limits": {"memory": "4Gi"}}
        containers.append({"name": f"c{i}", "resources": res})
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"containers": containers},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": c["name"], "containerID": f"containerd://{_cid(name, c['name'])}"}
                for c in containers
            ],
        },
    }


@st.composite
def transitions(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Old and new pod sets over the same names: a pod may grow, shrink, stay, arrive or leave."""
    old: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 5))):
        qos = draw(st.sampled_from(["Guaranteed", "Burstable"]))
        n = draw(st.integers(1, 2))
        fate = draw(st.sampled_from(["resize", "resize", "arrive", "leave"]))
        if fate != "arrive":
            old.append(_raw(f"p{i}", qos, [draw(mem) for _ in range(n)]))
        if fate != "leave":
            new.append(_raw(f"p{i}", qos, [draw(mem) for _ in range(n)]))
    return old, new, draw(st.sampled_from([50, 100]))


def _limit(text: str | None) -> int:
    return int(text) if text is not None else 1 << 62


@settings(max_examples=150, deadline=None)
@given(transitions())
def test_every_pod_memory_step_happens_with_the_lower_tiers_protecting_old_and_new_requests(
    t: tuple[list[dict[str, Any]], list[dict[str, Any]], int],
) -> None:
    old_raws, new_raws, pct = t
    cfg = ComputeConfig(allocatable=Resources(8000, 16 * GI), qos_reserved_memory_percent=pct)
    opts = RenderOptions()

    def files_of(raws: list[dict[str, Any]]) -> dict[str, str]:
        comp = compute_node([parse_pod(r) for r in raws], cfg)
        return {f.setting.path: f.setting.value for f in desired_files(comp, HIERARCHY, opts, opts, True)}

    before = files_of(old_raws)  # the node converged to the old pods
    after = files_of(new_raws)
    new = compute_node([parse_pod(r) for r in new_raws], cfg)
    wanted = desired_files(new, HIERARCHY, opts, opts, True)
    dirs = {p.rsplit("/", 1)[0]: True for p in before}
    node, _ = not_yet_created(diff(new, wanted, Observation(dict(before), dirs)))
    plan = build_plan(node, {}, include_containers=True)
    assert plan.refused is None, plan.refused

    bound = {k: min(_limit(before.get(p)), _limit(after.get(p))) for k, p in TIER_FILES.items()}
    state = dict(before)
    for step in plan.steps:
        assert not isinstance(step, RestartStep)
        touches_pod_memory = step.resource == "memory" and not (
            isinstance(step, CgroupStep) and step.owner is Owner.TIER
        )
        if touches_pod_memory:
            for tier, path in TIER_FILES.items():
                assert _limit(state.get(path)) <= bound[tier], (tier, step.to_json(), plan.steps)
        if isinstance(step, CgroupStep):
            state[step.path] = step.setting.value
        elif isinstance(step, ContainerStep):
            state.update({c.setting.path: c.setting.value for c in step.changes})
    # and the plan converges: every file of a pod that is still there ends at its new value
    for path, value in after.items():
        if path in state:
            assert state[path] == value, path
