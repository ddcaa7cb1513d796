"""How results look: a readable tree for people, JSON for machines (the contract of DESIGN.md)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent.core.compute.pod import PodComputation
from agent.core.diff import FileDiff, NodeDiff, Owner, QuotaWriteEvidence, WeightFormulaEvidence
from agent.core.model import UNLIMITED, Problem, Resources
from cgroupfs.convert import hugepage_size_name

if TYPE_CHECKING:  # `diff` renders without loading the planner, the resize engine or VPA
    from agent.core.plan import Plan
    from agent.resize.types import ResizeStatus
    from agent.vpa.model import VPA
    from agent.vpa.podlevel_source import PodLevelRecord
    from agent.vpa.source import VPASource


def _problems(items: Iterable[Problem]) -> list[dict[str, Any]]:
    return [{"pod": p.pod, "message": p.message} for p in items]


def diff_json(node: NodeDiff, show_all: bool = False) -> str:
    files = node.files if show_all else node.changes
    cgroups = [
        {"path": f.setting.path, "current": f.current, "desired": f.setting.value,
         # under the systemd driver, a CPU limit's exact quota beside systemd's rounded one
         **({"accept": list(f.desired.accept)} if f.desired.accept else {})}
        for f in files
        if f.desired.owner is not Owner.CONTAINER
    ]
    containers = [
        {
            "pod": f.desired.pod,
            "container": f.desired.container,
            "containerID": f.desired.container_id,
            "field": f.desired.field,
            "path": f.setting.path,
            "current": f.current,
            "desired": f.setting.value,
            # values that mean the same (a container's cgroup v2 cpu.weight: either runtime formula; under the
            # systemd driver a CPU limit's exact quota)
            **({"accept": list(f.desired.accept)} if f.desired.accept else {}),
        }
        for f in files
        if f.desired.owner is Owner.CONTAINER
    ]
    out = {
        "cgroups": cgroups,
        "containers": containers,
        "warnings": _problems(node.warnings),
        "errors": _problems(node.errors),
    }
    return json.dumps(out, indent=2)


_QUOTA_FILES = ("cpu.max", "cpu.cfs_quota_us")


def _arrow(f: FileDiff) -> str:
    cur = "(missing)" if f.current is None else f.current
    if not f.differs:
        if f.desired.accept and f.setting.filename in _QUOTA_FILES and f.current not in (None, f.setting.value):
            return f"{cur}  (ok: the exact quota; systemd keeps {f.setting.value}, and writes it at its next re-apply)"
        return f"{cur}  (ok)"
    return f"{cur} → {f.setting.value}"


def _systemd_quota(quota: int | None, period: int | None) -> tuple[int, int] | None:
    """systemd's rounded (quota, period) where it differs from the exact one; None where they agree."""
    from cgroupfs.systemd.grain import cpu_max_forms

    forms = cpu_max_forms(quota, period)
    return forms[0] if len(forms) > 1 else None


def _quota_lines(
    comp: PodComputation, quotas: Mapping[Owner, QuotaWriteEvidence], weights: WeightFormulaEvidence | None
) -> list[str]:
    v = comp.values
    kept = _systemd_quota(v.cpu_quota, v.cpu_period)
    if kept is None and not any(_systemd_quota(c.values.cpu_quota, c.values.cpu_period) for c in comp.containers):
        return []
    lines = ["  cpu quota under the systemd driver: systemd keeps CPUQuota= in whole percents (10 ms per CPU second) and "
             "writes that rounded quota whenever it applies the unit (its start, every daemon-reload, another "
             "property change); a writer before opencontainers/cgroups v0.0.2 (a kubelet < 1.34 for pods, runc < 1.3.2 "
             "for containers) leaves the exact quota in the file until then, newer ones write the rounded one at "
             "once: either value is converged, and the agent writes the rounded one"]
    if kept is not None:
        lines.append(f"    pod: exact {v.cpu_quota} per {v.cpu_period} µs, systemd's {kept[0]} per {kept[1]} µs")
    for cc in comp.containers:
        c = _systemd_quota(cc.values.cpu_quota, cc.values.cpu_period)
        if c is not None:
            lines.append(f"    container {cc.container.name}: exact {cc.values.cpu_quota} per {cc.values.cpu_period} µs, "
                         f"systemd's {c[0]} per {c[1]} µs")
    said = {Owner.POD: "pod slices by the kubelet", Owner.CONTAINER: "containers by the runtime"}
    lines.extend(f"    {said[o]}: {quotas[o].describe()}" for o in (Owner.POD, Owner.CONTAINER) if o in quotas)
    from cgroupfs.systemd.grain import runc_quota_write_of_weight_formula

    write = runc_quota_write_of_weight_formula(weights.formula) if weights is not None else None
    if write is not None:  # runc 1.3.2 changed both
        lines.append(f"    the containers' cpu.weight formula ({weights.formula if weights else ''}) says runc writes "
                     f"quotas {write.value}")
    return lines


