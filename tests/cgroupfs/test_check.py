"""`check` diagnostics: pure verdict tables, then the probe on fake trees."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cgroupfs.check import (
    Check,
    KubeletCgroups,
    Verdict,
    controller_checks,
    cri_check,
    cri_socket_path,
    driver_checks,
    infer_driver,
    kubepods_dirs,
    parse_kubelet_config,
    probe,
    root_dir_checks,
)
from cgroupfs.layout import Hierarchy
from cgroupfs.types import CgroupName, DriverKind
from tests.support.cgroup_tree import FakeCgroupTree

HYBRID = Hierarchy(v1={"cpu": "cpu", "memory": "memory"}, unified="unified", unified_controllers=frozenset({"hugetlb"}))
PURE_V2 = Hierarchy(unified="", unified_controllers=frozenset({"cpu", "memory", "pids"}))
NO_CPU = Hierarchy(v1={"memory": "memory"})
CGROUPFS, SYSTEMD = DriverKind.CGROUPFS, DriverKind.SYSTEMD


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


@pytest.mark.parametrize(
    ("hierarchy", "sizes", "expected"),
    [
        pytest.param(
            HYBRID,
            (2 << 20,),
            {
                "cpu": (Verdict.OK, "v1 at cpu"),
                "memory": (Verdict.OK, "v1 at memory"),
                "hugetlb": (Verdict.OK, "v2 at unified"),
                "cpuset": (Verdict.WARN, "absent: the kubelet expects it"),
                "pids": (Verdict.WARN, "absent: the kubelet expects it"),
            },
            id="hybrid",
        ),
        pytest.param(
            PURE_V2,
            (),
            {
                "cpu": (Verdict.OK, "v2 at ."),
                "hugetlb": (Verdict.OK, "absent, and the node has no huge pages"),
                "pids": (Verdict.OK, "v2 at ."),
            },
            id="pure-v2-no-huge-pages",
        ),
        pytest.param(
            NO_CPU,
            (2 << 20,),
            {
                "cpu": (Verdict.FAIL, "absent: pod and QoS cpu values cannot be applied"),
                "hugetlb": (Verdict.WARN, "absent although the node has huge pages: limits are skipped"),
            },
            id="no-cpu",
        ),
    ],
)
def test_controller_verdicts(
    hierarchy: Hierarchy, sizes: tuple[int, ...], expected: dict[str, tuple[Verdict, str]]
) -> None:
    checks = _by_name(controller_checks(hierarchy, sizes))
    assert list(checks) == [f"controller {c}" for c in ("cpu", "memory", "hugetlb", "cpuset", "pids")]
    for controller, (verdict, detail) in expected.items():
        assert (checks[f"controller {controller}"].verdict, checks[f"controller {controller}"].detail) == (verdict, detail)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n",
            KubeletCgroups(SYSTEMD, "/", False, "cfg"),
            id="kubeadm-systemd",
        ),
        pytest.param(
            "kind: KubeletConfiguration\ncgroupRoot: /custom\n",
            KubeletCgroups(CGROUPFS, "/custom", True, "cfg"),
            id="defaults-to-cgroupfs",
        ),
        pytest.param("", KubeletCgroups(CGROUPFS, "/", True, "cfg"), id="empty-file"),
    ],
)
def test_kubelet_config_parsing(text: str, expected: KubeletCgroups) -> None:
    assert parse_kubelet_config(text, "cfg") == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("cgroupDriver: [", "not YAML"),
        ("- a\n- b\n", "not a KubeletConfiguration mapping"),
        ("kind: Pod\n", "holds a Pod"),
        ("cgroupDriver: docker\n", "neither cgroupfs nor systemd"),
        ("cgroupRoot: 5\n", "is not a string"),
    ],
    ids=["bad-yaml", "list", "other-kind", "bad-driver", "bad-root"],
)
def test_unusable_kubelet_configs_say_why(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_kubelet_config(text, "cfg")


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ({CGROUPFS: True, SYSTEMD: False}, CGROUPFS),
        ({CGROUPFS: False, SYSTEMD: True}, SYSTEMD),
        ({CGROUPFS: False, SYSTEMD: False}, None),
        ({CGROUPFS: True, SYSTEMD: True}, None),
    ],
    ids=["kubepods", "kubepods.slice", "neither", "both-is-ambiguous"],
)
def test_driver_inference_from_the_tree(found: dict[DriverKind, bool], expected: DriverKind | None) -> None:
    assert infer_driver(found) == expected


KUBELET_SYSTEMD = KubeletCgroups(SYSTEMD, "/", False, "/var/lib/kubelet/config.yaml")


@pytest.mark.parametrize(
    ("kubelet", "problem", "found", "agent_driver", "agent_root", "expected"),
    [
        pytest.param(
            KUBELET_SYSTEMD, None, {SYSTEMD: True, CGROUPFS: False}, None, None,
            [("kubelet cgroup driver", Verdict.OK, "systemd (set in /var/lib/kubelet/config.yaml)"),
             ("kubelet cgroup root", Verdict.OK, "/ (from /var/lib/kubelet/config.yaml)")],
            id="config-and-tree-agree",
        ),
        pytest.param(
            KUBELET_SYSTEMD, None, {SYSTEMD: False, CGROUPFS: True}, None, None,
            [("kubelet cgroup driver", Verdict.WARN,
              "systemd (set in /var/lib/kubelet/config.yaml), but the tree has kubepods (cgroupfs)"),
             ("kubelet cgroup root", Verdict.OK, "/ (from /var/lib/kubelet/config.yaml)")],
            id="config-and-tree-disagree",
        ),
        pytest.param(
            None, None, {SYSTEMD: False, CGROUPFS: True}, CGROUPFS, None,
            [("kubelet cgroup driver", Verdict.OK, "cgroupfs (inferred: the tree has kubepods (cgroupfs))")],
            id="inferred",
        ),
        pytest.param(
            None, "no kubelet config at /x", {SYSTEMD: False, CGROUPFS: False}, None, None,
            [("kubelet cgroup driver", Verdict.WARN,
              "no kubelet config at /x; unknown: the tree has neither kubepods nor kubepods.slice")],
            id="unknown",
        ),
        pytest.param(
            KUBELET_SYSTEMD, None, {SYSTEMD: True, CGROUPFS: False}, CGROUPFS, "/",
            [("kubelet cgroup driver", Verdict.OK, "systemd (set in /var/lib/kubelet/config.yaml)"),
             ("agent cgroup driver", Verdict.FAIL, "the agent uses --cgroup-driver cgroupfs but the kubelet uses systemd"),
             ("kubelet cgroup root", Verdict.OK, "/ (from /var/lib/kubelet/config.yaml)")],
            id="agent-driver-mismatch",
        ),
        pytest.param(
            KUBELET_SYSTEMD, None, {SYSTEMD: True, CGROUPFS: False}, SYSTEMD, "/other",
            [("kubelet cgroup driver", Verdict.OK, "systemd (set in /var/lib/kubelet/config.yaml)"),
             ("kubelet cgroup root", Verdict.FAIL,
              "/ (from /var/lib/kubelet/config.yaml), but the agent uses --cgroup-root /other")],
            id="agent-root-mismatch",
        ),
    ],
)  # fmt: skip
def test_driver_and_root_verdicts(
    kubelet: KubeletCgroups | None,
    problem: str | None,
    found: dict[DriverKind, bool],
    agent_driver: DriverKind | None,
    agent_root: str | None,
    expected: list[tuple[str, Verdict, str]],
) -> None:
    checks = driver_checks(kubelet, problem, found, agent_driver, agent_root)
    assert [(c.name, c.verdict, c.detail) for c in checks] == expected


@pytest.mark.parametrize(
    ("endpoint", "path"),
    [
        ("unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock"),
        ("/run/crio/crio.sock", "/run/crio/crio.sock"),
        ("tcp://10.0.0.1:1234", None),
    ],
    ids=["unix-url", "bare-path", "tcp"],
)
def test_cri_socket_paths(endpoint: str, path: str | None) -> None:
    assert cri_socket_path(endpoint) == path


@pytest.mark.parametrize(
    ("endpoint", "file_type", "verdict", "words"),
    [
        (None, None, Verdict.WARN, "no --cri-endpoint given"),
        ("tcp://h:1", None, Verdict.WARN, "not a unix socket endpoint"),
        ("unix:///s.sock", "socket", Verdict.OK, "/s.sock is a socket"),
        ("unix:///s.sock", "missing", Verdict.FAIL, "/s.sock does not exist"),
        ("unix:///s.sock", "regular file", Verdict.FAIL, "/s.sock is a regular file, not a socket"),
    ],
    ids=["none", "tcp", "socket", "missing", "file"],
)
def test_cri_verdicts(endpoint: str | None, file_type: str | None, verdict: Verdict, words: str) -> None:
    c = cri_check(endpoint, file_type)
    assert c.verdict is verdict
    assert words in c.detail


def test_root_dir_verdicts() -> None:
    checks = root_dir_checks([("cpu/kubepods", True, True), ("memory/kubepods", True, False), ("unified/kubepods", False, False)])
    assert [c.verdict for c in checks] == [Verdict.OK, Verdict.FAIL, Verdict.WARN]
    assert checks[1].name == "cgroup dir memory/kubepods"


@pytest.mark.parametrize(
    ("hierarchy", "root", "driver", "expected"),
    [
        (HYBRID, "/", CGROUPFS, ["cpu/kubepods", "memory/kubepods", "unified/kubepods"]),
        (HYBRID, "/", SYSTEMD, ["cpu/kubepods.slice", "memory/kubepods.slice", "unified/kubepods.slice"]),
        (PURE_V2, "/", SYSTEMD, ["kubepods.slice"]),
        (PURE_V2, "/custom/root", CGROUPFS, ["custom/root/kubepods"]),
        (PURE_V2, "custom.slice", SYSTEMD, ["custom.slice/custom-kubepods.slice"]),
    ],
    ids=["hybrid-cgroupfs", "hybrid-systemd", "v2-systemd", "custom-cgroupfs-root", "custom-slice-root"],
)
def test_kubepods_directories(hierarchy: Hierarchy, root: str, driver: DriverKind, expected: list[str]) -> None:
    assert kubepods_dirs(hierarchy, root, driver) == expected


# ----- the probe on fake trees


@pytest.fixture
def cri_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cri.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    try:
        yield path
    finally:
        s.close()


@pytest.fixture
def hugepages(tmp_path: Path) -> Path:
    d = tmp_path / "hugepages"
    (d / "hugepages-2048kB").mkdir(parents=True)
    return d


def test_probe_of_a_healthy_systemd_v2_node(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, cri_socket: Path, hugepages: Path
) -> None:
    tree = fake_cgroup_tree("v2", driver=SYSTEMD)
    tree.create(CgroupName(("kubepods", "burstable")))
    config = tmp_path / "config.yaml"
    config.write_text("kind: KubeletConfiguration\ncgroupDriver: systemd\n")
    checks = _by_name(
        probe(
            tree.root,
            mountinfo=tmp_path / "none",
            hugepages_dir=hugepages,
            kubelet_config=config,
            cri_endpoint=f"unix://{cri_socket}",
            cgroup_driver=SYSTEMD,
        )
    )
    assert all(c.verdict is Verdict.OK for c in checks.values()), [c for c in checks.values() if c.verdict is not Verdict.OK]
    assert checks["cgroup mode"].detail.startswith("v2:")
    assert checks["huge page sizes"].detail == "2MB"
    assert checks["cgroup dir kubepods.slice"].detail == "exists and is writable"
    assert checks["CRI socket"].detail == f"{cri_socket} is a socket"


def test_probe_of_a_fresh_hybrid_node_without_kubelet(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path, hugepages: Path
) -> None:
    tree = fake_cgroup_tree("hybrid")
    checks = _by_name(
        probe(
            tree.root,
            mountinfo=tmp_path / "none",
            hugepages_dir=hugepages,
            kubelet_config=tmp_path / "missing.yaml",
            cri_endpoint=str(tmp_path / "no.sock"),
        )
    )
    assert checks["kubelet cgroup driver"].verdict is Verdict.WARN
    assert "no kubelet config at" in checks["kubelet cgroup driver"].detail
    assert checks["cgroup dir cpu/kubepods"].verdict is Verdict.WARN
    assert checks["CRI socket"].verdict is Verdict.FAIL
    assert checks["controller hugetlb"].detail == "v2 at unified"


def test_probe_without_any_hierarchy_fails_but_still_reports_the_rest(tmp_path: Path, hugepages: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    checks = probe(empty, mountinfo=tmp_path / "none", hugepages_dir=hugepages, kubelet_config=tmp_path / "x")
    names = [c.name for c in checks]
    assert names == ["cgroup hierarchy", "huge page sizes", "CRI socket"]
    assert checks[0].verdict is Verdict.FAIL
    assert "found no cgroup hierarchy" in checks[0].detail


def test_every_detail_is_one_line(fake_cgroup_tree: Callable[..., FakeCgroupTree], tmp_path: Path) -> None:
    tree = fake_cgroup_tree("v1")
    tree.create(CgroupName(("kubepods",)))
    bad = tmp_path / "bad.yaml"
    bad.write_text("cgroupDriver: [\n  x\n")
    for c in probe(tree.root, mountinfo=tmp_path / "none", hugepages_dir=tmp_path, kubelet_config=bad):
        assert "\n" not in c.detail, c
