"""`kubectl cgroup`: the kubectl plugin (krew's convention: an executable `kubectl-cgroup` on PATH, installed
with the project as a console script) that runs `diff`, `plan` or `explain` in one node's agent pod, with
that pod's own configuration, and prints what the agent printed, with its exit code.

kubectl talks to the cluster, not this module: the user's kubeconfig, context and RBAC apply unchanged, and
the plugin imports nothing but the standard library (no Kubernetes client to load). It finds the pod as the
DaemonSet of deploy/base/daemonset.yaml selects it (its selector's label, on the node by field selector),
checks that it is Ready, reads the `--config` its agent container runs with, and runs
`kubectl exec -n NS POD -c agent -- kube-cgroup-agent COMMAND --config PATH ...`.

Exit codes: 0 and 1 are the agent's (no difference; differences), as is any other code of the command in the
pod; every failure of the plugin or of kubectl is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from agent.infra.errors import PermanentError

PROG = "kubectl cgroup"
# What deploy/base/daemonset.yaml deploys (tests/plugin checks these against it).
NAMESPACE = "kube-cgroup-agent"
SELECTOR = "app.kubernetes.io/name=kube-cgroup-agent"
CONTAINER = "agent"
CONFIG = "/etc/kube-cgroup-agent/config.yaml"  # used when the container's command line names none
AGENT = "kube-cgroup-agent"  # the command in the image

EXIT_OK = 0
EXIT_ERROR = 2  # as the agent's own CLI: 1 means "differences found"
EXIT_INTERRUPTED = 130

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_TERMINATED = re.compile(rb"command terminated with exit code (\d+)\s*")  # kubectl exec, the remote exit code
_KLOG = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d")  # kubectl's own log lines (-v), not its error


class PluginError(PermanentError):
    """A failure the user can act on: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments"):
            raise PluginError(f"{message} (kube-cgroup-agent's own flags go after --: {PROG} diff NODE -- --flag value)")
        raise PluginError(f"{message} (see {self.prog} --help)")


def _node_name(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"invalid node name {value!r}")
    return value


def _namespace(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise argparse.ArgumentTypeError(f"invalid namespace {value!r}")
    return value


def _kubectl_flags(p: argparse.ArgumentParser, top: bool) -> None:
    """kubectl's own flags, given to every kubectl this runs. Accepted before and after the command: the
    command's copies leave the value unset unless given there (SUPPRESS), so neither place overrides the other."""
    unset = None if top else argparse.SUPPRESS
    g = p.add_argument_group("kubectl")
    g.add_argument("--context", default=unset, help="the kubeconfig context to use (kubectl's --context)")
    g.add_argument("--kubeconfig", default=unset, metavar="FILE", help="the kubeconfig file (kubectl's --kubeconfig)")
    g.add_argument(
        "-n",
        "--namespace",
        type=_namespace,
        default=NAMESPACE if top else argparse.SUPPRESS,
        help=f"the agent's namespace (default {NAMESPACE})",
    )
    g.add_argument("--as", dest="as_user", default=unset, metavar="USER", help="impersonate USER (kubectl's --as)")


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["table", "json"], help="the agent's output format (default table)")


EPILOG = f"""\
examples:
  {PROG} diff worker-1                 what the agent would change on node worker-1
  {PROG} diff worker-1 --all -o json   every value it computes there, as JSON
  {PROG} plan worker-1                 the ordered steps `apply` would run
  {PROG} explain worker-1 shop/api     how each value of pod shop/api was derived
  {PROG} diff worker-1 -- --qos-reserved memory=50%
                                       what if: flags after -- go to kube-cgroup-agent unchanged
  {PROG} version worker-1              this plugin's version, then that node's agent's

kubectl's --context, --kubeconfig and --as go anywhere after `cgroup`; -n names the agent's namespace.
Exit codes: 0 no difference, 1 differences (as kube-cgroup-agent's), 2 an error (one line on stderr); any
other is the agent command's own (137: killed at its pod's memory limit). RBAC needed in the agent's
namespace: get and list on pods, create on pods/exec.
"""
COMMAND_EPILOG = f"""\
Flags after -- go to kube-cgroup-agent unchanged. Exit codes: 0 no difference, 1 differences, 2 an error.
More: {PROG} --help.
"""
DESCRIPTION = """\
Runs kube-cgroup-agent's read-only commands in one node's agent pod, with that pod's own configuration,
through kubectl (your kubeconfig, context and RBAC), and prints what the agent prints.
"""


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _kubectl_flags(p, top=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, node: bool = True) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=summary, description=summary, epilog=COMMAND_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        c.add_argument("node", metavar="NODE", type=_node_name, nargs=None if node else "?",
                       help="the node's name" + ("" if node else ": also print its agent's version"))
        return c

    d = command("diff", "show what differs between the desired and the current cgroup values on NODE")
    d.add_argument("--all", action="store_true", help="list every value, not only the differing ones")
    _output(d)
    pl = command("plan", "show the ordered steps `apply` would run on NODE")
    _output(pl)
    e = command("explain", "show how each value of one pod on NODE was derived")
    e.add_argument("pod", metavar="POD", help="the pod: namespace/name, name, or UID")
    # no -o: the agent explains a pod as text only (its --output is for --admission, a local file)
    command("version", "print this plugin's version (with NODE, that node's agent's too)", node=False)
    for c in sub.choices.values():
        _kubectl_flags(c, top=False)
    return p


