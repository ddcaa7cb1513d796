"""`kubectl cgroup` (agent/commands/kubectl_cgroup.py) against a fake kubectl, the only `kubectl` on PATH
(tests/plugin/fake_kubectl.py): every command's kubectl command lines exactly, the agent's output and exit
code passed through, and each failure one line on stderr with exit code 2. The real cluster's run is
tests/e2e_k8s/test_kubectl_plugin.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import CONFIG as SAMPLE_CONFIG
from tests.cli.test_cli import ROOT, run_cli

FAKE = Path(__file__).with_name("fake_kubectl.py")
NS = "kube-cgroup-agent"
POD = "kube-cgroup-agent-x7k2p"
CFG = "/etc/kube-cgroup-agent/config.yaml"
SELECTOR = "app.kubernetes.io/name=kube-cgroup-agent"


def get_pods(node: str = "worker-1", ns: str = NS) -> list[str]:
    return ["get", "pods", "-n", ns, "-l", SELECTOR, "--field-selector", f"spec.nodeName={node}", "-o", "json"]


def exec_(*agent: str, pod: str = POD, ns: str = NS, container: str = "agent") -> list[str]:
    return ["exec", "-n", ns, pod, "-c", container, "--", "kube-cgroup-agent", *agent]


def get_node(node: str) -> list[str]:
    return ["get", "node", node, "-o", "name"]


def agent_pod(name: str = POD, *, ready: bool = True, phase: str = "Running", state: dict[str, Any] | None = None,
              restarts: int = 0, created: str = "2025-03-01T10:00:00Z", deleting: bool = False,
              args: list[str] | None = None, containers: list[str] | None = None) -> dict[str, Any]:
    """A pod of the DaemonSet as `kubectl get pods -o json` lists it (what the plugin reads of it)."""
    meta: dict[str, Any] = {"name": name, "namespace": NS, "creationTimestamp": created,
                            "labels": {"app.kubernetes.io/name": "kube-cgroup-agent"}}
    if deleting:
        meta["deletionTimestamp"] = "2025-03-01T11:00:00Z"
    cargs = args if args is not None else ["run", f"--config={CFG}", "--health-bind-address=$(POD_IP):9813"]
    return {
        "metadata": meta,
        "spec": {"nodeName": "worker-1",
                 "containers": [{"name": c, "args": cargs} for c in (containers or ["agent"])]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            **({} if ready else {"reason": "ContainersNotReady"})}],
            "containerStatuses": [{"name": "agent", "ready": ready, "restartCount": restarts,
                                   "state": state if state is not None else {"running": {}}}],
        },
    }


def pods(*items: dict[str, Any]) -> dict[str, Any]:
    return {"stdout": json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items), "metadata": {}})}


def terminated(code: int, stderr: str = "", stdout: str = "") -> dict[str, Any]:
    """A kubectl exec whose command exited `code`: kubectl's own last line says so, and it exits the same."""
    return {"stdout": stdout, "stderr": stderr + (f"command terminated with exit code {code}\n" if code else ""),
            "rc": code}


TABLE = "PATH                                  CURRENT  DESIRED\ncpu/kubepods/burstable/cpu.shares     1126     1689\n"
DIFF_JSON = json.dumps({"cgroups": [], "containers": [], "warnings": [], "errors": []}, indent=2) + "\n"
FORBIDDEN_EXEC = (f'Error from server (Forbidden): pods "{POD}" is forbidden: User "jane" cannot create resource '
                  f'"pods/exec" in API group "" in the namespace "{NS}"')
FORBIDDEN_LIST = (f'Error from server (Forbidden): pods is forbidden: User "jane" cannot list resource "pods" in '
                  f'API group "" in the namespace "{NS}"')


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    calls: list[list[str]]


