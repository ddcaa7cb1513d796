"""Which shares→weight formula the runtime used for containers, told from their cpu.weight files: the
kubelet's pod weights are linear, runc >= 1.3.2 / crun >= 1.23 write containers' quadratically."""

from __future__ import annotations

import pytest

from agent.core.diff import DesiredFile, FileDiff, Owner, WeightFormulaEvidence, container_weight_formula
from cgroupfs.convert import shares_to_weight_linear, shares_to_weight_quadratic
from cgroupfs.layout import CPU_MAX, CPU_WEIGHT, FileSetting
from cgroupfs.types import CgroupName, CgroupVersion, Controller


def _weight(shares: int, current: str | None, owner: Owner = Owner.CONTAINER, filename: str = CPU_WEIGHT) -> FileDiff:
    lin, quad = shares_to_weight_linear(shares), shares_to_weight_quadratic(shares)
    setting = FileSetting(CgroupName(("kubepods", "burstable", "podx")), Controller.CPU, CgroupVersion.V2,
                          "kubepods/burstable/podx/ctr", filename, str(lin))
    accept = (str(lin), str(quad)) if owner is Owner.CONTAINER and filename == CPU_WEIGHT else ()
    return FileDiff(DesiredFile(setting, owner, "ns/p", None, "app", None, accept), current, False)


def test_the_formulas_differ_where_the_table_says() -> None:
    # 256 shares (250m): linear 10, quadratic 35; 2 and 262144 give 1 and 10000 either way
    assert (shares_to_weight_linear(256), shares_to_weight_quadratic(256)) == (10, 35)
    assert shares_to_weight_linear(1024) == 39 and shares_to_weight_quadratic(1024) == 100
    assert shares_to_weight_linear(2) == shares_to_weight_quadratic(2) == 1


@pytest.mark.parametrize(
    ("files", "formula", "said"),
    [
        ([_weight(256, "35"), _weight(1024, "100")], "quadratic", "quadratic (runc >= 1.3.2 or crun >= 1.23), seen in 2"),
        ([_weight(256, "10"), _weight(2, "1")], "linear", "linear (runc < 1.3.2, crun < 1.23, as the kubelet's"),
        ([_weight(256, "10"), _weight(1024, "100")], "mixed", "mixed: 1 container(s) linear, 1 quadratic"),
        ([_weight(2, "1"), _weight(262144, "10000")], "unknown", "unknown: no running container's weight tells"),
        ([_weight(256, "55")], "unknown", "unknown: no container cpu.weight read"),  # a resize under way
        ([_weight(256, None)], "unknown", "unknown: no container cpu.weight read"),  # not created yet
        # the kubelet's own pod weight, and a container file of another kind, are no evidence
        ([_weight(256, "10", owner=Owner.POD), _weight(256, "10", filename=CPU_MAX)], "unknown", "unknown"),
    ],
)
def test_the_evidence_names_the_formula(files: list[FileDiff], formula: str, said: str) -> None:
    evidence = container_weight_formula(files)
    assert evidence.formula == formula
    assert evidence.describe().startswith(said), evidence.describe()


def test_explain_names_both_formulas() -> None:
    from agent.commands.render import explain
    from agent.core.compute.config import ComputeConfig
    from agent.core.compute.pod import compute_pod
    from tests.unit.podbuild import ctr, pod, view

    comp = compute_pod(view(pod("web", [ctr("app", {"cpu": "250m"})])), ComputeConfig())
    text = explain(comp, weights=WeightFormulaEvidence(quadratic=3))
    assert "cpu.weight: pod and QoS cgroups linear (the kubelet" in text
    assert "containers by the runtime: quadratic (runc >= 1.3.2 or crun >= 1.23), seen in 3" in text
