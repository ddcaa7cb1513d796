"""`explain --admission`: what the VPA admission policy would set on a pod not created yet, and why; and
`vpa-admission`: the keeper of the policy's parameter objects (agent.daemon.vpa_admission)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from agent.infra.errors import PermanentError
from agent.pods.load import objects
from agent.pods.sources.limitrange_rules import parse_all
from agent.vpa.admission import AdmissionParams, admission_params, rivals_of
from agent.vpa.admission_cluster import TARGETS, template_spec
from agent.vpa.model import VPA
from agent.vpa.parse import parse_vpa
from agent.vpa.policy import Options

_WORKLOADS = frozenset(TARGETS)


class ManifestError(PermanentError):
    """A manifest `explain --admission` cannot act on (exit 2, one line)."""


def _read(path: str) -> list[Mapping[str, Any]]:
    try:
        text = Path(path).read_text() if path != "-" else sys.stdin.read()
    except OSError as err:
        raise ManifestError(f"cannot read {path}: {err.strerror or err}") from err
    return objects(text, path)


def _controller_ref(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the pod's controller reference, as written."""
    refs = [
        r
        for r in (pod.get("metadata") or {}).get("ownerReferences") or ()
        if isinstance(r, Mapping) and r.get("controller")
    ]
    return (str(refs[0].get("kind") or ""), str(refs[0].get("name") or "")) if refs else None


