"""`kubectl cgroup` (docs/kubectl-plugin.md) on the real cluster, run as a user runs it: the real kubectl finds
`kubectl-cgroup` on PATH (this checkout's virtualenv, where `pip install` put it), the plugin finds each
node's agent pod, and what it prints is what `kubectl exec ... -- kube-cgroup-agent` prints in that pod. Its
errors with the real API server's answers: a node that does not exist, a user who may not list the agent's
pods, one who may list them but not exec (the `view` role), and the Role the docs give, which is enough."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml

from tests.e2e_k8s.nodes import (
    AGENT_CONFIG,
    AGENT_NS,
    KUBECTL,
    NODES,
    RK,
    V2_NODE,
    NodeAgent,
    kubectl,
    needs_cluster,
)

pytestmark = needs_cluster
ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = Path(sys.executable).parent  # .venv/bin: kubectl-cgroup as `make venv` (pip install) put it there
TERMINATED = "command terminated with exit code"
VIEWER = "kcg-plugin-viewer"  # may list the agent's pods (ClusterRole view), not exec
USER = "kcg-plugin-user"  # the Role of docs/kubectl-plugin.md


def _env() -> dict[str, str]:
    # the plugin first, then the kit's kubectl: the one `kubectl cgroup` runs and the plugin runs again
    path = os.pathsep.join([str(PLUGIN_DIR), str(Path(KUBECTL).parent), os.environ.get("PATH", "")])
    return {**os.environ, "KUBECONFIG": str(RK / "kubeconfig"), "PATH": path}


def cgroup(*args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl cgroup ARGS` through the real kubectl's plugin lookup."""
    assert os.access(PLUGIN_DIR / "kubectl-cgroup", os.X_OK), f"no {PLUGIN_DIR}/kubectl-cgroup: make venv"
    return subprocess.run([KUBECTL, "cgroup", *args], capture_output=True, text=True, timeout=300, env=_env(),
                          check=False)


def direct(node: str, *agent: str) -> subprocess.CompletedProcess[str]:
    """The same command as a user types it without the plugin: kubectl exec into the node's agent pod."""
    pod = NodeAgent(node).name
    done = subprocess.run([KUBECTL, "exec", "-n", AGENT_NS, pod, "-c", "agent", "--", "kube-cgroup-agent", *agent],
                          capture_output=True, text=True, timeout=300, env=_env(), check=False)
    # kubectl's own line about the command's exit code is not the agent's output
    stderr = "".join(ln for ln in done.stderr.splitlines(keepends=True) if not ln.startswith(TERMINATED))
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, stderr)


def same_as_direct(node: str, plugin_args: Sequence[str], agent_args: Sequence[str],
                   tries: int = 4) -> subprocess.CompletedProcess[str]:
    """The plugin's stdout, stderr and exit code equal the direct exec's. The daemon keeps reconciling beside
    both (and other tests' pods come and go), so one comparison may straddle a change: the plugin's run must
    equal the direct run just before or just after it, within a few tries."""
    before = None
    for _ in range(tries):
        got = cgroup(*plugin_args)
        after = direct(node, *agent_args)
        mine = (got.returncode, got.stdout, got.stderr)
        if any(mine == (d.returncode, d.stdout, d.stderr) for d in (before, after) if d is not None):
            return got
        before = after
    raise AssertionError(f"kubectl cgroup {' '.join(plugin_args)} differs from the direct exec: "
                         f"{(got.returncode, got.stdout[-800:], got.stderr[-800:])} against "
                         f"{(after.returncode, after.stdout[-800:], after.stderr[-800:])}")


@pytest.mark.parametrize("node", NODES)
def test_kubectl_cgroup_diff_prints_what_the_agent_prints_in_its_pod(node: str) -> None:
    got = same_as_direct(node, ["diff", node], ["diff", "--config", AGENT_CONFIG])
    assert got.returncode in (0, 1), got.stderr
    print(f"\nkubectl cgroup diff {node}: exit {got.returncode}, {len(got.stdout.splitlines())} lines")


