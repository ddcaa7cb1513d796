"""`diff`, `plan` and `explain`: what the agent would change on this node, shown and never written.

Each runs the one pipeline (`agent.pipeline`) to its diff or plan; with a resize checkpoint the resize
engine's dry run shows its steps instead; with VPAs (a file, or the API) they decide as the daemon would.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.commands.arguments import build_settings
from agent.infra.errors import PermanentError

if TYPE_CHECKING:
    from agent.config.settings import Settings

EXIT_OK = 0
EXIT_DIFFERENCES = 1
EXIT_ERROR = 2


class UsageError(PermanentError):
    """A command line that cannot be acted on."""


def _vpa_sources(args: argparse.Namespace, settings: Settings) -> list[Any]:
    """The VPA source the daemon would have, from --vpa or (vpa.enabled, pods from the API) the API."""
    from_file = bool(getattr(args, "vpa", None))
    if not from_file and not (settings.vpa.enabled and settings.pods is None):
        return []  # before loading VPA's modules: most commands have no VPA
    from agent.core.ownership import Thing, resolve
    from agent.kube.vpa_inputs import read_api
    from agent.vpa.inputs import cli_source, read_file

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


def diff(args: argparse.Namespace) -> int:
    from agent import pipeline
    from agent.commands import render

    settings = build_settings(args)
    _, node = pipeline.compare(settings, sources=_vpa_sources(args, settings))
    print(render.diff_json(node, args.all) if args.output == "json" else render.diff_table(node, args.all))
    if node.errors:
        return EXIT_ERROR
    return EXIT_DIFFERENCES if node.changes else EXIT_OK


def plan(args: argparse.Namespace) -> int:
    from agent import pipeline
    from agent.commands import render

    settings = build_settings(args)
    vpa = _vpa_sources(args, settings)
    result = pipeline.run(settings, sources=vpa)
    plan = result.plan()
    errors = (*result.diff.errors, *plan.errors)
    from agent.core.plan import Plan

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


def explain(args: argparse.Namespace) -> int:
    from agent import pipeline
    from agent.commands import render

    settings = build_settings(args)
    if args.admission:
        if args.pod:
            raise UsageError("explain takes a POD or --admission MANIFEST, not both")
        from agent.commands.admission import explain_admission

        return explain_admission(args.admission, args.vpa, args.output, settings.vpa.options())
    if not args.pod:
        raise UsageError("explain needs a POD (namespace/name, name or UID), or --admission MANIFEST")
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
    from agent.core.diff import container_weight_formula, quota_writes
    from cgroupfs.layout import CPU_WEIGHT
    from cgroupfs.types import DriverKind

    weights = None
    if any(f.setting.filename == CPU_WEIGHT for f in result.diff.files):  # cgroup v2: name the formulas
        weights = container_weight_formula(result.diff.files)
    quotas = quota_writes(result.diff.files) if settings.cgroup_driver is DriverKind.SYSTEMD else None
    print(render.explain(comp, files, status, weights, quotas))
    for source in vpa:
        if status is not None:
            source.observe_status(status.uid, status.pod, status.state.value, status.message or status.reason)
        print("\n".join(render.explain_vpa(comp.pod.key, comp.pod.uid, source)))
    return EXIT_OK
