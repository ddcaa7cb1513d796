"""One pod's failed step skips that pod's later steps, not the other pods'; a tier step after a failure
stops the run (what follows may rely on it)."""

from __future__ import annotations

import pytest

from agent.core.diff import Owner
from agent.core.plan import CgroupStep
from agent.pipeline.execute import execute
from cgroupfs.layout import FileSetting
from cgroupfs.types import CgroupName, CgroupVersion, Controller

TIER, A, B = None, "default/a", "default/b"


def step(pod: str | None, n: int) -> CgroupStep:
    where = "kubepods" if pod is None else f"kubepods/pod-{pod.split('/')[1]}"
    setting = FileSetting(CgroupName(("kubepods",)), Controller.CPU, CgroupVersion.V1, f"cpu/{where}", f"f{n}", str(n))
    return CgroupStep(setting, None, "cpu", Owner.TIER if pod is None else Owner.POD, pod)


@pytest.mark.parametrize(
    ("steps", "failing", "written", "skipped"),
    [
        # a's failure skips a's later step; b's steps all run
        ([step(A, 1), step(B, 2), step(A, 3), step(B, 4)], {1}, [2, 4], 1),
        # a tier step after a's failure stops everything after it, b's steps included
        ([step(A, 1), step(B, 2), step(TIER, 3), step(B, 4)], {1}, [2], 2),
        # a tier step that fails stops the run at once
        ([step(TIER, 1), step(A, 2)], {1}, [], 1),
        # no failure: everything in order
        ([step(TIER, 1), step(A, 2), step(B, 3)], set(), [1, 2, 3], 0),
        # both pods fail: each skips only its own later steps, then the tier step stops the run
        ([step(A, 1), step(B, 2), step(A, 3), step(B, 4), step(TIER, 5)], {1, 2}, [], 3),
    ],
    ids=["sibling-goes-on", "tier-after-failure-stops", "tier-failure-stops", "no-failure", "two-failures"],
)
def test_a_pods_failure_is_its_own(steps: list[CgroupStep], failing: set[int], written: list[int], skipped: int) -> None:
    done: list[int] = []

    def run(s: CgroupStep) -> int:
        n = int(s.setting.value)
        if n in failing:
            raise OSError(13, "Permission denied")
        done.append(n)
        return 1

    result = execute(steps, run, None)
    assert done == written
    assert result.skipped == skipped
    assert sorted(int(o.step.setting.value) for o in result.outcomes if not o.ok) == sorted(failing)
