"""`kube-cgroup-agent` command line: wiring only. Bad input ends in one clear line and exit code 2,
never a traceback. Heavy modules (kubernetes, grpc) are imported only by the commands that need them."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import PermanentError

if TYPE_CHECKING:
    from agent.settings import Settings

    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]  # what add_subparsers returns

EXIT_OK = 0
EXIT_DIFFERENCES = 1
EXIT_ERROR = 2
KUBELET_CONFIG = Path("/var/lib/kubelet/config.yaml")  # where kubeadm and most installers put it


class UsageError(PermanentError):
    """A command line that cannot be acted on."""


OOM_SCORE_ADJ = Path("/proc/self/oom_score_adj")
# Commands that build the node's state once, show or apply it, and exit: what they allocate lives until the
# end, so the cyclic garbage collector only scans it again and again (some 230 passes, a tenth of a 1,000-pod
# `diff`). Reference counting still frees what they drop.
ONE_PASS = frozenset({"diff", "plan", "explain", "apply"})


def yield_memory_to_the_daemon(path: Path = OOM_SCORE_ADJ) -> bool:
    """Make this process the kernel's first choice when memory runs out.

    Why: `kubectl exec` into the agent's pod runs a command in the daemon's own memory cgroup; at the pod's
    limit the kernel kills the task with the highest badness, which would be the daemon (the larger RSS).
    Raising one's own OOM score needs no privilege. False where /proc refuses it (best effort)."""
    try:
        path.write_text("1000")
    except OSError:
        return False
    return True


def _common(p: argparse.ArgumentParser, pods: bool = True) -> None:
    p.add_argument(
        "--config", help="YAML config file (kubelet names: cgroupRoot, cgroupDriver, qosReserved...)"
    )
    if pods:
        p.add_argument("--pods", help="a file or directory of Pod manifests (YAML/JSON/List), or - for stdin")
    p.add_argument("--kubeconfig", help="kubeconfig to list the node's pods when --pods is not given")
    p.add_argument("--node", help="this node's name (default: $NODE_NAME)")
    p.add_argument("--cgroupfs", help="where the cgroup filesystem is mounted (default /sys/fs/cgroup)")
    p.add_argument("--cgroup-root", help="the kubelet's --cgroup-root (default /)")
    p.add_argument("--cgroup-driver", choices=["cgroupfs", "systemd"])
    p.add_argument("--cgroup-version", choices=["auto", "1", "2"])
    p.add_argument("--cri-endpoint", help="CRI socket, e.g. unix:///run/containerd/containerd.sock")
    p.add_argument("--allocatable", help="what kubepods is sized with, e.g. cpu=8,memory=32Gi")
    p.add_argument("--qos-reserved", help="e.g. memory=50%%")
    p.add_argument("--hugepage-sizes", help="e.g. 2Mi,1Gi (default: the node's)")
    p.add_argument(
        "--cpu-weight-formula", choices=["linear", "quadratic"], help="cgroup v2 pod/QoS cpu.weight"
    )
    p.add_argument("--state-dir", help="checkpoint and node-local state (default /var/lib/kube-cgroup-agent)")
    p.add_argument(
        "--kubelet-config",
        help="the kubelet's KubeletConfiguration file: the kubelet's knobs default from it (explicit settings win)",
    )


_FLAG_KEYS = {
    "pods": "pods",
    "kubeconfig": "kubeconfig",
    "node": "nodeName",
    "cgroupfs": "cgroupfs",
    "cgroup_root": "cgroupRoot",
    "cgroup_driver": "cgroupDriver",
    "cgroup_version": "cgroupVersion",
    "cri_endpoint": "criEndpoint",
    "allocatable": "allocatable",
    "qos_reserved": "qosReserved",
    "hugepage_sizes": "hugepageSizes",
    "cpu_weight_formula": "cpuWeightFormula",
    "state_dir": "stateDir",
    "kubelet_config": "kubeletConfig",
    "create_qos_cgroups": "createQOSCgroups",
    "metrics_bind_address": "metricsBindAddress",
    "health_bind_address": "healthBindAddress",
    "resync_period": "resyncPeriod",
    "observe_only": "observeOnly",
    "log_format": "logFormat",
    "log_level": "logLevel",
}