def _controller(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the workload that creates this manifest's pods, as the policy tells it."""
    kind = str(pod.get("kind") or "Pod")
    meta = pod.get("metadata") or {}
    if kind in _WORKLOADS:
        return kind, str(meta.get("name") or "")
    ref = _controller_ref(pod)
    if ref is None:
        return None
    ref_kind, ref_name = ref
    pod_hash = (meta.get("labels") or {}).get("pod-template-hash")
    if ref_kind == "ReplicaSet" and pod_hash and ref_name.endswith(f"-{pod_hash}"):
        return "Deployment", ref_name[: -len(pod_hash) - 1]
    if ref_kind == "Job" and ref_name.rpartition("-")[2].isdigit():
        return "CronJob", ref_name.rpartition("-")[0]  # or the Job itself: both are looked for
    return ref_kind, ref_name


def _candidates(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = _controller(pod)
    if found is None:
        return []
    out = [found]
    ref = _controller_ref(pod)
    if ref is not None and ref != found:
        out.append(ref)
    return out


def admission_decisions(
    pod: Mapping[str, Any], docs: Sequence[Mapping[str, Any]], opts: Options
) -> tuple[list[AdmissionParams], list[str]]:
    """The parameters each VPA of `docs` that controls `pod` would have (computed against the pod's own
    containers), and the problems met reading `docs`."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    problems: list[str] = []
    vpas: list[tuple[VPA, str]] = []
    for d in docs:
        if d.get("kind") == "VerticalPodAutoscaler":
            try:
                vpas.append((parse_vpa(d), str((d.get("metadata") or {}).get("uid") or "")))
            except ValueError as err:
                problems.append(str(err))
    limit_ranges = [
        d
        for d in docs
        if d.get("kind") == "LimitRange"
        and ((d.get("metadata") or {}).get("namespace") or "default") == namespace
    ]
    limit_ranges.sort(key=lambda o: str((o.get("metadata") or {}).get("name") or ""))
    ranges, lr_problems = parse_all(limit_ranges)
    problems.extend(lr_problems)
    kind = str(pod.get("kind") or "Pod")
    spec = template_spec(kind, pod) if kind in _WORKLOADS else pod.get("spec")
    if not isinstance(spec, Mapping):
        raise ManifestError(f"the {kind} manifest has no pod spec")
    wanted = set(_candidates(pod))
    rivals = rivals_of(v for v, _ in vpas)
    out = [
        admission_params(v, uid, spec, limit_ranges, ranges.get(namespace, ()), rivals.get(v.key, ()), opts)
        for v, uid in vpas
        if v.namespace == namespace and (v.target_kind, v.target_name) in wanted
    ]
    return out, problems


def _render(pod_name: str, decisions: Sequence[AdmissionParams], wanted: list[tuple[str, str]]) -> str:
    if not decisions:
        targets = (
            " or ".join(f"{k}/{n}" for k, n in wanted)
            or "no controller (a bare pod: the policy never changes it)"
        )
        return f"{pod_name}: no VPA targets {targets}: the pod is created as it is"
    lines = []
    for d in decisions:
        head = f"{pod_name}: VPA {d.namespace}/{d.vpa}"
        if d.skipped:
            lines.append(f"{head}: sets nothing: {d.skipped}")
            continue
        suffix = (
            {"Deployment": "-<pod-template-hash>", "CronJob": "-<n>"}.get(d.owner.via, "") if d.owner else ""
        )
        how = f" (a pod whose controller is {d.owner.kind} {d.owner.name}{suffix})" if d.owner else ""
        lines.append(f"{head} sets{how}:")
        if d.pod is not None:
            for kind, before, after in (
                ("requests", d.pod.from_requests, d.pod.to_requests),
                ("limits", d.pod.from_limits, d.pod.to_limits),
            ):
                lines.extend(f"  pod {kind}.{res}: {before.get(res, '-')} -> {value}" for res, value in after.items())
            lines.extend(f"  pod: {note}" for note in d.pod.notes)
        for c in d.containers:
            if not (c.to_requests or c.to_limits):
                why = "sized by the pod level" if d.pod is not None else "no recommendation, or its policy is Off"
                lines.append(f"  {c.name}: unchanged ({why})")
                continue
            for kind, before, after in (
                ("requests", c.from_requests, c.to_requests),
                ("limits", c.from_limits, c.to_limits),
            ):
                for res, value in after.items():
                    lines.append(f"  {c.name} {kind}.{res}: {before.get(res, '-')} -> {value}")
            lines.extend(f"  {c.name}: {note}" for note in c.notes)
        lines.append(f"  annotation vpaUpdates: {d.updates}")
        lines.append(f"  annotation vpaObservedContainers: {d.observed}")
    return "\n".join(lines)


def explain_admission(pod_file: str, vpa_file: str | None, output: str, opts: Options) -> int:
    pods = _read(pod_file)
    docs = [*pods, *(_read(vpa_file) if vpa_file else [])]
    targets = [p for p in pods if p.get("kind", "Pod") in ("Pod", *_WORKLOADS)]
    if len(targets) != 1:
        raise ManifestError(
            f"{pod_file} must hold one Pod or one workload ({', '.join(sorted(_WORKLOADS))}); it holds {len(targets)}"
        )
    pod = targets[0]
    decisions, problems = admission_decisions(pod, docs, opts)
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    meta = pod.get("metadata") or {}
    name = f"{pod.get('kind', 'Pod')} {meta.get('namespace') or 'default'}/{meta.get('name') or meta.get('generateName') or '<unnamed>'}"
    if output == "json":
        from agent.vpa.admission import entry

        print(
            json.dumps([entry(d) | {"target": d.target, "skipped": d.skipped} for d in decisions], indent=2)
        )
    else:
        print(_render(name, decisions, _candidates(pod)))
    return 0


def run_keeper(
    kubeconfig: str | None,
    opts: Options,
    resync_s: float,
    log_format: str,
    log_level: str,
    metrics_address: str = "127.0.0.1:9812",
    health_address: str = "127.0.0.1:9813",
) -> int:
    from agent.daemon.rollout_keeper import TurnKeeper
    from agent.daemon.vpa_admission import Keeper
    from agent.infra.apiserver import APIServer
    from agent.infra.logging import configure, get_logger
    from agent.infra.metrics import Endpoints, KeeperMetrics, Probe
    from agent.infra.version import commit, version
    from agent.kube.client import api_client

    configure(log_format, log_level)
    log = get_logger("agent.daemon.vpa_admission")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    metrics = KeeperMetrics()
    metrics.build_info.labels(version(), commit()).set(1)
    api = APIServer(api_client(kubeconfig, connections=16))  # ten watches, a DaemonSet's pods while it rolls out, the writes
    keeper = Keeper(api, metrics, opts, resync_s)
    turns = TurnKeeper(api, metrics)

    def healthy() -> tuple[bool, str]:
        stopped = sorted(t.name for t in turns.threads.threads if not t.is_alive())
        return (False, f"stopped: {', '.join(stopped)}") if stopped else keeper.healthy()

    metrics.follow_readiness(keeper.readiness)
    endpoints = Endpoints(metrics, Probe(healthy, keeper.readiness), metrics_address, health_address)
    log.info("listening", endpoints=list(endpoints.addresses))
    log.info("keeper.start", actuate_all=opts.actuate_all, resync_s=resync_s)
    try:
        keeper.start(stop)
        turns.start(stop)
        stop.wait()
        keeper.join(5.0)
        turns.join(5.0)
    finally:
        endpoints.close()
    return 0
