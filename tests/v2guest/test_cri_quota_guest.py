"""A CPU limit that is not a whole percent on the guest's real containerd + runc with the systemd driver (issue 45).

runc's systemd driver sends `CPUQuotaPerSecUSec` rounded up to 10 ms a second; runc < 1.3.2 (Debian 12's
1.1.5) then writes the exact quota to the scope's cpu.max, runc >= 1.3.2 the rounded one; systemd writes the
rounded one whenever it re-applies the unit (cgroupfs.systemd.grain). Here, with the pod and containerd of
test_cri_systemd_guest.py: the agent's own resize to 11m sends the rounded quota (the scope holds what systemd
keeps, whatever the runc); a resize the agent did not make, with the exact quota as the kubelet sends it,
leaves what this runc writes; `diff` is converged either way and `apply` writes nothing; after a
`systemctl daemon-reload` the scope holds systemd's value and nothing differs still.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from agent.commands.main import main
from agent.cri.v1 import api_pb2 as pb
from agent.cri.v1 import api_pb2_grpc as pb_grpc
from cgroupfs.naming import to_systemd
from cgroupfs.systemd.grain import QuotaWrite, parse_version, runc_quota_write
from cgroupfs.types import CgroupName
from tests.backends.systemd_trees import SystemdBackend
from tests.v2guest import guestlib
from tests.v2guest import test_cri_systemd_guest as cri

pytestmark = pytest.mark.v2guest

# the same containerd (module-scoped: one more for this module) and the same pod, 50000/100000 as created
containerd = cri.containerd
running_pod = cri.running_pod
MI = 1 << 20
EXACT, ROUNDED = "1100 100000", "2000 100000"  # 11m


def _manifest(p: cri.RunningPod) -> dict[str, Any]:
    """The pod at an 11m CPU limit (Burstable: the memory request is below its limit)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": p.name, "namespace": "v2", "uid": p.uid},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "11m", "memory": "32Mi"},
                                                               "limits": {"cpu": "11m", "memory": "64Mi"}}}]},
        "status": {"phase": "Running", "qosClass": "Burstable", "containerStatuses": [
            {"name": "app", "containerID": f"containerd://{p.container_id}", "state": {"running": {}}}]},
    }


def _runc_write() -> QuotaWrite:
    first = guestlib.run(["runc", "--version"]).stdout.splitlines()[0]  # "runc version 1.1.5+ds1"
    return runc_quota_write(parse_version(first))


@pytest.mark.parametrize("systemd_backend", cri.GUEST, indirect=True)
def test_a_quota_that_is_not_a_whole_percent_under_real_runc_and_systemd(
    containerd: cri.Containerd,
    systemd_backend: SystemdBackend,
    running_pod: cri.RunningPod,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    b = systemd_backend
    pod_dir = b.cgroupfs / to_systemd(CgroupName((b.cgroup_root.removesuffix(".slice"), *running_pod.slice.parts)))
    scope_unit = f"cri-containerd-{running_pod.container_id}.scope"
    scope = pod_dir / scope_unit
    assert guestlib.read_text(scope / "cpu.max") == "50000 100000"  # as created

    (tmp_path / "pods.json").write_text(json.dumps({"kind": "List", "items": [_manifest(running_pod)]}))
    config = tmp_path / "agent.yaml"
    config.write_text(f"containerCpuWeightFormula: {cri._runc_weight_formula()}\n")
    common = ["--config", str(config), "--pods", str(tmp_path / "pods.json"), "--cgroup-root", b.cgroup_root,
              "--cgroup-driver", "systemd", "--cri-endpoint", containerd.endpoint, "--hugepage-sizes", ""]

    def run(command: str, *extra: str) -> tuple[int, dict[str, Any]]:
        capsys.readouterr()
        rc = main([command, *common, "-o", "json", *extra])
        return rc, json.loads(capsys.readouterr().out)

    # the agent's own resize: the rounded quota through CRI, so this runc writes what systemd keeps
    rc, out = run("apply")
    assert rc == 0, out
    assert guestlib.read_text(scope / "cpu.max") == ROUNDED, out["steps"]
    assert guestlib.read_text(pod_dir / "cpu.max") == ROUNDED
    assert guestlib.unit_property(scope_unit, "CPUQuotaPerSecUSec") == "20ms"

    # a resize the agent did not make (the kubelet's way: the exact quota through CRI)
    with grpc.insecure_channel(containerd.endpoint) as channel:
        pb_grpc.RuntimeServiceStub(channel).UpdateContainerResources(pb.UpdateContainerResourcesRequest(
            container_id=running_pod.container_id,
            linux=pb.LinuxContainerResources(cpu_period=100_000, cpu_quota=1100, cpu_shares=11,
                                             memory_limit_in_bytes=64 * MI)), timeout=cri.SLOW_CALL)
    written = guestlib.read_text(scope / "cpu.max")
    assert written == (EXACT if _runc_write() is QuotaWrite.EXACT else ROUNDED)
    assert guestlib.unit_property(scope_unit, "CPUQuotaPerSecUSec") == "20ms"  # rounded either way
    rc, out = run("diff")
    assert rc == 0, out  # converged: either form
    rc, out = run("apply")
    assert rc == 0 and out["writes"] == 0, out["steps"]  # nothing written to "fix" it
    assert guestlib.read_text(scope / "cpu.max") == written

    guestlib.systemctl("daemon-reload")  # systemd re-applies the scope's unit: its rounded quota
    assert guestlib.wait_for(lambda: guestlib.read_text(scope / "cpu.max") == ROUNDED, timeout=30.0)
    rc, out = run("diff")
    assert rc == 0, out
