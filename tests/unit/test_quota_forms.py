"""A CPU limit that is not a whole percent under the systemd driver: the file holds the exact quota (runc < 1.3.2,
a kubelet < 1.34) or systemd's rounded one (newer writers, or any writer after systemd's next re-apply). The
diff accepts both, a daemon-reload's change from one to the other is neither drift nor a revert, the agent's
own writes send the rounded one, and `explain` names both (cgroupfs.systemd.grain, tests/systemd/test_systemd_grain.py)."""

from __future__ import annotations

import json

import pytest

from agent.commands.render import diff_json, explain
from agent.core.compute import ComputeConfig, NodeComputation, compute_node
from agent.core.diff import (
    DesiredFile,
    FileDiff,
    NodeDiff,
    Observation,
    Owner,
    QuotaWriteEvidence,
    WeightFormulaEvidence,
    desired_files,
    diff,
    quota_writes,
)
from agent.core.ownership import resolve
from agent.core.plan import ContainerStep, build_plan
from agent.daemon.drift import DriftTracker
from agent.daemon.gate import Gate
from agent.resize.readback import container_values_from
from cgroupfs.layout import Hierarchy, RenderOptions
from cgroupfs.types import DriverKind
from tests.unit.podbuild import ctr, pod, view

UID = "0e0e0e0e-1111-2222-3333-444444444444"
CID = "f" * 64
V2 = Hierarchy(unified="", unified_controllers=frozenset({"cpu", "memory"}))
SYSTEMD = RenderOptions(driver=DriverKind.SYSTEMD)
EXACT, ROUNDED = "1100 100000", "2000 100000"


def _comp(limit: str = "11m") -> NodeComputation:
    raw = pod("p", [ctr("c", {"cpu": "5m", "memory": "16Mi"}, {"cpu": limit, "memory": "32Mi"})], uid=UID)
    raw["status"] = {"containerStatuses": [{"name": "c", "containerID": "containerd://" + CID}]}
    return compute_node([view(raw)], ComputeConfig())


def _cpu_max(files: tuple[DesiredFile, ...], owner: Owner) -> DesiredFile:
    return next(f for f in files if f.owner is owner and f.setting.filename == "cpu.max")


def _observed(files: tuple[DesiredFile, ...], pod_cpu: str, ctr_cpu: str) -> Observation:
    texts: dict[str, str | None] = {f.setting.path: f.setting.value for f in files}
    texts[_cpu_max(files, Owner.POD).setting.path] = pod_cpu
    texts[_cpu_max(files, Owner.CONTAINER).setting.path] = ctr_cpu
    return Observation(texts, {f.setting.directory: True for f in files})


def test_the_systemd_driver_renders_systemds_quota_and_accepts_the_exact_one() -> None:
    files = desired_files(_comp(), V2, SYSTEMD)
    for owner in (Owner.POD, Owner.CONTAINER):
        f = _cpu_max(files, owner)
        assert (f.setting.value, f.accept) == (ROUNDED, (EXACT,))
    # only CPU limit files have a second form; a whole percent has none
    assert all(not f.accept for f in files if f.setting.filename not in ("cpu.max", "cpu.weight"))
    assert not _cpu_max(desired_files(_comp("20m"), V2, SYSTEMD), Owner.POD).accept


def test_the_cgroupfs_driver_has_one_form() -> None:
    files = desired_files(_comp(), V2, RenderOptions())
    for owner in (Owner.POD, Owner.CONTAINER):
        f = _cpu_max(files, owner)
        assert (f.setting.value, f.accept) == (EXACT, ())


@pytest.mark.parametrize(
    ("pod_cpu", "ctr_cpu", "differ"),
    [
        pytest.param(ROUNDED, EXACT, set(), id="kubelet 1.36 pod, runc 1.1.5 container (the issue's node)"),
        pytest.param(ROUNDED, ROUNDED, set(), id="after a daemon-reload, or newer writers"),
        pytest.param(EXACT, EXACT, set(), id="kubelet < 1.34 and runc < 1.3.2"),
        pytest.param("3000 100000", EXACT, {Owner.POD}, id="a third value is a difference"),
        pytest.param(ROUNDED, "max 100000", {Owner.CONTAINER}, id="no limit is a difference"),
    ],
)
def test_diff_reports_no_difference_for_either_form(pod_cpu: str, ctr_cpu: str, differ: set[Owner]) -> None:
    comp = _comp()
    files = desired_files(comp, V2, SYSTEMD)
    node = diff(comp, files, _observed(files, pod_cpu, ctr_cpu))
    assert {f.desired.owner for f in node.changes} == differ