def _vpa_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--vpa",
        help="VerticalPodAutoscaler, ReplicaSet and Node manifests: decide VPA pods as the daemon would "
        "(default with vpa.enabled and pods from the API: read them from the API)",
    )


def _vpa_sources(args: argparse.Namespace, settings: Settings) -> list[Any]:
    """The VPA source the daemon would have, from --vpa or (vpa.enabled, pods from the API) the API."""
    from_file = bool(getattr(args, "vpa", None))
    if not from_file and not (settings.vpa.enabled and settings.pods is None):
        return []  # before loading VPA's modules: most commands have no VPA
    from agent.ownership import Thing, resolve
    from agent.vpainputs import cli_source, read_api, read_file

    node = settings.node_name or os.environ.get("NODE_NAME")
    if from_file:
        inputs = read_file(Path(args.vpa), node)
    else:
        found = read_api(settings.kubeconfig, node)
        if found is None:
            return []
        inputs = found
    for problem in inputs.problems:
        print(f"warning: {problem}", file=sys.stderr)
    ownership = resolve(settings.ownership, inputs.kubelet_version, settings.feature_gates, settings.observe_only)
    source, warning = cli_source(
        inputs, settings.vpa.options(), settings.state_dir, not ownership.writes(Thing.CONTAINER_RESIZES)
    )
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return [source]


def build_settings(args: argparse.Namespace) -> Settings:
    from agent.settings import Settings, from_mapping, load_file

    base = Settings()
    if getattr(args, "config", None):
        base = load_file(Path(args.config))
    flags: dict[str, Any] = {}
    for attr, key in _FLAG_KEYS.items():
        value = getattr(args, attr, None)
        if value is not None:
            flags[key] = value
    if os.environ.get("NODE_NAME") and "nodeName" not in flags and base.node_name is None:
        flags["nodeName"] = os.environ["NODE_NAME"]
    from agent.kubeletconfig import inherit
    from agent.settings import ConfigError

    settings = from_mapping(flags, base, relative_to=Path.cwd()) if flags else base
    if getattr(args, "command", None) != "check":
        return inherit(settings)
    # check reads the kubelet's default file when none is named; a file it cannot use (absent, invalid) is one
    # of its findings, reported as a check, not a reason to stop
    if settings.kubelet_config is None and KUBELET_CONFIG.is_file():
        settings = replace(settings, kubelet_config=KUBELET_CONFIG)
    try:
        return inherit(settings)
    except ConfigError:
        return settings




