"""The agent with the systemd driver on the guest's real systemd, where the fake cannot stand in: a slice on
which systemd never set a CPU property (no cpu.weight file yet), and `check` on a systemd-run v2 node.
The behaviour shared with the fake systemd is in tests/systemd/test_apply_systemd.py (backend systemd-v2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.commands.main import main
from agent.config.settings import from_mapping
from agent.pipeline.apply import reconcile_once
from cgroupfs.types import CgroupName
from tests.backends.systemd_trees import SYSTEMD_BACKENDS, GuestSystemdBackend, SystemdBackend
from tests.unit.podbuild import ctr, pod

pytestmark = pytest.mark.v2guest

GUEST = [p for p in SYSTEMD_BACKENDS if p.id == "systemd-v2"]
UID = "dddddddd-2222-4000-8000-000000000004"
MI = 1024**2
POD = CgroupName(("kubepods", "burstable", f"pod{UID}"))


def _name(text: str) -> CgroupName:
    return CgroupName(tuple(text.split("/")))


@pytest.mark.parametrize("systemd_backend", GUEST, indirect=True)
def test_a_slice_without_cpu_files_gets_them_from_the_property_call(
    systemd_backend: SystemdBackend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No CPU property anywhere below the root slice: systemd has not enabled cpu there, so the pod slice
    has no cpu.weight / cpu.max. `diff` shows them as current null (not an error, not "waiting"), and
    `apply` sets CPUWeight / CPUQuotaPerSecUSec over D-Bus, which makes systemd enable the controller
    and write the files."""
    b = systemd_backend
    assert isinstance(b, GuestSystemdBackend)
    for tier in ("kubepods", "kubepods/burstable", "kubepods/besteffort"):
        b.start_slice(_name(tier), [("MemoryAccounting", "b", True)])
    b.start_slice(POD, [("MemoryAccounting", "b", True), ("MemoryMax", "t", 256 * MI)])
    assert not b.path(POD, "cpu.weight").exists()
    assert not b.path(POD, "cpu.max").exists()
    assert b.path(POD, "memory.max").exists()

    pods = [
        pod(
            "b",
            [ctr("app", req={"cpu": "500m", "memory": "64Mi"}, lim={"cpu": "1500m", "memory": "128Mi"})],
            uid=UID,
        )
    ]
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "List", "items": pods}))
    flags = [
        "--pods",
        str(tmp_path / "pods.json"),
        "--cgroup-root",
        b.cgroup_root,
        "--cgroup-driver",
        "systemd",
    ]
    flags += ["--hugepage-sizes", ""]
    capsys.readouterr()
    assert main(["diff", *flags, "-o", "json"]) == 1
    rows = {
        Path(r["path"]).name: r
        for r in json.loads(capsys.readouterr().out)["cgroups"]
        if f"pod{UID.replace('-', '_')}" in r["path"]
    }
    assert rows["cpu.weight"]["current"] is None and rows["cpu.weight"]["desired"] == "20"  # 512 shares
    assert rows["cpu.max"]["current"] is None and rows["cpu.max"]["desired"] == "150000 100000"

    settings = from_mapping(
        {
            "cgroupRoot": b.cgroup_root,
            "cgroupDriver": "systemd",
            "pods": str(tmp_path / "pods.json"),
            "hugepageSizes": [],
        }
    )
    report = reconcile_once(settings)
    assert report.ok and not report.waiting, report.to_json()
    assert b.read(POD, "cpu.weight") == "20"
    assert b.read(POD, "cpu.max") == "150000 100000"
    assert b.read(POD, "memory.max") == str(128 * MI)
    assert b.unit_property(POD, "CPUWeight") == 20
    assert reconcile_once(settings).execution.writes == 0
    assert main(["diff", *flags]) == 0


@pytest.mark.parametrize("systemd_backend", GUEST, indirect=True)
def test_check_reports_v2_and_the_systemd_driver(
    systemd_backend: SystemdBackend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = systemd_backend
    b.start_slice(_name("kubepods"), [("MemoryAccounting", "b", True)])
    absent = tmp_path / "no-kubelet.yaml"  # no kubelet here: the driver is inferred from the tree
    capsys.readouterr()
    argv = ["check", "--cgroup-root", b.cgroup_root, "--kubelet-config", str(absent), "-o", "json"]
    assert main([*argv, "--cgroup-driver", "systemd"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["cgroup mode"]["detail"].startswith("v2:"), checks["cgroup mode"]
    assert "v1 controllers none" in checks["cgroup mode"]["detail"]
    driver = checks["kubelet cgroup driver"]
    assert driver["detail"].endswith("systemd (inferred: the tree has kubepods.slice (systemd))"), driver
    assert "agent cgroup driver" not in checks
    assert checks["controller cpu"]["detail"].startswith("v2")
    assert (
        checks[f"cgroup dir {b.cgroup_root}/{b.cgroup_root.removesuffix('.slice')}-kubepods.slice"]["verdict"]
        == "ok"
    )

    assert (
        main([*argv, "--cgroup-driver", "cgroupfs"]) == 2
    )  # the agent would write where the kubelet does not
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["agent cgroup driver"]["verdict"] == "fail"