def test_the_exact_quota_is_a_difference_under_the_cgroupfs_driver() -> None:
    comp = _comp()
    files = desired_files(comp, V2, RenderOptions())
    node = diff(comp, files, _observed(files, EXACT, ROUNDED))
    assert [f.desired.owner for f in node.changes] == [Owner.CONTAINER]


@pytest.mark.parametrize("ownership", [{}, {"podCgroups": "observe", "containerResizes": "observe"}],
                         ids=["the agent owns pods and containers", "observed beside the kubelet"])
def test_a_daemon_reload_is_no_drift_no_revert_and_no_write(ownership: dict[str, str]) -> None:
    """The agent wrote the rounded value (its own write: unit property and file alike); the runtime then
    writes the exact one; a daemon-reload puts systemd's back. No pass counts, holds, notes or writes."""
    comp = _comp()
    files = desired_files(comp, V2, SYSTEMD)
    gate = Gate(resolve(ownership, None, {}), DriftTracker(3, 10.0), True)
    paths = [_cpu_max(files, o).setting.path for o in (Owner.POD, Owner.CONTAINER)]
    gate.wrote([(p, ROUNDED) for p in paths], 0.0)
    for now, (pod_cpu, ctr_cpu) in enumerate([(ROUNDED, EXACT), (EXACT, EXACT), (ROUNDED, ROUNDED)], start=1):
        gated = gate.filter(diff(comp, files, _observed(files, pod_cpu, ctr_cpu)), float(now))
        assert not gated.node.changes and not gated.notes and not gated.warnings and gated.hold_s is None
    assert gate.drift.contested() == {} and gate.drift.yielded == ()
    assert not build_plan(gated.node).steps


@pytest.mark.parametrize(("driver", "sent"), [(DriverKind.SYSTEMD, 2000), (DriverKind.CGROUPFS, 1100)])
def test_the_agent_sends_the_quota_systemd_keeps(driver: DriverKind, sent: int) -> None:
    """A bare node: the agent resizes the container through CRI; under the systemd driver it sends the rounded
    quota, so an exact runtime (runc < 1.3.2) writes what systemd keeps and a daemon-reload changes nothing."""
    comp = _comp()
    files = desired_files(comp, V2, RenderOptions(driver=driver))
    node = diff(comp, files, _observed(files, "5000 100000", "5000 100000"))
    [step] = [s for s in build_plan(node).steps if isinstance(s, ContainerStep) and s.resource == "cpu"]
    assert (step.values.cpu_quota, step.values.cpu_period) == (sent, 100000)


def _request_resize(pod_cpu: str, limit: str = "11m") -> ContainerStep:
    """The container's CPU request grew (5m -> 100m: its weight differs) on a bare node; the pod's and the
    container's cpu.max hold `pod_cpu` and the exact quota."""
    raw = pod("p", [ctr("c", {"cpu": "100m", "memory": "16Mi"}, {"cpu": limit, "memory": "32Mi"})], uid=UID)
    raw["status"] = {"containerStatuses": [{"name": "c", "containerID": "containerd://" + CID}]}
    comp = compute_node([view(raw)], ComputeConfig())
    files = desired_files(comp, V2, SYSTEMD)
    observed = _observed(files, pod_cpu, EXACT)
    texts = dict(observed.files)
    texts[next(f for f in files if f.owner is Owner.CONTAINER and f.setting.filename == "cpu.weight").setting.path] = "1"
    node = diff(comp, files, Observation(texts, observed.dirs))
    [step] = [s for s in build_plan(node).steps if isinstance(s, ContainerStep)]
    return step


@pytest.mark.parametrize(
    ("pod_cpu", "limit", "sent"),
    [
        pytest.param(ROUNDED, "11m", 2000, id="the pod holds systemd's quota: the rounded one"),
        pytest.param(EXACT, "11m", 1100, id="the pod holds the exact one (kubelet < 1.34): the exact one, or EINVAL"),
        pytest.param(EXACT, "13m", 2000, id="the pod grows to systemd's first: the rounded one"),
    ],
)
def test_a_container_is_never_sent_above_its_pod(pod_cpu: str, limit: str, sent: int) -> None:
    step = _request_resize(pod_cpu, limit)
    assert (step.resource, step.values.cpu_quota, step.values.cpu_shares) == ("cpu", sent, 102)