@pytest.mark.parametrize("node", NODES)
def test_kubectl_cgroup_diff_all_json_parses(node: str) -> None:
    got = same_as_direct(node, ["diff", node, "--all", "-o", "json"],
                         ["diff", "--config", AGENT_CONFIG, "--all", "--output", "json"])
    out = json.loads(got.stdout)
    assert set(out) == {"cgroups", "containers", "warnings", "errors"}
    assert out["cgroups"], "diff --all lists every value the agent computes"
    assert got.returncode in (0, 1) and out["errors"] == [], out["errors"]


def test_kubectl_cgroup_plan_and_explain_on_the_v2_node() -> None:
    same_as_direct(V2_NODE, ["plan", V2_NODE, "-o", "json"], ["plan", "--config", AGENT_CONFIG, "--output", "json"])
    agent = f"{AGENT_NS}/{NodeAgent(V2_NODE).name}"  # a pod always on the node: the agent's own
    got = same_as_direct(V2_NODE, ["explain", V2_NODE, agent], ["explain", agent, "--config", AGENT_CONFIG])
    assert got.returncode == 0 and agent in got.stdout, got.stderr


def test_kubectl_cgroup_version_names_the_agent_in_the_pod() -> None:
    got = cgroup("version", V2_NODE)
    plugin, agent = got.stdout.splitlines()
    assert got.returncode == 0 and plugin.startswith("kubectl-cgroup ") and agent.startswith("kube-cgroup-agent "), got


def test_a_node_that_does_not_exist() -> None:
    got = cgroup("diff", "kcg-no-such-node")
    assert (got.returncode, got.stdout) == (2, "")
    assert got.stderr == "kubectl cgroup: node kcg-no-such-node not found (kubectl get nodes)\n"


@pytest.fixture
def users() -> Iterator[None]:
    """VIEWER with the `view` ClusterRole in the agent's namespace; USER with the Role of the docs."""
    doc = (ROOT / "docs" / "kubectl-plugin.md").read_text()
    objects = [o for block in doc.split("```yaml\n")[1:] for o in yaml.safe_load_all(block.split("```", 1)[0]) if o]
    for o in objects:
        if o["kind"] == "RoleBinding":
            o["subjects"] = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]
    objects.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "kcg-plugin-viewer", "namespace": AGENT_NS},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": VIEWER}]})
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    kubectl("apply", "-f", "-", stdin=manifest)
    try:
        yield
    finally:
        kubectl("delete", "-f", "-", "--ignore-not-found", stdin=manifest, ok=(0, 1))


def test_rbac_errors_and_the_documented_role(users: None) -> None:
    nobody = cgroup("diff", V2_NODE, "--as", "kcg-plugin-nobody")
    assert (nobody.returncode, nobody.stdout) == (2, ""), nobody
    assert nobody.stderr.startswith(f"kubectl cgroup: not allowed to list pods in namespace {AGENT_NS}: "), nobody.stderr
    assert nobody.stderr.count("\n") == 1 and "Forbidden" in nobody.stderr

    viewer = cgroup("diff", V2_NODE, "--as", VIEWER)
    assert (viewer.returncode, viewer.stdout) == (2, ""), viewer
    pod = NodeAgent(V2_NODE).name
    assert viewer.stderr.startswith(f"kubectl cgroup: not allowed to exec into {AGENT_NS}/{pod}: "), viewer.stderr
    assert viewer.stderr.endswith(f"(kubectl cgroup needs create on pods/exec in namespace {AGENT_NS}: "
                                  f"kubectl auth can-i create pods/exec -n {AGENT_NS})\n"), viewer.stderr
    assert viewer.stderr.count("\n") == 1
    print(f"\nkubectl cgroup as a viewer: {viewer.stderr.strip()}")

    user = same_as_direct(V2_NODE, ["diff", V2_NODE, "--as", USER], ["diff", "--config", AGENT_CONFIG])
    assert user.returncode in (0, 1), user.stderr