def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line. With `command`, only that command's arguments are defined: all that parsing a line
    which names it needs (defining every command's took a few ms of each run)."""
    p = argparse.ArgumentParser(
        prog="kube-cgroup-agent",
        description="Computes the kubelet's cgroup values for a node's pods and QoS tiers, shows and applies them.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, define in _COMMAND_ARGS.items():
        if command is None or command == name:
            define(sub)
    return p


def _version_args(sub: _Commands) -> None:
    sub.add_parser("version", help="print the version")


def _diff_args(sub: _Commands) -> None:
    d = sub.add_parser("diff", help="show what differs between the desired and the current cgroup values")
    _common(d)
    _vpa_flag(d)
    d.add_argument("--all", action="store_true", help="list every value, not only the differing ones")
    d.add_argument("--output", "-o", choices=["table", "json"], default="table")


def _plan_args(sub: _Commands) -> None:
    pl = sub.add_parser("plan", help="show the ordered steps apply would run")
    _common(pl)
    _vpa_flag(pl)
    pl.add_argument("--output", "-o", choices=["table", "json"], default="table")


def _explain_args(sub: _Commands) -> None:
    e = sub.add_parser("explain", help="show how each value of one pod was derived")
    e.add_argument("pod", metavar="POD", help="namespace/name, name, or UID")
    _common(e)
    _vpa_flag(e)


def _apply_args(sub: _Commands) -> None:
    a = sub.add_parser("apply", help="reconcile once, then exit")
    _common(a)
    a.add_argument("--output", "-o", choices=["table", "json"], default="table")
    a.add_argument("--create-qos-cgroups", action="store_const", const=True, default=None)


def _check_args(sub: _Commands) -> None:
    c = sub.add_parser("check", help="environment diagnostics")
    _common(c, pods=False)
    c.add_argument("--output", "-o", choices=["table", "json"], default="table")


def _recommend_args(sub: _Commands) -> None:
    rec = sub.add_parser("recommend", help="VPA's recommendation per pod and container, from this node or a trace")
    _common(rec, pods=False)
    rec.add_argument("--samples", help="compute from a recorded trace (JSON lines; - for stdin) instead of the node")
    rec.add_argument("--now", type=float, help="UNIX seconds: containers unseen for the memory window are dropped")
    rec.add_argument("--record", help="sample this node and write the trace to this file (see --duration)")
    rec.add_argument("--duration", type=float, default=60.0, help="seconds to record (default 60)")
    rec.add_argument("--output", "-o", choices=["table", "json"], default="table")


def _rollout_args(sub: _Commands) -> None:
    ro = sub.add_parser("rollout", help="graceful in-place updates of StatefulSets and DaemonSets")
    ro_sub = ro.add_subparsers(dest="rollout_command", required=True, metavar="SUBCOMMAND")
    ros = ro_sub.add_parser("status", help="where each pod of an opted-in workload stands in its rollout")
    ros.add_argument("target", metavar="KIND/NAME", help="statefulset/NAME or daemonset/NAME")
    ros.add_argument("--namespace", "-n", default="default")
    ros.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    ros.add_argument("--config", help="YAML config file (its rollout.readyTimeout says when a pod has failed)")
    ros.add_argument("--output", "-o", choices=["table", "json"], default="table")


def _run_args(sub: _Commands) -> None:
    r = sub.add_parser("run", help="the daemon: watch the node's pods and reconcile continuously")
    _common(r)
    r.add_argument("--metrics-bind-address", help="host:port for /metrics (default 127.0.0.1:9812)")
    r.add_argument(
        "--health-bind-address", help="host:port for /healthz and /readyz (default 127.0.0.1:9813)"
    )
    r.add_argument("--resync-period", help="full reconcile interval, e.g. 60s (default 60s)")
    r.add_argument(
        "--observe-only", action="store_const", const=True, default=None, help="report drift, write nothing"
    )
    r.add_argument("--create-qos-cgroups", action="store_const", const=True, default=None)
    r.add_argument("--log-format", choices=["auto", "json", "console"])
    r.add_argument("--log-level", choices=["debug", "info", "warning", "error"])


# In the order `--help` lists them.
_COMMAND_ARGS: dict[str, Callable[[_Commands], None]] = {
    "version": _version_args,
    "diff": _diff_args,
    "plan": _plan_args,
    "explain": _explain_args,
    "apply": _apply_args,
    "check": _check_args,
    "recommend": _recommend_args,
    "rollout": _rollout_args,
    "run": _run_args,
}


def _cmd_diff(args: argparse.Namespace) -> int:
    from agent import pipeline, render

    settings = build_settings(args)
    _, node = pipeline.compare(settings, sources=_vpa_sources(args, settings))
    print(render.diff_json(node, args.all) if args.output == "json" else render.diff_table(node, args.all))
    if node.errors:
        return EXIT_ERROR
    return EXIT_DIFFERENCES if node.changes else EXIT_OK


def _cmd_plan(args: argparse.Namespace) -> int:
    from agent import pipeline, render

    settings = build_settings(args)
    vpa = _vpa_sources(args, settings)
    result = pipeline.run(settings, sources=vpa)
    plan = result.plan()
    errors = (*result.diff.errors, *plan.errors)
    from agent.plan import Plan

    shown = Plan(plan.steps, (*result.diff.warnings, *plan.warnings), errors)
    resizes = _resize_dry_run(settings, result.env, vpa)  # the resize engine's steps, when it manages the node
    if resizes is not None:
        resized = resizes.plan()
        errors = resized.errors
        shown = Plan(resized.steps, resized.warnings, errors)
        plan = resized
    statuses = resizes.statuses if resizes is not None else ()
    print(render.plan_json(shown, statuses) if args.output == "json" else render.plan_table(shown, statuses))
    if errors:
        return EXIT_ERROR
    return EXIT_DIFFERENCES if plan.steps else EXIT_OK


def _resize_dry_run(settings: Settings, env: Any, sources: Sequence[Any] = ()) -> Any:
    """The resize engine's dry run (agent.resize.engine.dry_run) when a resize checkpoint exists."""
    from agent.pipeline import load_pods
    from agent.resize.engine import dry_run
    from agent.resize.store import PodStore

    if not PodStore(settings.state_dir).exists():
        return None
    return dry_run(settings, env, load_pods(settings, sources).pods)


def _cmd_explain(args: argparse.Namespace) -> int:
    from agent import pipeline, render

    settings = build_settings(args)
    vpa = _vpa_sources(args, settings)
    result = pipeline.run(settings, sources=vpa)
    wanted = args.pod
    matches = [p for p in result.diff.computation.pods if wanted in (p.pod.key, p.pod.name, p.pod.uid)]
    if not matches:
        errs = [e for e in result.diff.errors if e.pod and wanted in (e.pod, e.pod.split("/")[-1])]
        if errs:
            raise UsageError(f"pod {wanted} cannot be computed: {errs[0].message}")
        raise UsageError(f"pod {wanted} is not among the node's pods")
    if len(matches) > 1:
        raise UsageError(f"{wanted} matches {len(matches)} pods; give namespace/name or the UID")
    comp = matches[0]
    files = [f for f in result.diff.files if f.desired.pod == comp.pod.key]
    resizes = _resize_dry_run(settings, result.env, vpa)
    status = next((s for s in resizes.statuses if s.uid == comp.pod.uid), None) if resizes else None
    from agent.diff import container_weight_formula
    from cgroupfs.layout import CPU_WEIGHT

    weights = None
    if any(f.setting.filename == CPU_WEIGHT for f in result.diff.files):  # cgroup v2: name the formulas
        weights = container_weight_formula(result.diff.files)
    print(render.explain(comp, files, status, weights))
    for source in vpa:
        if status is not None:
            source.observe_status(status.uid, status.pod, status.state.value, status.message or status.reason)
        print("\n".join(render.explain_vpa(comp.pod.key, comp.pod.uid, source)))
    return EXIT_OK


def _cmd_apply(args: argparse.Namespace) -> int:
    from agent.apply import apply_once

    code: int = apply_once(build_settings(args), args.output)
    return code


def _cmd_check(args: argparse.Namespace) -> int:
    from agent.checkcmd import run_check

    settings = build_settings(args)
    code: int = run_check(
        settings, str(settings.kubelet_config) if settings.kubelet_config else None, args.output
    )
    return code


def _cmd_recommend(args: argparse.Namespace) -> int:
    settings = build_settings(args)
    if args.record:
        from agent.recommendcmd import record

        return record(settings, Path(args.record), args.duration)
    from agent.recommendcmd import run

    return run(settings.recommender, settings.state_dir, args.samples, args.now, args.output)


def _cmd_rollout(args: argparse.Namespace) -> int:
    from agent.rolloutcmd import run
    from agent.settings import Settings, load_file

    settings = load_file(Path(args.config)) if args.config else Settings()
    return run(args.target, args.namespace, args.kubeconfig or settings.kubeconfig, settings.rollout, args.output)


def _cmd_run(args: argparse.Namespace) -> int:
    from agent.daemon import run

    return run(build_settings(args))


COMMANDS = {
    "diff": _cmd_diff,
    "plan": _cmd_plan,
    "explain": _cmd_explain,
    "apply": _cmd_apply,
    "check": _cmd_check,
    "recommend": _cmd_recommend,
    "rollout": _cmd_rollout,
    "run": _cmd_run,
}


def main(argv: Sequence[str] | None = None) -> int:
    # gRPC's core logs a runtime's GOAWAY (its server stopping) at INFO on stderr, a line that is not the
    # daemon's JSON; the agent reports the CRI error itself. Set before grpc is first imported; the
    # environment still wins (GRPC_VERBOSITY=INFO to debug the transport).
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    words = sys.argv[1:] if argv is None else list(argv)
    named = words[0] if words and words[0] in _COMMAND_ARGS else None  # else the whole parser says what is wrong
    args = parser(named).parse_args(words)
    if argv is None and args.command != "run":  # a command line, not a call from code that owns the process
        yield_memory_to_the_daemon()
        if args.command in ONE_PASS:
            gc.disable()
    if args.command == "version":
        from agent.version import describe

        print(describe())
        return EXIT_OK
    from agent.errors import user_message

    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # one clear line, never a traceback
        message = user_message(err)
        if message is None:
            raise
        print(f"kube-cgroup-agent: {message}", file=sys.stderr)
        return EXIT_ERROR


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