@pytest.fixture
def kubectl_cgroup(tmp_path: Path) -> Callable[..., Run]:
    """Run the plugin as kubectl would (its own process) with the fake as the only kubectl on PATH."""

    def run(argv: list[str], scenario: dict[str, Any] | None, stdin: str | None = None) -> Run:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        log = tmp_path / "calls.jsonl"
        log.write_text("")
        fake = bin_dir / "kubectl"
        if scenario is None:  # kubectl is not installed
            fake.unlink(missing_ok=True)
        else:
            (tmp_path / "scenario.json").write_text(json.dumps(scenario))
            fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
            fake.chmod(0o755)
        env = {"PATH": str(bin_dir), "FAKE_KUBECTL_LOG": str(log),
               "FAKE_KUBECTL_SCENARIO": str(tmp_path / "scenario.json"), "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run([sys.executable, "-m", "agent.commands.kubectl_cgroup", *argv], capture_output=True,
                              text=True, env=env, cwd=ROOT, input=stdin, timeout=120, check=False)
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        return Run(done.returncode, done.stdout, done.stderr, calls)

    return run


@dataclass
class Case:
    id: str
    argv: list[str]
    scenario: dict[str, Any]
    rc: int
    stdout: str = ""
    stderr: str = ""
    calls: list[list[str]] = field(default_factory=list)