@pytest.mark.parametrize(
    ("held", "quota"),
    [(EXACT, 1100), (ROUNDED, 1100), ("5000 100000", 5000)],
    ids=["exact: the allocation", "systemd's: the same allocation, not a resize to 20m", "another: a resize"],
)
def test_the_allocation_read_back_from_the_files(held: str, quota: int) -> None:
    comp = _comp()
    [container] = comp.pods[0].containers
    f = _cpu_max(desired_files(comp, V2, SYSTEMD), Owner.CONTAINER)
    got = container_values_from({"cpu.max": held}, container.values, {"cpu.max": (f.setting.value, *f.accept)})
    assert got is not None and got.cpu_quota == quota


def _held(owner: Owner, current: str | None) -> FileDiff:
    files = desired_files(_comp(), V2, SYSTEMD)
    return FileDiff(_cpu_max(files, owner), current, False)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ([_held(Owner.CONTAINER, EXACT), _held(Owner.CONTAINER, EXACT)], {Owner.CONTAINER: (2, 0)}),
        ([_held(Owner.POD, ROUNDED), _held(Owner.CONTAINER, EXACT)], {Owner.POD: (0, 1), Owner.CONTAINER: (1, 0)}),
        ([_held(Owner.CONTAINER, "5000 100000"), _held(Owner.CONTAINER, None)], {Owner.CONTAINER: (0, 0)}),
    ],
    ids=["runc < 1.3.2", "kubelet 1.36 and runc 1.1.5", "a resize under way and a missing file are no evidence"],
)
def test_the_evidence_of_the_writers(files: list[FileDiff], expected: dict[Owner, tuple[int, int]]) -> None:
    assert {o: (e.exact, e.rounded) for o, e in quota_writes(files).items()} == expected


@pytest.mark.parametrize(
    ("evidence", "said"),
    [
        (QuotaWriteEvidence(Owner.CONTAINER, exact=2), "exact (runc < 1.3.2), seen in 2; systemd writes the rounded"),
        (QuotaWriteEvidence(Owner.POD, rounded=3), "rounded (a kubelet >= 1.34, or re-applied by systemd since), seen in 3"),
        (QuotaWriteEvidence(Owner.CONTAINER, exact=1, rounded=1), "both: 1 exact (written by runc < 1.3.2, not re-applied"),
        (QuotaWriteEvidence(Owner.POD), "no quota that is not a whole percent read"),
    ],
)
def test_the_evidence_says_who(evidence: QuotaWriteEvidence, said: str) -> None:
    assert evidence.describe().startswith(said), evidence.describe()


def test_explain_shows_both_values_and_why() -> None:
    comp = _comp()
    files = desired_files(comp, V2, SYSTEMD)
    node = diff(comp, files, _observed(files, ROUNDED, EXACT))
    text = explain(comp.pods[0], node.files, quotas=quota_writes(node.files), weights=WeightFormulaEvidence(linear=1))
    assert "systemd keeps CPUQuota= in whole percents (10 ms per CPU second)" in text
    assert "pod: exact 1100 per 100000 µs, systemd's 2000 per 100000 µs" in text
    assert "container c: exact 1100 per 100000 µs, systemd's 2000 per 100000 µs" in text
    assert "containers by the runtime: exact (runc < 1.3.2), seen in 1" in text
    assert "pod slices by the kubelet: rounded (a kubelet >= 1.34" in text
    assert "cpu.weight formula (linear) says runc writes quotas exact" in text
    assert f"{EXACT}  (ok: the exact quota; systemd keeps {ROUNDED}, and writes it at its next re-apply)" in text
    # the cgroupfs driver, or a whole percent: nothing about it
    assert "CPUQuota=" not in explain(comp.pods[0], node.files)
    whole = _comp("20m")
    assert "CPUQuota=" not in explain(whole.pods[0], quotas={})


def test_diff_json_lists_both_forms_for_pods_and_containers() -> None:
    comp = _comp()
    files = desired_files(comp, V2, SYSTEMD)
    out = json.loads(diff_json(diff(comp, files, _observed(files, ROUNDED, EXACT)), show_all=True))
    pod_cpu = next(c for c in out["cgroups"] if c["path"].endswith("cpu.max"))
    ctr_cpu = next(c for c in out["containers"] if c["path"].endswith("cpu.max"))
    assert (pod_cpu["desired"], pod_cpu["accept"]) == (ROUNDED, [EXACT])
    assert (ctr_cpu["desired"], ctr_cpu["current"], ctr_cpu["accept"]) == (ROUNDED, EXACT, [EXACT])
    assert "accept" not in next(c for c in out["cgroups"] if c["path"].endswith("memory.max"))


def test_nodediff_of_nothing() -> None:
    """A node without pods has no quota evidence."""
    empty = NodeDiff((), (), (), compute_node([], ComputeConfig()))
    assert quota_writes(empty.files) == {}
