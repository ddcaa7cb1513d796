"""The kubelet's settings from the kubelet's own file: every inherited key, explicit settings win and are
reported, bad files are one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.commands.arguments import build_settings, parser
from agent.commands.main import main
from agent.config.keys import KUBELET_KEYS
from agent.config.kubelet import merge_kubelet
from agent.config.settings import ConfigError, Settings
from agent.core.model import Resources
from cgroupfs.types import DriverKind

KUBEADM = Path(__file__).with_name("kubelet-config.yaml")
MI = 2**20


def _settings(*argv: str) -> Settings:
    return build_settings(parser().parse_args(["diff", "--pods", "-", *argv]))


def test_every_kubelet_key_is_inherited_from_a_kubeadm_file() -> None:
    s = _settings("--kubelet-config", str(KUBEADM))
    # expected values read off tests/ship/kubelet-config.yaml by hand
    assert s.cgroup_driver is DriverKind.SYSTEMD
    assert s.cgroup_root == "/"
    assert s.cgroups_per_qos is True
    assert s.qos_reserved_memory_percent == 50
    assert s.kube_reserved == Resources(cpu_milli=100, memory=256 * MI, other=frozenset({"ephemeral-storage"}))
    assert s.system_reserved == Resources(cpu_milli=200, memory=512 * MI)
    assert s.enforce_node_allocatable == ("pods",)
    assert s.cpu_cfs_quota is True
    assert s.cpu_cfs_quota_period_us == 50_000
    assert s.cpu_manager_policy == "static"
    assert s.feature_gates == {"InPlacePodVerticalScaling": True, "QOSReserved": True}
    assert s.eviction_hard_memory == "200Mi"
    assert set(s.inherited) == set(KUBELET_KEYS)  # the file sets all twelve
    assert s.kubelet_conflicts == ()


def test_explicit_settings_win_and_each_disagreement_is_reported(tmp_path: Path) -> None:
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"kubeletConfig: {KUBEADM}\ncgroupDriver: cgroupfs\ncpuManagerPolicy: static\n")
    s = _settings("--config", str(cfg), "--qos-reserved", "memory=25%")
    assert s.cgroup_driver is DriverKind.CGROUPFS  # the agent's own setting wins
    assert s.qos_reserved_memory_percent == 25
    assert s.cpu_manager_policy == "static"  # set explicitly, and equal: no conflict
    assert "cgroupDriver" not in s.inherited and "qosReserved" not in s.inherited
    assert "cpuManagerPolicy" not in s.inherited
    assert s.kubelet_conflicts == (
        f"cgroupDriver: the agent's setting cgroupfs wins over the kubelet's systemd ({KUBEADM})",
        f"qosReserved: the agent's setting 25 wins over the kubelet's 50 ({KUBEADM})",
    )
    assert s.cpu_cfs_quota_period_us == 50_000  # still inherited


def test_without_a_kubelet_config_nothing_is_inherited() -> None:
    s = _settings()
    assert s.inherited == {} and s.cgroup_driver is DriverKind.CGROUPFS


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"kind": "KubeletConfiguration", "cgroupDriver": "weird"}, "cgroupDriver: 'weird' is not cgroupfs or systemd"),
        ({"kind": "KubeletConfiguration", "cpuCFSQuotaPeriod": "5s"}, "cpuCFSQuotaPeriod: '5s' must be between 1ms and 1s"),
        ({"kind": "KubeletConfiguration", "enforceNodeAllocatable": ["pods", "bogus"]}, "unknown bogus"),
        ({"kind": "KubeletConfiguration", "cgroupsPerQOS": False}, "cgroupsPerQOS is false"),
    ],
)
def test_bad_kubelet_values_are_config_errors_naming_the_file(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        merge_kubelet(Settings(), doc, "/k/config.yaml")
    assert message in str(err.value) and "/k/config.yaml" in str(err.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "kube-cgroup-agent: invalid configuration: kubeletConfig"),
        ("kind: Pod\n", "holds a Pod, not a KubeletConfiguration"),
        ("a: [\n", "is not valid YAML"),
    ],
)
def test_cli_reports_an_unusable_kubelet_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "config.yaml"
    if content is not None:
        path.write_text(content)
    code = main(["diff", "--pods", str(tmp_path / "none.yaml"), "--kubelet-config", str(path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1


def test_check_lists_inherited_keys_and_conflicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cpu").mkdir()
    code = main(["check", "--cgroupfs", str(tmp_path), "--cgroup-driver", "cgroupfs",
                 "--kubelet-config", str(KUBEADM), "--output", "json"])
    checks = {(c["name"], c["detail"]): c["verdict"] for c in json.loads(capsys.readouterr().out)}
    assert checks[("kubelet setting qosReserved", f"inherited from {KUBEADM}")] == "ok"
    assert checks[("kubelet setting", f"cgroupDriver: the agent's setting cgroupfs wins over the kubelet's systemd ({KUBEADM})")] == "warn"
    assert code in (0, 2)  # the fake tree lacks controllers: other checks may fail; these two are what is tested


def test_kubepods_sized_with_capacity_when_pods_are_not_enforced() -> None:
    from agent.kube.node import node_info

    node = {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4", "memory": "8Gi"}, "allocatable": {"cpu": "3", "memory": "6Gi"}}}
    s = merge_kubelet(Settings(), {"enforceNodeAllocatable": ["none"], "kubeReserved": {"cpu": "1", "memory": "1Gi"}}, "f")
    info = node_info(node, s)
    assert info.allocatable == Resources(cpu_milli=3000, memory=7 * 1024 * MI)  # capacity - kubeReserved (qos-reserved base)
    assert info.kubepods == Resources(cpu_milli=4000, memory=8 * 1024 * MI)  # what kubepods is sized with
    enforced = node_info(node, merge_kubelet(Settings(), {"enforceNodeAllocatable": ["pods"]}, "f"))
    assert enforced.kubepods is None


def test_version_names_version_commit_and_python(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    monkeypatch.setenv("KCG_COMMIT", "0123abcd")
    assert main(["version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"kube-cgroup-agent {metadata.version('kube-cgroup-agent')} (commit 0123abcd, Python 3.")


def test_check_reports_an_absent_kubelet_file_as_a_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cpu").mkdir()
    absent = tmp_path / "no-kubelet.yaml"
    main(["check", "--cgroupfs", str(tmp_path), "--kubelet-config", str(absent), "--output", "json"])
    out = capsys.readouterr()
    checks = json.loads(out.out)
    assert not out.err
    assert any("no kubelet config" in c["detail"] for c in checks)