SUCCESS = [
    Case("diff: the table and exit code 1 (differences) as the agent printed them",
         ["diff", "worker-1"], {"get pods": pods(agent_pod()), "exec": terminated(1, stdout=TABLE)},
         1, TABLE, "", [get_pods(), exec_("diff", "--config", CFG)]),
    Case("diff --all -o json, no difference: exit 0",
         ["diff", "worker-1", "--all", "-o", "json"], {"get pods": pods(agent_pod()), "exec": terminated(0, stdout=DIFF_JSON)},
         0, DIFF_JSON, "", [get_pods(), exec_("diff", "--config", CFG, "--all", "--output", "json")]),
    Case("diff --output table is passed as given",
         ["diff", "--output", "table", "worker-1"], {"get pods": pods(agent_pod()), "exec": terminated(0, stdout=TABLE)},
         0, TABLE, "", [get_pods(), exec_("diff", "--config", CFG, "--output", "table")]),
    Case("plan -o json",
         ["plan", "worker-1", "-o", "json"], {"get pods": pods(agent_pod()), "exec": terminated(1, stdout='{"steps": []}\n')},
         1, '{"steps": []}\n', "", [get_pods(), exec_("plan", "--config", CFG, "--output", "json")]),
    Case("plan", ["plan", "worker-1"], {"get pods": pods(agent_pod()), "exec": terminated(0, stdout="no steps\n")},
         0, "no steps\n", "", [get_pods(), exec_("plan", "--config", CFG)]),
    Case("explain POD",
         ["explain", "worker-1", "shop/api"], {"get pods": pods(agent_pod()), "exec": terminated(0, stdout="pod shop/api\n")},
         0, "pod shop/api\n", "", [get_pods(), exec_("explain", "shop/api", "--config", CFG)]),
    Case("flags after -- go to kube-cgroup-agent unchanged",
         ["diff", "worker-1", "--", "--qos-reserved", "memory=50%", "-o", "json"],
         {"get pods": pods(agent_pod()), "exec": terminated(1, stdout=TABLE)},
         1, TABLE, "", [get_pods(), exec_("diff", "--config", CFG, "--qos-reserved", "memory=50%", "-o", "json")]),
    Case("kubectl's --kubeconfig, --context and --as before every verb, -n the agent's namespace, before or after the command",
         ["--context", "prod", "diff", "worker-1", "--kubeconfig", "/home/jane/.kube/prod", "-n", "agents", "--as", "jane"],
         {"get pods": pods(agent_pod()), "exec": terminated(0, stdout=TABLE)},
         0, TABLE, "", [["--kubeconfig", "/home/jane/.kube/prod", "--context", "prod", "--as", "jane", *get_pods(ns="agents")],
                        ["--kubeconfig", "/home/jane/.kube/prod", "--context", "prod", "--as", "jane",
                         *exec_("diff", "--config", CFG, ns="agents")]]),
    Case("the agent's stderr passes, kubectl's exit-code line does not",
         ["diff", "worker-1"], {"get pods": pods(agent_pod()),
                                "exec": terminated(1, "warning: vpa web: no recommendation yet\n", TABLE)},
         1, TABLE, "warning: vpa web: no recommendation yet\n", [get_pods(), exec_("diff", "--config", CFG)]),
    Case("the agent's own error: its line and exit code 2",
         ["explain", "worker-1", "nope"], {"get pods": pods(agent_pod()),
                                           "exec": terminated(2, "kube-cgroup-agent: pod nope is not among the node's pods\n")},
         2, "", "kube-cgroup-agent: pod nope is not among the node's pods\n",
         [get_pods(), exec_("explain", "nope", "--config", CFG)]),
    Case("any other exit code of the command is its own (137: killed at the pod's memory limit)",
         ["diff", "worker-1", "--all"], {"get pods": pods(agent_pod()), "exec": terminated(137)},
         137, "", "", [get_pods(), exec_("diff", "--config", CFG, "--all")]),
    Case("the --config the pod's agent container runs with",
         ["diff", "worker-1"], {"get pods": pods(agent_pod(args=["run", "--config", "/etc/kcg/agent.yaml"])),
                                "exec": terminated(0, stdout=TABLE)},
         0, TABLE, "", [get_pods(), exec_("diff", "--config", "/etc/kcg/agent.yaml")]),
    Case("a container command line without --config: the shipped path",
         ["diff", "worker-1"], {"get pods": pods(agent_pod(args=["run"])), "exec": terminated(0, stdout=TABLE)},
         0, TABLE, "", [get_pods(), exec_("diff", "--config", CFG)]),
    Case("a pod being replaced: the Ready one, not the terminating one",
         ["plan", "worker-1"], {"get pods": pods(agent_pod("kube-cgroup-agent-old", deleting=True),
                                                 agent_pod("kube-cgroup-agent-new", created="2025-03-02T10:00:00Z")),
                                "exec": terminated(0, stdout="no steps\n")},
         0, "no steps\n", "", [get_pods(), exec_("plan", "--config", CFG, pod="kube-cgroup-agent-new")]),
    Case("two live pods: the Ready one even if older",
         ["plan", "worker-1"], {"get pods": pods(agent_pod("kube-cgroup-agent-new", ready=False, created="2025-03-02T10:00:00Z"),
                                                 agent_pod("kube-cgroup-agent-old")),
                                "exec": terminated(0, stdout="no steps\n")},
         0, "no steps\n", "", [get_pods(), exec_("plan", "--config", CFG, pod="kube-cgroup-agent-old")]),
    Case("version NODE: the plugin's, then that node's agent's",
         ["version", "worker-1"], {"get pods": pods(agent_pod()),
                                   "exec": terminated(0, stdout="kube-cgroup-agent 9.9 (commit x, Python 3.13.5)\n")},
         0, "kubectl-cgroup *\nkube-cgroup-agent 9.9 (commit x, Python 3.13.5)\n", "", [get_pods(), exec_("version")]),
]

