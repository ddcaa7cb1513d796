"""The CLI contract of DESIGN.md, run as a user would: the sample node, JSON shapes, exit codes, and bad
input ending in one clear line (never a traceback)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "agent" / "commands" / "samples" / "node"
CONFIG = str(SAMPLE / "config.yaml")
ADMISSION = ROOT / "agent" / "commands" / "samples" / "admission"


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        capture_output=True,
        text=True,
        input=stdin,
        cwd=ROOT,
        check=False,
    )


def test_diff_json_contract_on_the_sample_node() -> None:
    r = run_cli("diff", "--config", CONFIG, "--output", "json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert set(out) == {"cgroups", "containers", "warnings", "errors"}
    paths = {c["path"]: (c["current"], c["desired"]) for c in out["cgroups"]}
    assert paths["cpu/kubepods/burstable/cpu.shares"] == ("1126", "1689")
    assert paths["cpu/kubepods/burstable/pod9e8d7c6b-5a49-4382-b1c0-d9e8f7a6b503/cpu.cfs_quota_us"] == (
        "-1",
        "200000",
    )
    (container,) = out["containers"]
    assert container == {
        "pod": "shop/api",
        "container": "app",
        "containerID": "d1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90",
        "field": "cpu_quota",
        "path": "cpu/kubepods/burstable/pod2a7d9c10-5e3b-4c8e-8f21-7a6b5c4d3e02/"
        "d1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90/cpu.cfs_quota_us",
        "current": "50000",
        "desired": "100000",
    }
    assert out["errors"] == []


def test_diff_all_lists_equal_values_too(tmp_path: Path) -> None:
    r = run_cli("diff", "--config", CONFIG, "--output", "json", "--all")
    out = json.loads(r.stdout)
    equal = [c for c in out["cgroups"] if c["path"] == "memory/kubepods/burstable/memory.limit_in_bytes"]
    assert equal == [
        {
            "path": "memory/kubepods/burstable/memory.limit_in_bytes",
            "current": "16206790656",
            "desired": "16206790656",
        }
    ]


def test_plan_orders_parents_before_children_when_growing() -> None:
    r = run_cli("plan", "--config", CONFIG, "--output", "json")
    assert r.returncode == 1, r.stderr
    steps = json.loads(r.stdout)["steps"]
    kinds = [(s["kind"], s.get("path") or s.get("container")) for s in steps]
    tier = kinds.index(("cgroup", "cpu/kubepods/burstable/cpu.shares"))
    pod = kinds.index(
        ("cgroup", "cpu/kubepods/burstable/pod9e8d7c6b-5a49-4382-b1c0-d9e8f7a6b503/cpu.cfs_quota_us")
    )
    container = kinds.index(("container", "app"))
    assert tier < pod < container  # CPU grows: tier, then pod, then the container
    memory_steps = [i for i, s in enumerate(steps) if "memory" in (s.get("path") or "")]
    assert max(memory_steps) < tier  # the memory phase runs before the CPU phase
    assert steps[container] == {
        "kind": "container",
        "pod": "shop/api",
        "container": "app",
        "containerID": "d1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90",
        "resource": "cpu",
        "from": {"cpu_quota": "50000"},
        "to": {"cpu_quota": "100000"},
    }


def test_explain_shows_each_derivation() -> None:
    r = run_cli("explain", "shop/api", "--config", CONFIG)
    assert r.returncode == 0, r.stderr
    assert "QoS class: Burstable" in r.stdout
    assert "while init container migrate runs: cpu 1050m" in r.stdout
    assert "cpu.shares = MilliCPUToShares(1150m)" in r.stdout
    assert "= 130000 µs" in r.stdout


def test_explain_admission_shows_what_the_policy_would_set_and_why() -> None:
    r = run_cli("explain", "--admission", str(ADMISSION / "deployment.yaml"), "--vpa", str(ADMISSION / "vpa.yaml"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Deployment shop/web: VPA shop/web sets (a pod whose controller is ReplicaSet web-<pod-template-hash>):"
    # 400Mi with a 3x limit would pass the LimitRange's 1Gi max: the request is floor(100Mi x 1Gi / 300Mi)
    assert "  app requests.memory: 100Mi -> 357913941" in lines
    assert "  app limits.memory: 300Mi -> 1073741823" in lines
    assert "  app: memory capped to fit Max in container LimitRange" in lines
    assert "  log-shipper: unchanged (no recommendation, or its policy is Off)" in lines
    r = run_cli("explain", "--admission", str(ADMISSION / "deployment.yaml"), "--vpa", str(ADMISSION / "vpa.yaml"), "-o", "json")
    [decision] = json.loads(r.stdout)
    assert decision["skipped"] == "" and decision["containers"][0]["to"]["requests"] == {"cpu": "250m", "memory": "357913941"}
    r = run_cli("explain", "--admission", str(ADMISSION / "deployment.yaml"))  # the VPA not given: nothing targets it
    assert r.returncode == 0 and "no VPA targets Deployment/web" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["explain", "--admission", "/nonexistent.yaml"], "cannot read /nonexistent.yaml"),
        (["explain", "shop/api", "--admission", str(ADMISSION / "vpa.yaml")], "not both"),
        (["explain"], "explain needs a POD"),
        (["explain", "--admission", str(ADMISSION / "vpa.yaml")], "must hold one Pod or one workload"),
    ],
)
def test_explain_admission_bad_input_is_one_clear_line(args: list[str], message: str) -> None:
    r = run_cli(*args)
    assert r.returncode == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_explain_unknown_pod_is_one_clear_line() -> None:
    r = run_cli("explain", "nope/missing", "--config", CONFIG)
    assert r.returncode == 2
    assert r.stderr.strip() == "kube-cgroup-agent: pod nope/missing is not among the node's pods"
    assert "Traceback" not in r.stderr


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "cgroupfs"
    shutil.copytree(SAMPLE / "cgroupfs", tree)
    return tree


def test_a_bad_pod_is_reported_and_the_others_still_computed(tmp_path: Path) -> None:
    pods = (SAMPLE / "pods.yaml").read_text()
    bad = """