@dataclass(frozen=True)
class Kubectl:
    """The user's kubectl, with the flags that pick the cluster and the user, before every verb."""

    path: str
    flags: tuple[str, ...] = ()

    def argv(self, *words: str) -> list[str]:
        return [self.path, *self.flags, *words]

    def run(self, *words: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(self.argv(*words), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  check=False)
        except OSError as err:
            raise PluginError(f"cannot run {self.path}: {err.strerror or err}") from None


def find_kubectl(args: argparse.Namespace) -> Kubectl:
    path = shutil.which("kubectl")
    if path is None:
        raise PluginError("kubectl not found on PATH (kubectl cgroup runs it: https://kubernetes.io/docs/tasks/tools/)")
    flags: list[str] = []
    for flag, value in (("--kubeconfig", args.kubeconfig), ("--context", args.context), ("--as", args.as_user)):
        if value:
            flags += [flag, value]
    return Kubectl(path, tuple(flags))


def kubectl_message(stderr: str) -> str:
    """kubectl's error, one line: its last line that is not one of its log lines."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not _KLOG.match(ln.strip())]
    errors = [ln for ln in lines if ln.lower().startswith(("error", "unable to connect"))]
    return (errors or lines or ["(no message)"])[-1]


def _forbidden(message: str) -> bool:
    return "forbidden" in message.lower()


@dataclass(frozen=True)
class AgentPod:
    namespace: str
    name: str
    node: str
    container: str
    config: str


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _why_not_ready(pod: dict[str, Any], container: str) -> str:
    """The pod's phase and what keeps it from Ready, as `kubectl describe` would let one find out."""
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return f"phase {status.get('phase', 'Unknown')}, terminating (a new one follows: try again shortly)"
    why = [f"phase {status.get('phase', 'Unknown')}"]
    if status.get("reason"):
        why.append(f"reason {status['reason']}")
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") != container:
            continue
        state = cs.get("state") or {}
        if "waiting" in state:
            why.append(f"container {container} waiting: {(state['waiting'] or {}).get('reason', 'unknown')}")
        elif "terminated" in state:
            t = state["terminated"] or {}
            why.append(f"container {container} terminated: {t.get('reason', 'unknown')} (exit code {t.get('exitCode', '?')})")
        elif "running" in state:
            started = " (still starting)" if cs.get("started") is False else ""
            why.append(f"container {container} running but not ready{started}")
        if cs.get("restartCount"):
            why.append(f"{cs['restartCount']} restarts")
        break
    else:
        for c in status.get("conditions") or []:
            if c.get("status") != "True" and c.get("reason"):
                why.append(f"{c.get('type')}: {c['reason']}")
                break
    return ", ".join(why)


def _config_path(container: dict[str, Any]) -> str:
    """The --config the agent container runs with (the DaemonSet's), else the shipped path."""
    words = [str(w) for w in (*(container.get("command") or []), *(container.get("args") or []))]
    for i, word in enumerate(words):
        if word.startswith("--config="):
            return word.split("=", 1)[1]
        if word == "--config" and i + 1 < len(words):
            return words[i + 1]
    return CONFIG


def _agent_container(pod: dict[str, Any], where: str) -> dict[str, Any]:
    containers = (pod.get("spec") or {}).get("containers") or []
    named = [c for c in containers if c.get("name") == CONTAINER]
    if named:
        return dict(named[0])
    if len(containers) == 1:
        return dict(containers[0])
    raise PluginError(f"the pod {where} has no container named {CONTAINER}")


def _node_missing(kubectl: Kubectl, node: str) -> bool:
    """Whether the node does not exist. Asked only once no agent pod was found there; a user who may not read
    nodes gets the no-pod message instead."""
    done = kubectl.run("get", "node", node, "-o", "name")
    return done.returncode != 0 and "notfound" in kubectl_message(done.stderr).replace(" ", "").lower()


def find_agent_pod(kubectl: Kubectl, namespace: str, node: str) -> AgentPod:
    done = kubectl.run("get", "pods", "-n", namespace, "-l", SELECTOR, "--field-selector", f"spec.nodeName={node}",
                       "-o", "json")
    if done.returncode != 0:
        message = kubectl_message(done.stderr)
        if _forbidden(message):
            raise PluginError(f"not allowed to list pods in namespace {namespace}: {message} "
                              f"(kubectl cgroup needs get and list on pods there)")
        raise PluginError(f"kubectl get pods failed: {message}")
    try:
        items = [dict(p) for p in json.loads(done.stdout)["items"]]
    except (ValueError, KeyError, TypeError):
        raise PluginError("kubectl get pods -o json answered something that is not a list of pods") from None
    if not items:
        if _node_missing(kubectl, node):
            raise PluginError(f"node {node} not found (kubectl get nodes)")
        raise PluginError(f"no kube-cgroup-agent pod on node {node} "
                          f"(is the DaemonSet scheduled there? kubectl get ds -n {namespace})")

    def newest(pods: list[dict[str, Any]]) -> dict[str, Any]:
        return max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")))

    live = [p for p in items if not (p.get("metadata") or {}).get("deletionTimestamp")]
    ready = [p for p in live if _ready(p)]
    pod = newest(ready or live or items)
    name = str(pod["metadata"]["name"])
    where = f"{namespace}/{name}"
    container = _agent_container(pod, where)
    if not ready:
        raise PluginError(f"the kube-cgroup-agent pod {where} on node {node} is not Ready: "
                          f"{_why_not_ready(pod, str(container.get('name')))} "
                          f"(kubectl describe pod -n {namespace} {name})")
    return AgentPod(namespace, name, node, str(container["name"]), _config_path(container))


def exec_agent(kubectl: Kubectl, pod: AgentPod, words: Sequence[str]) -> int:
    """`kube-cgroup-agent WORDS` in the pod: its stdout straight through, its stderr without kubectl's line
    about the exit code, its exit code returned; kubectl's own failures (RBAC, a pod gone) as PluginError."""
    argv = kubectl.argv("exec", "-n", pod.namespace, pod.name, "-c", pod.container, "--", AGENT, *words)
    sys.stdout.flush()  # what this process printed comes before what the agent prints
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as failed:
        raise PluginError(f"cannot run {kubectl.path}: {failed.strerror or failed}") from None
    _, err = proc.communicate()
    code = proc.returncode
    lines = err.splitlines(keepends=True)
    ran = code == 0
    if code != 0 and lines:
        last = _TERMINATED.fullmatch(lines[-1])
        if last and int(last.group(1)) == code:
            lines, ran = lines[:-1], True
    if ran:
        sys.stderr.flush()
        sys.stderr.buffer.write(b"".join(lines))
        sys.stderr.buffer.flush()
        return code
    message = kubectl_message(err.decode(errors="replace"))
    where = f"{pod.namespace}/{pod.name}"
    if _forbidden(message):
        raise PluginError(f"not allowed to exec into {where}: {message} (kubectl cgroup needs create on "
                          f"pods/exec in namespace {pod.namespace}: kubectl auth can-i create pods/exec -n {pod.namespace})")
    raise PluginError(f"kubectl exec into {where} failed: {message}")


def agent_words(args: argparse.Namespace, config: str, passthrough: Sequence[str]) -> list[str]:
    """The agent's command line for what the user asked, spelled as agent/commands/arguments.py defines it."""
    words = [args.command]
    if args.command == "explain":
        words.append(args.pod)
    words += ["--config", config]
    if getattr(args, "all", False):
        words.append("--all")
    if getattr(args, "output", None):
        words += ["--output", args.output]
    return [*words, *passthrough]


def version() -> str:
    import platform

    from agent import __version__
    from agent.infra.version import commit

    return f"kubectl-cgroup {__version__} (commit {commit()}, Python {platform.python_version()})"


def run(args: argparse.Namespace, passthrough: Sequence[str]) -> int:
    if args.command == "version":
        if passthrough:
            raise PluginError("version takes no kube-cgroup-agent flags (nothing after --)")
        print(version())
        if args.node is None:
            return EXIT_OK
    kubectl = find_kubectl(args)
    pod = find_agent_pod(kubectl, args.namespace, args.node)
    if args.command == "version":
        return exec_agent(kubectl, pod, ["version"])
    return exec_agent(kubectl, pod, agent_words(args, pod.config, passthrough))


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in words:  # the rest goes to kube-cgroup-agent unchanged
        at = words.index("--")
        words, passthrough = words[:at], words[at + 1:]
    p = parser()
    if not words:
        p.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return run(p.parse_args(words), passthrough)
    except PluginError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