NOT_READY = f"(kubectl describe pod -n {NS} {POD})"
ERRORS = [
    Case("no agent pod on the node (the node exists)",
         ["diff", "worker-1"], {"get pods": pods(), "get node": {"stdout": "node/worker-1\n"}},
         2, "", "kubectl cgroup: no kube-cgroup-agent pod on node worker-1 (is the DaemonSet scheduled there? "
                "kubectl get ds -n kube-cgroup-agent)\n", [get_pods(), get_node("worker-1")]),
    Case("no agent pod in another namespace: the hint names it",
         ["plan", "worker-1", "-n", "agents"], {"get pods": pods(), "get node": {"stdout": "node/worker-1\n"}},
         2, "", "kubectl cgroup: no kube-cgroup-agent pod on node worker-1 (is the DaemonSet scheduled there? "
                "kubectl get ds -n agents)\n", [get_pods(ns="agents"), get_node("worker-1")]),
    Case("the node does not exist",
         ["diff", "worker-9"], {"get pods": pods(), "get node": {
             "stderr": 'Error from server (NotFound): nodes "worker-9" not found\n', "rc": 1}},
         2, "", "kubectl cgroup: node worker-9 not found (kubectl get nodes)\n", [get_pods("worker-9"), get_node("worker-9")]),
    Case("no pod, and the user may not read nodes: the no-pod message",
         ["diff", "worker-1"], {"get pods": pods(), "get node": {
             "stderr": 'Error from server (Forbidden): nodes "worker-1" is forbidden: User "jane" cannot get resource "nodes"\n',
             "rc": 1}},
         2, "", "kubectl cgroup: no kube-cgroup-agent pod on node worker-1 (is the DaemonSet scheduled there? "
                "kubectl get ds -n kube-cgroup-agent)\n", [get_pods(), get_node("worker-1")]),
    Case("not Ready: crash-looping",
         ["diff", "worker-1"], {"get pods": pods(agent_pod(ready=False, restarts=4,
                                                           state={"waiting": {"reason": "CrashLoopBackOff"}}))},
         2, "", f"kubectl cgroup: the kube-cgroup-agent pod {NS}/{POD} on node worker-1 is not Ready: phase Running, "
                f"container agent waiting: CrashLoopBackOff, 4 restarts {NOT_READY}\n", [get_pods()]),
    Case("not Ready: pending, its image not pulled",
         ["plan", "worker-1"], {"get pods": pods(agent_pod(ready=False, phase="Pending",
                                                           state={"waiting": {"reason": "ImagePullBackOff"}}))},
         2, "", f"kubectl cgroup: the kube-cgroup-agent pod {NS}/{POD} on node worker-1 is not Ready: phase Pending, "
                f"container agent waiting: ImagePullBackOff {NOT_READY}\n", [get_pods()]),
    Case("not Ready: running, its readiness probe failing",
         ["explain", "worker-1", "shop/api"], {"get pods": pods(agent_pod(ready=False))},
         2, "", f"kubectl cgroup: the kube-cgroup-agent pod {NS}/{POD} on node worker-1 is not Ready: phase Running, "
                f"container agent running but not ready {NOT_READY}\n", [get_pods()]),
    Case("not Ready: only a terminating pod",
         ["diff", "worker-1"], {"get pods": pods(agent_pod(deleting=True))},
         2, "", f"kubectl cgroup: the kube-cgroup-agent pod {NS}/{POD} on node worker-1 is not Ready: phase Running, "
                f"terminating (a new one follows: try again shortly) {NOT_READY}\n", [get_pods()]),
    Case("RBAC forbids exec",
         ["diff", "worker-1"], {"get pods": pods(agent_pod()), "exec": {"stderr": FORBIDDEN_EXEC + "\n", "rc": 1}},
         2, "", f"kubectl cgroup: not allowed to exec into {NS}/{POD}: {FORBIDDEN_EXEC} (kubectl cgroup needs create "
                f"on pods/exec in namespace {NS}: kubectl auth can-i create pods/exec -n {NS})\n",
         [get_pods(), exec_("diff", "--config", CFG)]),
    Case("RBAC forbids listing the agent's pods",
         ["diff", "worker-1"], {"get pods": {"stderr": FORBIDDEN_LIST + "\n", "rc": 1}},
         2, "", f"kubectl cgroup: not allowed to list pods in namespace {NS}: {FORBIDDEN_LIST} "
                f"(kubectl cgroup needs get and list on pods there)\n", [get_pods()]),
    Case("the API server unreachable",
         ["diff", "worker-1"], {"get pods": {"stderr": "E0301 10:00:00.000000   12 memcache.go:265] couldn't get current "
                                                       "server API group list\nThe connection to the server 10.0.0.1:6443 "
                                                       "was refused - did you specify the right host or port?\n", "rc": 1}},
         2, "", "kubectl cgroup: kubectl get pods failed: The connection to the server 10.0.0.1:6443 was refused - "
                "did you specify the right host or port?\n", [get_pods()]),
    Case("kubectl answers something that is not a pod list",
         ["diff", "worker-1"], {"get pods": {"stdout": "<html>proxy error</html>"}},
         2, "", "kubectl cgroup: kubectl get pods -o json answered something that is not a list of pods\n", [get_pods()]),
    Case("the pod went away between get and exec",
         ["diff", "worker-1"], {"get pods": pods(agent_pod()),
                                "exec": {"stderr": f'Error from server (NotFound): pods "{POD}" not found\n', "rc": 1}},
         2, "", f'kubectl cgroup: kubectl exec into {NS}/{POD} failed: Error from server (NotFound): pods "{POD}" not '
                'found\n', [get_pods(), exec_("diff", "--config", CFG)]),
    Case("a pod without an agent container",
         ["diff", "worker-1"], {"get pods": pods(agent_pod(containers=["sidecar", "main"]))},
         2, "", f"kubectl cgroup: the pod {NS}/{POD} has no container named agent\n", [get_pods()]),
]

