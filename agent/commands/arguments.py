"""The command line's grammar: each command's arguments, and the settings its flags make (a config file,
then flags, then the kubelet's own configuration for what both leave unset). `parser(command)` defines only
the named command's arguments: all a line naming it needs."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.config.settings import Settings

    _Commands = argparse._SubParsersAction[argparse.ArgumentParser]  # what add_subparsers returns

KUBELET_CONFIG = Path("/var/lib/kubelet/config.yaml")  # where kubeadm and most installers put it


def common(p: argparse.ArgumentParser, pods: bool = True) -> None:
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


def vpa_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--vpa",
        help="VerticalPodAutoscaler, ReplicaSet and Node manifests: decide VPA pods as the daemon would "
        "(default with vpa.enabled and pods from the API: read them from the API)",
    )


def build_settings(args: argparse.Namespace) -> Settings:
    from agent.config.settings import Settings, from_mapping, load_file

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
    from agent.config.kubelet import inherit
    from agent.config.settings import ConfigError

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
    for name, define in COMMAND_ARGS.items():
        if command is None or command == name:
            define(sub)
    return p


def _version_args(sub: _Commands) -> None:
    sub.add_parser("version", help="print the version")


def _diff_args(sub: _Commands) -> None:
    d = sub.add_parser("diff", help="show what differs between the desired and the current cgroup values")
    common(d)
    vpa_flag(d)
    d.add_argument("--all", action="store_true", help="list every value, not only the differing ones")
    d.add_argument("--output", "-o", choices=["table", "json"], default="table")


def _plan_args(sub: _Commands) -> None:
    pl = sub.add_parser("plan", help="show the ordered steps apply would run")
    common(pl)
    vpa_flag(pl)
    pl.add_argument("--output", "-o", choices=["table", "json"], default="table")


def _explain_args(sub: _Commands) -> None:
    e = sub.add_parser("explain", help="show how each value of one pod was derived")
    e.add_argument("pod", metavar="POD", nargs="?", help="namespace/name, name, or UID (not with --admission)")
    common(e)
    vpa_flag(e)
    e.add_argument(
        "--admission",
        metavar="MANIFEST",
        help="a pod not created yet (a Pod, or the workload that creates it, with LimitRanges beside it): "
        "what the VPA admission policy would set, from the VPAs of --vpa",
    )
    e.add_argument("--output", "-o", choices=["table", "json"], default="table", help="with --admission")


def _apply_args(sub: _Commands) -> None:
    a = sub.add_parser("apply", help="reconcile once, then exit")
    common(a)
    a.add_argument("--output", "-o", choices=["table", "json"], default="table")
    a.add_argument("--create-qos-cgroups", action="store_const", const=True, default=None)


def _check_args(sub: _Commands) -> None:
    c = sub.add_parser("check", help="environment diagnostics")
    common(c, pods=False)
    c.add_argument("--output", "-o", choices=["table", "json"], default="table")


def _recommend_args(sub: _Commands) -> None:
    rec = sub.add_parser("recommend", help="VPA's recommendation per pod and container, from this node or a trace")
    common(rec, pods=False)
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


def _vpa_admission_args(sub: _Commands) -> None:
    k = sub.add_parser("vpa-admission", help="keep the VPA admission policy's parameter objects (one per cluster)")
    k.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    k.add_argument("--config", help="YAML config file (its vpa.actuate: all covers VPAs without the opt-in)")
    k.add_argument("--resync-period", default="60s", help="full pass interval, e.g. 60s (default 60s)")
    k.add_argument(
        "--metrics-bind-address", default="127.0.0.1:9812", help="host:port for /metrics (default 127.0.0.1:9812)"
    )
    k.add_argument(
        "--health-bind-address",
        default="127.0.0.1:9813",
        help="host:port for /healthz and /readyz (default 127.0.0.1:9813)",
    )
    k.add_argument("--log-format", choices=["auto", "json", "console", "journal"], default="auto")
    k.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info")


def _run_args(sub: _Commands) -> None:
    r = sub.add_parser("run", help="the daemon: watch the node's pods and reconcile continuously")
    common(r)
    r.add_argument("--metrics-bind-address", help="host:port for /metrics (default 127.0.0.1:9812)")
    r.add_argument(
        "--health-bind-address", help="host:port for /healthz and /readyz (default 127.0.0.1:9813)"
    )
    r.add_argument("--resync-period", help="full reconcile interval, e.g. 60s (default 60s)")
    r.add_argument(
        "--observe-only", action="store_const", const=True, default=None, help="report drift, write nothing"
    )
    r.add_argument("--create-qos-cgroups", action="store_const", const=True, default=None)
    r.add_argument("--log-format", choices=["auto", "json", "console", "journal"])
    r.add_argument("--log-level", choices=["debug", "info", "warning", "error"])


# In the order `--help` lists them.
COMMAND_ARGS: dict[str, Callable[[_Commands], None]] = {
    "version": _version_args,
    "diff": _diff_args,
    "plan": _plan_args,
    "explain": _explain_args,
    "apply": _apply_args,
    "check": _check_args,
    "recommend": _recommend_args,
    "rollout": _rollout_args,
    "vpa-admission": _vpa_admission_args,
    "run": _run_args,
}