def _footer(warnings: Sequence[Problem], errors: Sequence[Problem]) -> list[str]:
    lines: list[str] = []
    for w in warnings:
        lines.append(f"warning: {w.pod + ': ' if w.pod else ''}{w.message}")
    for e in errors:
        lines.append(f"error: {e.pod + ': ' if e.pod else ''}{e.message}")
    return lines


def diff_table(node: NodeDiff, show_all: bool = False) -> str:
    """The cgroup tree, current → desired, grouped by tier, pod and container."""
    files = node.files if show_all else node.changes
    lines: list[str] = []
    qos_of = {p.pod.key: p.qos.qos.value for p in node.computation.pods}
    last_header = ""
    for f in files:
        d = f.desired
        if d.owner is Owner.TIER:
            header = f"tier {d.setting.cgroup}"
        elif d.owner is Owner.POD:
            header = f"pod {d.pod} ({qos_of.get(d.pod or '', '?')}) {d.setting.cgroup}"
        else:
            cid = (d.container_id or "")[:12]
            header = f"  container {d.container} ({cid}) of {d.pod}"
        if header != last_header:
            lines.append(header)
            last_header = header
        indent = "      " if d.owner is Owner.CONTAINER else "    "
        lines.append(f"{indent}{f.setting.path:<70} {_arrow(f)}")
    if not files:
        lines.append("no differences")
    elif not show_all:
        counts = {o: sum(1 for f in files if f.desired.owner is o) for o in Owner}
        lines.append(
            f"{len(files)} value(s) differ: {counts[Owner.TIER]} in QoS tiers, {counts[Owner.POD]} in pod cgroups, "
            f"{counts[Owner.CONTAINER]} in containers"
        )
    lines.extend(_footer(node.warnings, node.errors))
    return "\n".join(lines)


def plan_json(plan: Plan, resizes: Sequence[ResizeStatus] = ()) -> str:
    return json.dumps(
        {
            "steps": [s.to_json() for s in plan.steps],
            "warnings": _problems(plan.warnings),
            "errors": _problems(plan.errors),
            "resizes": [r.to_json() for r in resizes],
        },
        indent=2,
    )


def resize_line(status: ResizeStatus) -> str:
    """One line per pod resize: state, reason and message (plan's table, explain)."""
    why = f" ({status.reason})" if status.reason else ""
    return f"resize {status.pod}: {status.state.value}{why}" + (
        f" — {status.message}" if status.message else ""
    )


def plan_table(plan: Plan, resizes: Sequence[ResizeStatus] = ()) -> str:
    from agent.core.plan import CgroupStep, ContainerStep, RestartStep  # loaded already: it built `plan`

    lines: list[str] = [resize_line(r) for r in resizes]
    for i, s in enumerate(plan.steps, 1):
        if isinstance(s, CgroupStep):
            cur = "(missing)" if s.current is None else s.current
            what = "write QoS tier" if s.owner is Owner.TIER else "write"
            note = (
                " (set at usage if the kernel refuses, as the kubelet does)" if s.at_usage_on_refusal else ""
            )
            lines.append(f"{i:3}. [{s.resource:<7}] {what} {s.path}: {cur} → {s.setting.value}{note}")
        elif isinstance(s, ContainerStep):
            change = ", ".join(f"{c.desired.field} {c.current} → {c.setting.value}" for c in s.changes)
            lines.append(
                f"{i:3}. [{s.resource:<7}] update container {s.pod}/{s.container} ({s.container_id[:12]}): {change}"
            )
        elif isinstance(s, RestartStep):
            why = ", ".join(s.resources)
            lines.append(
                f"{i:3}. [restart] stop container {s.pod}/{s.container} ({s.container_id[:12]}) so it restarts"
                f" with its new values (resize policy RestartContainer: {why})"
            )
    if not plan.steps:
        lines.append("nothing to do")
    lines.extend(_footer(plan.warnings, plan.errors))
    return "\n".join(lines)


def _res(r: Resources | None) -> str:
    if r is None:
        return "—"
    parts = []
    if r.cpu_milli is not None:
        parts.append(f"cpu {r.cpu_milli}m")
    if r.memory is not None:
        parts.append(f"memory {r.memory}")
    for size, amount in sorted(r.hugepages.items()):
        parts.append(f"hugepages-{hugepage_size_name(size)} {amount}")
    return ", ".join(parts) if parts else "none"


def _num(v: int | None) -> str:
    if v is None:
        return "not set"
    return "unlimited (-1)" if v == UNLIMITED else str(v)