BAD_ARGS = [
    Case("no NODE", ["diff"], {}, 2, "",
         "kubectl cgroup: the following arguments are required: NODE (see kubectl cgroup diff --help)\n"),
    Case("explain without POD", ["explain", "worker-1"], {}, 2, "",
         "kubectl cgroup: the following arguments are required: POD (see kubectl cgroup explain --help)\n"),
    Case("not a node name (no field-selector injection)", ["diff", "worker-1,metadata.name=x"], {}, 2, "",
         "kubectl cgroup: argument NODE: invalid node name 'worker-1,metadata.name=x' (see kubectl cgroup diff --help)\n"),
    Case("not a namespace", ["diff", "worker-1", "-n", "Agents"], {}, 2, "",
         "kubectl cgroup: argument -n/--namespace: invalid namespace 'Agents' (see kubectl cgroup diff --help)\n"),
    Case("unknown command", ["apply", "worker-1"], {}, 2, "",
         "kubectl cgroup: argument COMMAND: invalid choice: 'apply' (choose from 'diff', 'plan', 'explain', 'version') "
         "(see kubectl cgroup --help)\n"),
    Case("an output the agent has not", ["diff", "worker-1", "-o", "yaml"], {}, 2, "",
         "kubectl cgroup: argument -o/--output: invalid choice: 'yaml' (choose from 'table', 'json') "
         "(see kubectl cgroup diff --help)\n"),
    Case("an agent flag without --", ["diff", "worker-1", "--vpa", "vpas.yaml"], {}, 2, "",
         "kubectl cgroup: unrecognized arguments: --vpa vpas.yaml (kube-cgroup-agent's own flags go after --: "
         "kubectl cgroup diff NODE -- --flag value)\n"),
    Case("explain has no -o (the agent explains a pod as text)", ["explain", "worker-1", "shop/api", "-o", "json"], {}, 2,
         "", "kubectl cgroup: unrecognized arguments: -o json (kube-cgroup-agent's own flags go after --: "
             "kubectl cgroup diff NODE -- --flag value)\n"),
    Case("version takes no agent flags", ["version", "--", "--all"], {}, 2, "",
         "kubectl cgroup: version takes no kube-cgroup-agent flags (nothing after --)\n"),
]


def _check(run: Run, case: Case) -> None:
    assert "Traceback" not in run.stderr, run.stderr
    assert run.calls == case.calls
    assert run.stderr == case.stderr
    if case.stdout.startswith("kubectl-cgroup *\n"):
        first, rest = run.stdout.split("\n", 1)
        assert first.startswith("kubectl-cgroup 0") and rest == case.stdout.split("\n", 1)[1], run.stdout
    else:
        assert run.stdout == case.stdout
    assert run.rc == case.rc, run.stderr


@pytest.mark.parametrize("case", SUCCESS, ids=[c.id for c in SUCCESS])
def test_each_command_runs_in_the_nodes_agent_pod(kubectl_cgroup: Callable[..., Run], case: Case) -> None:
    _check(kubectl_cgroup(case.argv, case.scenario), case)