- apiVersion: v1
  kind: Pod
  metadata: {name: bad, namespace: shop, uid: 11111111-2222-3333-4444-555555555555}
  spec:
    resources: {limits: {memory: 100Mi}}
    containers:
    - name: a
      resources: {requests: {memory: 200Mi}}
"""
    (tmp_path / "pods.yaml").write_text(pods.rstrip() + "\n" + bad)
    r = run_cli("diff", "--config", CONFIG, "--pods", str(tmp_path / "pods.yaml"), "--output", "json")
    assert r.returncode == 2
    out = json.loads(r.stdout)
    assert out["errors"] == [
        {
            "pod": "shop/bad",
            "message": "pod-level memory limit 104857600 bytes is below the sum of container requests 209715200 bytes",
        }
    ]
    assert any(c["path"] == "cpu/kubepods/burstable/cpu.shares" for c in out["cgroups"])


def test_pods_from_stdin_as_kubectl_json(tmp_path: Path) -> None:
    pod = {
        "kind": "PodList",
        "items": [
            {
                "metadata": {"name": "p", "namespace": "x", "uid": "12345678-aaaa-bbbb-cccc-123456789012"},
                "spec": {
                    "containers": [{"name": "c", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]
                },
            }
        ],
    }
    r = run_cli("diff", "--config", CONFIG, "--pods", "-", "-o", "json", stdin=json.dumps(pod))
    out = json.loads(r.stdout)
    paths = {c["path"] for c in out["cgroups"]}
    assert "cpu/kubepods/pod12345678-aaaa-bbbb-cccc-123456789012/cpu.cfs_quota_us" in paths
    # the pod's cgroup does not exist in the sample tree: current is null
    assert all(c["current"] is None for c in out["cgroups"] if "pod12345678" in c["path"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["diff", "--pods", "/nonexistent/pods.yaml", "--cgroupfs", "{tree}"],
            "pod source /nonexistent/pods.yaml does not exist",
        ),
        (
            ["diff", "--config", "/nonexistent.yaml"],
            "invalid configuration: cannot read config /nonexistent.yaml: No such file or directory",
        ),
        (
            ["diff", "--config", CONFIG, "--qos-reserved", "memory=150%"],
            "invalid configuration: qosReserved: '150%' is not a percentage between 0% and 100%",
        ),
        (
            ["diff", "--config", CONFIG, "--allocatable", "cpu=lots"],
            "invalid configuration: allocatable: allocatable.cpu: 'lots' is not a valid quantity",
        ),
        (
            ["diff", "--config", CONFIG, "--cgroup-root", "/a/../b"],
            "invalid configuration: cgroupRoot '/a/../b': invalid cgroup name component '..' in ('a', '..', 'b')",
        ),
        (
            ["vpa-admission", "--metrics-bind-address", "nope"],
            "--metrics-bind-address: 'nope' is not host:port, e.g. 127.0.0.1:9812",
        ),
        (
            ["vpa-admission", "--health-bind-address", "127.0.0.1:99999"],
            "--health-bind-address: '127.0.0.1:99999' is not host:port, e.g. 127.0.0.1:9812",
        ),
    ],
    ids=["missing-pods", "missing-config", "bad-percent", "bad-quantity", "hostile-root", "keeper-metrics-address",
         "keeper-health-address"],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    tree = _tree(tmp_path)
    r = run_cli(*[a.replace("{tree}", str(tree)) for a in args])
    assert r.returncode == 2
    assert r.stderr.strip() == f"kube-cgroup-agent: {message}"
    assert r.stdout == ""


def test_bad_manifest_is_reported_under_errors(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "kind: Pod\nmetadata: {name: x, uid: ../../etc}\nspec: {containers: [{name: a}]}\n"
    )
    r = run_cli("diff", "--config", CONFIG, "--pods", str(tmp_path / "p.yaml"), "-o", "json")
    assert r.returncode == 2
    (err,) = json.loads(r.stdout)["errors"]
    assert err["pod"] == "default/x"
    assert "invalid pod UID '../../etc'" in err["message"]


def test_converged_tree_diffs_clean(tmp_path: Path) -> None:
    """After writing every desired value into a copy of the tree, diff exits 0."""
    tree = _tree(tmp_path)
    r = run_cli("diff", "--config", CONFIG, "--cgroupfs", str(tree), "-o", "json")
    out = json.loads(r.stdout)
    for item in out["cgroups"]:
        (tree / item["path"]).write_text(item["desired"] + "\n")
    for c in out["containers"]:
        path = next(tree.rglob(f"{c['containerID']}/cpu.cfs_quota_us"))
        path.write_text(c["desired"] + "\n")
    again = run_cli("diff", "--config", CONFIG, "--cgroupfs", str(tree))
    assert again.returncode == 0, again.stdout
    assert "no differences" in again.stdout


def test_importing_the_cli_does_not_import_kubernetes_or_grpc() -> None:
    code = (
        "import sys, agent.commands.main, agent.pipeline, agent.commands.render, agent.core.plan;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'grpc', 'google')];"
        "print(bad)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


# What a local command over manifests must not pay for: the API client, gRPC, the daemon (its HTTP server,
# metrics and structured logging, which pulls in `rich` where it is installed) and the distribution metadata.
HEAVY = ("kubernetes", "grpc", "google", "agent.daemon", "rich", "structlog", "prometheus_client", "http.server",
         "importlib.metadata", "urllib3", "psutil")
PODS = str(SAMPLE / "pods.yaml")


@pytest.mark.parametrize(
    "argv",
    [
        ["diff", "--config", CONFIG, "--pods", PODS],
        ["diff", "--config", CONFIG, "--pods", PODS, "--all", "-o", "json"],
        ["plan", "--config", CONFIG, "--pods", PODS],
        ["explain", "--config", CONFIG, "--pods", PODS, "shop/api"],
        ["explain", "--admission", str(ADMISSION / "deployment.yaml"), "--vpa", str(ADMISSION / "vpa.yaml")],
        ["--help"],
    ],
    ids=["diff", "diff-all-json", "plan", "explain", "explain-admission", "help"],
)
def test_a_local_command_imports_only_what_it_uses(argv: list[str]) -> None:
    """The import boundary, not a time: each command runs in a fresh interpreter and its sys.modules is read."""
    code = (
        "import sys; from agent.commands.main import main\n"
        "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
        f"heavy = {HEAVY!r}\n"
        "bad = sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy))\n"
        "print('RC', rc, 'HEAVY', bad, file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=False, cwd=ROOT)
    assert "RC " in r.stderr, r.stderr
    rc = r.stderr.split("RC ")[1].split()[0]
    assert rc in ("0", "1", "None"), r.stderr  # 1: differences found
    assert "HEAVY []" in r.stderr, r.stderr


# What `diff` over JSON manifests and flags does not use: YAML (no YAML to read), the planner (it stops at the
# diff), VPA, the recommender's histograms, the rollout and the resize engine (their settings sections load
# without them), and the LimitRange rules (no LimitRange in the input, no annotation to bound).
NOT_FOR_DIFF = ("yaml", "agent.core.plan", "agent.vpa.policy", "agent.vpa.model", "agent.vpa.source", "agent.vpa.inputs",
                "agent.core.ownership", "agent.recommender.histogram", "agent.rollout.eligibility", "agent.resize",
                "agent.pods.sources.limitrange_rules")


def test_diff_over_json_manifests_loads_neither_yaml_nor_the_planner(tmp_path: Path) -> None:
    import yaml

    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps([d for d in yaml.safe_load_all((SAMPLE / "pods.yaml").read_text()) if d]))
    code = (
        "import sys; from agent.commands.main import main\n"
        "rc = main(sys.argv[1:])\n"
        f"unused = {NOT_FOR_DIFF!r}\n"
        "bad = sorted(m for m in sys.modules if any(m == u or m.startswith(u + '.') for u in unused))\n"
        "print('RC', rc, 'LOADED', bad, file=sys.stderr)"
    )
    argv = ["diff", "--pods", str(pods), "--cgroupfs", str(SAMPLE / "cgroupfs"), "--allocatable",
            "cpu=3900m,memory=15872Mi,hugepages-2Mi=256Mi", "--qos-reserved", "memory=50%",
            "--hugepage-sizes", "2Mi,1Gi", "-o", "json"]
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=False, cwd=ROOT)
    assert "RC 1 " in r.stderr, r.stderr  # the sample node has differences
    assert "LOADED []" in r.stderr, r.stderr
    assert json.loads(r.stdout)["errors"] == []


@pytest.mark.parametrize(("argv", "collects"), [(["diff", "--config", CONFIG], False), (["version"], True)])
def test_a_one_pass_command_line_leaves_the_cyclic_collector_off(argv: list[str], collects: bool) -> None:
    """Off for the process of a one-pass command line; a call from code keeps the caller's collector."""
    code = (
        "import gc, sys; from agent.commands.main import main\n"
        "main(sys.argv[1:])\nin_code = gc.isenabled()\n"
        "sys.argv = ['kube-cgroup-agent', *sys.argv[1:]]\nmain()\n"
        "print('IN-CODE', in_code, 'COMMAND-LINE', gc.isenabled(), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=False, cwd=ROOT)
    assert f"IN-CODE True COMMAND-LINE {collects}" in r.stderr, r.stderr


LINES = [
    ["version"],
    ["diff", "--pods", "p.yaml", "--all", "-o", "json", "--cgroupfs", "/x", "--qos-reserved", "memory=50%"],
    ["plan", "--config", "c.yaml", "--vpa", "v.yaml"],
    ["explain", "shop/api", "--node", "n1"],
    ["explain", "--admission", "d.yaml", "--vpa", "v.yaml", "-o", "json"],
    ["apply", "--create-qos-cgroups", "-o", "json"],
    ["check", "--cgroup-version", "2"],
    ["recommend", "--samples", "-", "--now", "12.5"],
    ["rollout", "status", "statefulset/web", "-n", "shop"],
    ["vpa-admission", "--resync-period", "30s", "--log-format", "json"],
    ["run", "--observe-only", "--log-level", "debug"],
]


@pytest.mark.parametrize("line", LINES, ids=[line[0] for line in LINES])
def test_the_parser_of_one_command_reads_its_lines_as_the_whole_parser(line: list[str]) -> None:
    from agent.commands.arguments import COMMAND_ARGS, parser

    assert set(COMMAND_ARGS) == {line[0] for line in LINES}
    assert parser(line[0]).parse_args(line) == parser().parse_args(line)


def test_check_reports_mode_and_a_dead_runtime_socket(tmp_path: Path) -> None:
    r = run_cli(
        "check",
        "--cgroupfs",
        str(SAMPLE / "cgroupfs"),
        "--cri-endpoint",
        f"unix://{tmp_path}/none.sock",
        "-o",
        "json",
    )
    assert r.returncode == 2, r.stderr
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["cgroup mode"]["verdict"] == "ok" and checks["cgroup mode"]["detail"].startswith("hybrid")
    assert checks["controller hugetlb"]["detail"] == "v2 at unified"
    failed = [c for c in checks.values() if c["verdict"] == "fail"]
    assert failed and all("none.sock" in c["detail"] for c in failed)