def explain(
    comp: PodComputation,
    files: Sequence[FileDiff] = (),
    resize: ResizeStatus | None = None,
    weights: WeightFormulaEvidence | None = None,
    quotas: Mapping[Owner, QuotaWriteEvidence] | None = None,
) -> str:
    """How each value of one pod was derived: QoS and why, each sum, each formula, each file; on cgroup v2,
    which shares→weight formula the runtime uses for containers (`weights`, read node-wide); under the
    systemd driver (`quotas`, read node-wide, not None), a quota's two forms and how its writers left it."""
    p = comp.pod
    v = comp.values
    lines = [f"pod {p.key} (uid {p.uid})", f"  QoS class: {comp.qos.qos.value} — {comp.qos.reason}"]
    lines.append("  containers:")
    for c in (*p.init_containers, *p.containers):
        lines.append(f"    {c.kind.value:<8} {c.name}: requests {_res(c.requests)}; limits {_res(c.limits)}")
    if p.provenance:
        lines.append("  desired state not from the spec (field: source):")
        lines.extend(f"    {fld}: {src}" for fld, src in sorted(p.provenance.items()))
    else:
        lines.append("  desired state: the spec (no other source proposed a value)")
    for label, agg in (("requests", comp.requests_aggregate), ("limits", comp.limits_aggregate)):
        lines.append(f"  {label}: running containers (regular + sidecars) sum to {_res(agg.running)}")
        for phase in agg.init_phases:
            lines.append(f"    while init container {phase.container} runs: {_res(phase.amounts)}")
        lines.append(f"    aggregate = max of those = {_res(agg.total)}")
    if p.pod_requests is not None or p.pod_limits is not None:
        lines.append(
            f"  pod-level resources (from {p.pod_level_source}): requests {_res(p.pod_requests)}; "
            f"limits {_res(p.pod_limits)} — they replace the aggregate per resource"
        )
    lines.append(f"  overhead: {_res(p.overhead)} (added to requests; to limits only where a limit is set)")
    lines.append(f"  PodRequests = {_res(comp.requests)}")
    lines.append(f"  PodLimits   = {_res(comp.limits)}")
    lines.append(
        f"  every container declares a CPU limit: {comp.cpu_limits_declared}; a memory limit: "
        f"{comp.memory_limits_declared} (a Burstable pod gets a quota / memory limit only if so, "
        "or with a pod-level limit)"
    )
    req_cpu = comp.requests.cpu_milli or 0
    lim_cpu = comp.limits.cpu_milli or 0
    lines.append(f"  pod cgroup {comp.cgroup}:")
    lines.append(
        f"    cpu.shares = MilliCPUToShares({req_cpu}m) = max(2, {req_cpu}*1024/1000) = {_num(v.cpu_shares)}"
    )
    if v.cpu_quota is not None:
        lines.append(
            f"    cpu quota = MilliCPUToQuota({lim_cpu}m, period {v.cpu_period}) = "
            f"max(1000, {lim_cpu}*{v.cpu_period}/1000) = {_num(v.cpu_quota)} µs"
        )
    else:
        lines.append("    cpu quota: not set")
    lines.append(f"    memory limit = {_num(v.memory_limit)}")
    lines.append(f"    memory reservation (soft limit / memory.low) = {_num(v.memory_reservation)}")
    for size, limit in sorted(v.hugetlb.items()):
        lines.append(
            f"    hugetlb {hugepage_size_name(size)} = {limit} (from requests; unrequested sizes are 0)"
        )
    for cc in comp.containers:
        cv = cc.values
        note = []
        if cc.cpu_limit_from_pod:
            note.append("CPU limit from the pod-level limit")
        if cc.memory_limit_from_pod:
            note.append("memory limit from the pod-level limit")
        lines.append(
            f"  container {cc.container.name}: cpu_shares {cv.cpu_shares}, cpu_quota {_num(cv.cpu_quota)}, "
            f"cpu_period {cv.cpu_period}, memory_limit_in_bytes {_num(cv.memory_limit)}"
            + (f" ({'; '.join(note)})" if note else "")
        )
    if weights is not None:
        lines.append(
            "  cpu.weight: pod and QoS cgroups linear (the kubelet: 1 + (shares - 2) * 9999 / 262142); "
            f"containers by the runtime: {weights.describe()}"
        )
    if quotas is not None:
        lines.extend(_quota_lines(comp, quotas, weights))
    if files:
        lines.append("  files:")
        for f in files:
            lines.append(f"    {f.setting.path:<70} {_arrow(f)}")
    if resize is not None:
        lines.append("  " + resize_line(resize))
    for w in comp.warnings:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def explain_vpa(key: str, uid: str, src: VPASource) -> list[str]:
    """The VPA part of `explain`: which VPA, its recommendation, each container's clamped target, and why
    it was or was not applied (the same decision the daemon makes: agent.vpa.source)."""
    conflict = src.conflicts.get(key)
    if conflict:
        return [f"  VPA: left alone — {len(conflict)} VPAs target this pod's owner chain: {', '.join(conflict)}"]
    verdict = src.verdicts.get(key)
    record = src.records.get(key)
    if verdict is None or record is None:
        kept = src.applied.get(uid)
        if verdict is not None:  # decided without a recommendation to show (panic button)
            return [f"  VPA {verdict[0]}: not applied — {verdict[1].reason}"]
        return ["  VPA: none controls this pod" + (f" (a target of VPA {kept[0]} stays applied)" if kept else "")]
    vpa, targets, pod_level = record
    actuator = "opted in" if vpa.opted_in else "not opted in (annotation kube-cgroup-agent.io/vpa-actuator: node)"
    lines = [
        f"  VPA {vpa.key}: targetRef {vpa.target_kind}/{vpa.target_name}, updateMode {vpa.mode.value}, {actuator}"
        + (f", recommenders {', '.join(vpa.recommenders)}" if vpa.recommenders else "")
    ]
    by_name = {t.container: t for t in targets}
    for rec in vpa.recommendations:
        lines.append(
            f"    {rec.container}: recommended {_res(rec.target)} (lower {_res(rec.lower)}; upper {_res(rec.upper)})"
        )
        policy = vpa.policy_for(rec.container)
        if policy is not None and policy.off:
            lines.append("      policy mode Off: never changed")
            continue
        if policy is not None:
            lines.append(
                f"      policy ({policy.container}): minAllowed {_res(policy.min_allowed)}; maxAllowed "
                f"{_res(policy.max_allowed)}; controls {', '.join(sorted(policy.controlled))}; {policy.values.value}"
            )
        t = by_name.get(rec.container)
        if t is not None:
            lines.append(f"      clamped target: requests {_res(t.requests)}; limits {_res(t.limits)}")
        elif pod_level is not None:
            lines.append("      counted in the pod level only (no resources of its own, or not in the pod)")
        else:
            lines.append("      no such container in the pod")
    if pod_level is not None:
        lines.extend(_pod_level_lines(vpa, pod_level))
    decision = verdict[1]
    lines.append(f"    decision: {'applied' if decision.apply else 'not applied'} — {decision.reason}")
    lines.extend(f"    held: {h}" for h in decision.held)
    lines.extend(f"    restarts (resizePolicy RestartContainer): {r}" for r in decision.restarts)
    kept = src.applied.get(uid)
    if kept is not None and not decision.apply:
        lines.append("    applied before and kept: " + "; ".join(
            f"{t.container or 'pod level'} requests {_res(t.requests)}, limits {_res(t.limits)}" for t in kept[1]))
    blocked = src.blocked.get(uid)
    if blocked is not None:
        lines.append(f"    last resize: {blocked.state.value}" + (f" ({blocked.message})" if blocked.message else ""))
    return lines


