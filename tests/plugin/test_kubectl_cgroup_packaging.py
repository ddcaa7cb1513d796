"""The plugin as shipped: it starts without the agent's heavy imports, looks for what the DaemonSet deploys,
is installed as the `kubectl-cgroup` console script, and the documented Role grants what it needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from agent.commands import kubectl_cgroup as plugin
from tests.cli.test_cli import ROOT
from tests.plugin.test_kubectl_cgroup import CFG, NS, SELECTOR


def test_the_plugin_imports_no_kubernetes_client() -> None:
    """It starts as fast as a kubectl plugin should: the standard library and agent/__init__ only."""
    code = ("import json, sys; from agent.commands import kubectl_cgroup as k; k.parser().parse_args(['diff', 'n1']); "
            "k.version(); print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    loaded = set(json.loads(done.stdout))
    heavy = {"kubernetes", "yaml", "grpc", "google", "structlog", "psutil", "jeepney", "prometheus_client", "urllib3"}
    assert loaded & heavy == set()
    # agent/__init__ and the error root every agent error has (agent.infra.errors, cgroupfs.errors): small
    assert {m for m in loaded if m in ("agent", "cgroupfs")} <= {"agent", "cgroupfs"}


def test_what_it_looks_for_is_what_the_daemonset_deploys() -> None:
    """The selector, container, namespace and config path of deploy/base/daemonset.yaml."""
    ds = yaml.safe_load((ROOT / "deploy" / "base" / "daemonset.yaml").read_text())
    selector = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())
    assert plugin.SELECTOR == selector == SELECTOR
    assert plugin.NAMESPACE == ds["metadata"]["namespace"] == NS
    containers = {c["name"]: c for c in ds["spec"]["template"]["spec"]["containers"]}
    assert plugin.CONTAINER in containers
    assert plugin._config_path(containers[plugin.CONTAINER]) == plugin.CONFIG == CFG
    mounts = {m["mountPath"] for m in containers[plugin.CONTAINER]["volumeMounts"]}
    assert str(Path(plugin.CONFIG).parent) in mounts


def test_it_is_installed_as_the_kubectl_cgroup_console_script() -> None:
    """krew's convention: `kubectl cgroup` runs the executable kubectl-cgroup found on PATH; pip puts it
    beside python (the virtualenv's bin, ~/.local/bin with --user)."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-cgroup"] == "agent.commands.kubectl_cgroup:main"
    script = Path(sys.executable).parent / "kubectl-cgroup"
    assert os.access(script, os.X_OK), f"{script} missing: reinstall (make venv)"
    done = subprocess.run([str(script), "version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.startswith("kubectl-cgroup "), done.stderr


def test_the_documented_role_grants_what_the_plugin_needs() -> None:
    """docs/kubectl-plugin.md's Role: get and list pods, create (and get) pods/exec, in the agent's namespace."""
    text = (ROOT / "docs" / "kubectl-plugin.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    docs = [d for b in blocks for d in yaml.safe_load_all(b) if d]
    (role,) = [d for d in docs if d["kind"] == "Role"]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NS
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    grants = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("pods", "get"), ("pods", "list"), ("pods/exec", "create")} <= grants
    assert all(rule["apiGroups"] == [""] for rule in role["rules"])
    assert {v for _, v in grants} <= {"get", "list", "create"}