@pytest.mark.parametrize("case", ERRORS, ids=[c.id for c in ERRORS])
def test_each_failure_is_one_line_and_exit_code_2(kubectl_cgroup: Callable[..., Run], case: Case) -> None:
    run = kubectl_cgroup(case.argv, case.scenario)
    _check(run, case)
    assert run.stderr.count("\n") == 1


@pytest.mark.parametrize("case", BAD_ARGS, ids=[c.id for c in BAD_ARGS])
def test_bad_arguments_are_one_line_and_run_no_kubectl(kubectl_cgroup: Callable[..., Run], case: Case) -> None:
    run = kubectl_cgroup(case.argv, case.scenario)
    _check(run, case)
    assert run.stderr.count("\n") == 1


def test_kubectl_not_installed(kubectl_cgroup: Callable[..., Run]) -> None:
    run = kubectl_cgroup(["diff", "worker-1"], None)
    assert (run.rc, run.stdout, run.calls) == (2, "", [])
    assert run.stderr == ("kubectl cgroup: kubectl not found on PATH "
                          "(kubectl cgroup runs it: https://kubernetes.io/docs/tasks/tools/)\n")


def test_version_needs_no_kubectl(kubectl_cgroup: Callable[..., Run]) -> None:
    run = kubectl_cgroup(["version"], None)
    assert run.rc == 0 and run.stderr == "" and run.calls == []
    assert run.stdout.startswith(f"kubectl-cgroup {__import__('agent').__version__} (commit ")


@pytest.mark.parametrize("argv", [["--help"], ["diff", "--help"], ["plan", "-h"], ["explain", "--help"], ["version", "-h"]])
def test_help(kubectl_cgroup: Callable[..., Run], argv: list[str]) -> None:
    run = kubectl_cgroup(argv, {})
    assert run.rc == 0 and run.stderr == "" and run.calls == []
    assert run.stdout.startswith(f"usage: kubectl cgroup{' ' + argv[0] if argv[0] not in ('--help', '-h') else ''} ")
    assert "Exit codes: 0 no difference, 1 differences" in run.stdout


def test_no_arguments_print_the_help_and_fail(kubectl_cgroup: Callable[..., Run]) -> None:
    run = kubectl_cgroup([], {})
    assert run.rc == 2 and run.stdout == "" and run.calls == []
    assert run.stderr.startswith("usage: kubectl cgroup ") and "examples:" in run.stderr


# What the fake's exec runs: this checkout's kube-cgroup-agent on its sample node, the pod's config path
# mapped to the sample's config, as kubectl exec would end (exit code and its line).
REAL_AGENT = {"get pods": pods(agent_pod()), "exec": {"agent": {CFG: SAMPLE_CONFIG}}}


@pytest.mark.parametrize(
    ("argv", "direct"),
    [
        (["diff", "worker-1", "-o", "json"], ["diff", "--config", SAMPLE_CONFIG, "--output", "json"]),
        (["diff", "worker-1", "--all"], ["diff", "--config", SAMPLE_CONFIG, "--all"]),
        (["explain", "worker-1", "shop/api"], ["explain", "shop/api", "--config", SAMPLE_CONFIG]),
        (["explain", "worker-1", "shop/nope"], ["explain", "shop/nope", "--config", SAMPLE_CONFIG]),
    ],
    ids=["diff -o json", "diff --all", "explain", "explain an unknown pod"],
)
def test_the_output_is_the_clis_byte_for_byte(kubectl_cgroup: Callable[..., Run], argv: list[str],
                                               direct: list[str]) -> None:
    """Through the plugin and kubectl exec, the agent's stdout, stderr and exit code are what the CLI gives."""
    run = kubectl_cgroup(argv, REAL_AGENT)
    cli = run_cli(*direct)
    assert (run.rc, run.stdout, run.stderr) == (cli.returncode, cli.stdout, cli.stderr)
    assert cli.returncode in (0, 1, 2) and (cli.stdout or cli.stderr)