def _pod_level_lines(vpa: VPA, rec: PodLevelRecord) -> list[str]:
    """The pod-level part of `explain` (docs/vpa-pod-level.md): the recommendation and where it comes
    from, the podPolicy and LimitRange type Pod it is capped by, and the `spec.resources` it makes."""
    raw = rec.recommendation
    if raw is None:
        return ["    pod level: no recommendation yet"]
    origin = "summed from the containers'" if raw.source == "containers" else f"podRecommendations ({raw.source})"
    lines = [f"    pod level: recommended {_res(raw.target)} (lower {_res(raw.lower)}; upper {_res(raw.upper)}), {origin}"]
    p = vpa.pod_policy
    if p is not None:
        lines.append(
            f"      podPolicy ({p.source}): mode {p.mode.value if p.mode else 'not stated'}; minAllowed {_res(p.min_allowed)}; "
            f"maxAllowed {_res(p.max_allowed)}; controls {', '.join(sorted(p.controlled))}; {p.values.value}"
        )
    bounds = rec.bounds
    lines.append(f"      LimitRange type Pod: min {_res(bounds.min)}; max {_res(bounds.max)}" if bounds else "      LimitRange type Pod: none")
    if rec.capped is not None:
        capped = rec.capped
        lines.append(f"      capped: {_res(capped.target)} (lower {_res(capped.lower)}; upper {_res(capped.upper)})"
                     + (f" — {'; '.join(rec.notes)}" if rec.notes else ""))
    if rec.target is not None:
        lines.append(f"      target spec.resources: requests {_res(rec.target.requests)}; limits {_res(rec.target.limits)}")
    return lines
