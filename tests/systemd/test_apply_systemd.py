"""`apply` with the systemd driver, one suite over two backends (tests/backends/): a recording fake systemd
on a private bus over the strict fake tree, and the real systemd (PID 1) of the `make e2e-v2` guest.

The pod's and tiers' values go to their slice units as properties over D-Bus, only what systemd cannot
express (hugetlb) is written to files, the kernel's files carry the values, a second apply writes nothing,
`diff` does not flap on systemd's 10 ms quota rounding nor on an exact writer's unrounded quota, and a
daemon-reload keeps everything (while it reverts a write that went around systemd)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.commands.main import main
from agent.config.settings import Settings, from_mapping
from agent.pipeline.apply import reconcile_once
from cgroupfs.systemd.properties import USEC_INFINITY
from cgroupfs.types import CgroupName
from tests.backends.systemd_trees import SYSTEMD_BACKENDS, FakeSystemdBackend, SystemdBackend
from tests.unit.podbuild import ctr, pod

UID = "cccccccc-1111-4000-8000-000000000003"
MI = 1024**2
TIERS = ("kubepods", "kubepods/burstable", "kubepods/besteffort")
POD = f"kubepods/burstable/pod{UID}"


def _name(text: str) -> CgroupName:
    return CgroupName(tuple(text.split("/")))


def _pods(cpu_limit: str = "333m") -> list[dict[str, Any]]:
    return [
        pod(
            "b",
            [
                ctr(
                    "app",
                    req={"cpu": "250m", "memory": "64Mi", "hugepages-2Mi": "2Mi"},
                    lim={"cpu": cpu_limit, "memory": "128Mi", "hugepages-2Mi": "2Mi"},
                )
            ],
            uid=UID,
        )
    ]


def _kubelet_slices(b: SystemdBackend, tmp_path: Path) -> Settings:
    """The slices the kubelet starts (transient units; the pod's with a stale memory limit), hugetlb enabled
    along the pod's path as the kubelet's libcontainer does, and the agent's settings."""
    for tier in TIERS:
        b.start_slice(_name(tier), [("MemoryAccounting", "b", True)])
    b.start_slice(_name(POD), [("MemoryAccounting", "b", True), ("MemoryMax", "t", 512 * MI)])
    b.enable_hugetlb(_name(POD))
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "List", "items": _pods()}))
    raw = {
        "cgroupfs": str(b.cgroupfs),
        "cgroupRoot": b.cgroup_root,
        "cgroupDriver": "systemd",
        "pods": str(tmp_path / "pods.json"),
        "hugepageSizes": ["2Mi"],
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
    return from_mapping(raw)


# (cgroup, file) -> the kernel's value after apply: 333m rounds UP to 34% (systemd keeps whole percents)
FILES = {
    (POD, "cpu.max"): "34000 100000",
    (POD, "cpu.weight"): "10",  # 256 shares, linear
    (POD, "memory.max"): str(128 * MI),
    (POD, "hugetlb.2MB.max"): str(2 * MI),
    ("kubepods/besteffort", "cpu.weight"): "1",
    ("kubepods/burstable", "cpu.weight"): "10",
}
PROPERTIES = {
    (POD, "CPUQuotaPerSecUSec"): 340_000,
    (POD, "CPUWeight"): 10,
    (POD, "MemoryMax"): 128 * MI,
    ("kubepods/besteffort", "CPUWeight"): 1,
}


def _files(b: SystemdBackend) -> dict[tuple[str, str], str]:
    return {(c, f): b.read(_name(c), f) if b.path(_name(c), f).exists() else "<none>" for c, f in FILES}


@pytest.mark.parametrize("systemd_backend", SYSTEMD_BACKENDS, indirect=True)
def test_apply_sets_unit_properties_then_leftover_files_and_converges(
    systemd_backend: SystemdBackend, tmp_path: Path
) -> None:
    b = systemd_backend
    settings = _kubelet_slices(b, tmp_path)
    assert _files(b) != FILES

    report = reconcile_once(settings)
    assert report.ok, report.to_json()
    assert {k: b.unit_property(_name(k[0]), k[1]) for k in PROPERTIES} == PROPERTIES
    assert _files(b) == FILES
    # the quota the diff expects is systemd's rounded one, never the raw 33300
    assert any(s.to_json().get("to") == "34000 100000" for s in report.plan.steps)

    second = reconcile_once(settings)
    assert second.ok and second.execution.writes == 0, second.to_json()
    assert main(["diff", "--config", str(tmp_path / "config.yaml")]) == 0  # no flapping on the rounding

    b.daemon_reload()  # systemd re-applies the units' properties: the agent's values are among them
    assert _files(b) == FILES
    assert main(["diff", "--config", str(tmp_path / "config.yaml")]) == 0


@pytest.mark.parametrize("systemd_backend", SYSTEMD_BACKENDS, indirect=True)
def test_daemon_reload_reverts_a_write_around_systemd(systemd_backend: SystemdBackend, tmp_path: Path) -> None:
    """Why the driver goes through systemd: the fake behaves as the real one does here, or the test above
    would prove nothing on the fake."""
    b = systemd_backend
    assert reconcile_once(_kubelet_slices(b, tmp_path)).ok
    b.write_directly(_name(POD), "cpu.weight", "999")
    b.write_directly(_name(POD), "memory.max", str(64 * MI))
    b.daemon_reload()
    assert b.read(_name(POD), "cpu.weight") == "10"
    assert b.read(_name(POD), "memory.max") == str(128 * MI)


@pytest.mark.parametrize("systemd_backend", SYSTEMD_BACKENDS, indirect=True)
def test_an_exact_writers_quota_is_converged_before_and_after_a_daemon_reload(
    systemd_backend: SystemdBackend, tmp_path: Path
) -> None:
    """runc < 1.3.2 and a kubelet < 1.34 send CPUQuotaPerSecUSec rounded up (340 ms a second for 333m), then
    write the exact quota 33300 to the file (cgroupfs.systemd.grain): the agent's diff accepts it and writes
    nothing; a daemon-reload puts systemd's 34000 back: still converged, still nothing written."""
    b = systemd_backend
    settings = _kubelet_slices(b, tmp_path)
    config = str(tmp_path / "config.yaml")
    assert reconcile_once(settings).ok
    b.write_directly(_name(POD), "cpu.max", "33300 100000")  # what an exact writer's fsMgr.Set leaves
    assert main(["diff", "--config", config]) == 0
    again = reconcile_once(settings)
    assert again.ok and again.execution.writes == 0, again.to_json()
    assert b.read(_name(POD), "cpu.max") == "33300 100000"  # the agent did not "fix" it
    b.daemon_reload()
    assert b.read(_name(POD), "cpu.max") == "34000 100000"
    assert main(["diff", "--config", config]) == 0
    after = reconcile_once(settings)
    assert after.ok and after.execution.writes == 0, after.to_json()


@pytest.mark.parametrize("systemd_backend", SYSTEMD_BACKENDS[:1], indirect=True)
def test_every_property_call_is_a_runtime_change(systemd_backend: SystemdBackend, tmp_path: Path) -> None:
    """A drop-in under /run, not /etc (what the fake systemd recorded); no infinity sent for set values."""
    assert isinstance(systemd_backend, FakeSystemdBackend)
    assert reconcile_once(_kubelet_slices(systemd_backend, tmp_path)).ok
    calls = [c for c in systemd_backend.fake.calls if c.member == "SetUnitProperties"]
    assert calls
    assert all(c.args[1] is True for c in calls)
    pod_unit = systemd_backend.unit(_name(POD))
    sent = {p[0]: p[1][1] for c in calls if c.args[0] == pod_unit for p in c.args[2]}
    assert USEC_INFINITY not in sent.values(), sent
    kubepods = systemd_backend.unit(_name("kubepods"))
    assert all(c.args[0] != kubepods or "MemoryMax" not in dict(c.args[2]) for c in calls)  # no allocatable


@pytest.mark.parametrize("systemd_backend", SYSTEMD_BACKENDS[:1], indirect=True)
def test_a_slice_whose_unit_is_gone_gets_its_files_and_the_rest_goes_on(
    systemd_backend: SystemdBackend, tmp_path: Path
) -> None:
    """The pod's cgroup is still there but systemd no longer has its unit (a pod slice stopped before its
    cgroup is removed): its values go to the files directly (systemd will not revert a cgroup it does not
    manage), the tiers still through their units, and nothing fails."""
    b = systemd_backend
    assert isinstance(b, FakeSystemdBackend)
    settings = _kubelet_slices(b, tmp_path)
    gone = next(u for u in b.fake.units if u.endswith(f"pod{UID.replace('-', '_')}.slice"))
    del b.fake.units[gone]
    report = reconcile_once(settings)
    assert report.ok, report.to_json()
    assert _files(b) == FILES
    assert gone not in b.fake.units  # not brought back by the agent
    set_units = {c.args[0] for c in b.fake.calls if c.member == "SetUnitProperties"}
    assert "kcgfake-kubepods-besteffort.slice" in set_units  # the tiers still through their units
