"""Figures 1 and 2: the agent's own time with no kernel in the way, `diff` as a whole process and one
incremental reconcile over an in-memory tree; what each costs per pod and why a missed target is missed."""

from __future__ import annotations

import os
from typing import Any

from bench.sections.units import meta, ms, verdict


def _spread(d: dict[str, float]) -> str:
    def whole_ms(x: float) -> str:
        return f"{x * 1000:.0f} ms"

    return f"{whole_ms(d['median_s'])} ({whole_ms(d['min_s'])}–{whole_ms(d['max_s'])}, n={d['repeat']})"



def diff_process(data: dict[str, Any]) -> list[str]:
    meta = data["_meta"]
    lines = [
        "## 1. `diff` as a whole process",
        "",
        f"Measured {meta['date']} on `{meta['machine']}` ({os.cpu_count()} CPUs); command: `{meta['command']}`.",
        "Each figure is the median wall time of the whole `python -m agent diff --pods pods.json --cgroupfs tree -o json`",
        "process over generated nodes (mixed QoS, sidecars and init containers, overhead, pod-level resources,",
        "hugepages; a converged hybrid v1 tree with 2 % drift), with min–max over the runs.",
        "",
        "| what | median (min–max) |",
        "| --- | --- |",
        f"| baseline: `python -c pass` | {_spread(data['baseline_python'])} |",
        f"| baseline: `python -c \"import kubernetes\"` | {_spread(data['baseline_import_kubernetes'])} |",
    ]
    for key, what in (("version", "`version`"), ("help", "`--help`")):
        if key in data:
            lines.append(f"| {what} | {_spread(data[key])} |")
    for n, d in data["diff"].items():
        lines.append(f"| `diff` over {int(n):,} pods | {_spread(d)} |")
    base = data["baseline_python"]["median_s"]
    thousand = data["diff"].get("1000")
    goals: list[str] = []
    if thousand:
        ratio = thousand["median_s"] / base
        met = ratio <= 8 and thousand["median_s"] < 0.25
        goals.append(f"- `diff` over 1,000 pods ≤ 8 × `python -c pass` and < 250 ms: {thousand['median_s'] * 1000:.0f} ms, "
                     f"{ratio:.1f} × — **{'met' if met else 'MISSED'}**.")
    for key, what in (("version", "`version`"), ("help", "`--help`")):
        if key in data:
            ratio = data[key]["median_s"] / base
            goals.append(f"- {what} ≤ 3 × `python -c pass`: {ratio:.1f} × — **{'met' if ratio <= 3 else 'MISSED'}**.")
    if goals:
        lines += ["", "Goals (the CLI imports only what its command uses; `tests/cli/test_cli.py` holds the import boundary):", *goals]
    if "phases_1000" in data and thousand:
        lines += ["", *_phases(data["phases_1000"], thousand["median_s"], base)]
    if "version_imports" in data:
        lines += ["", *_version_imports(data["version_imports"])]
    lines.append("")
    return lines



_PHASE_NAMES = {
    "imports": "imports of the command's modules",
    "settings": "settings and the cgroup hierarchies",
    "pods": "pods loaded and parsed",
    "compute": "values computed",
    "render": "desired files rendered",
    "read": "the node's files read",
    "diff": "diff",
    "output": "output",
}


def _phases(p: dict[str, float], whole: float, start: float) -> list[str]:
    """Figure 1's profile at 1,000 pods, from this run (bench/diff_phases.py), and what the goal would need."""
    files = int(p["files"])
    phases = [k for k in _PHASE_NAMES if k in p]
    inside = sum(p[k] for k in phases)
    python = inside - p["floor_read"]  # everything but the read's system calls
    goal = min(0.25, 8 * start)
    budget = goal - start - p["floor_read"]
    rows = [f"| {_PHASE_NAMES[k]} | {p[k] * 1000:.0f} ms |" for k in phases]
    lines = [
        "Where the 1,000-pod run goes, measured in this run (`bench/diff_phases.py`: each step of `diff` timed in a",
        f"fresh process, best of {int(p['runs'])}; the whole process above took {whole * 1000:.0f} ms, `python -c pass` {start * 1000:.0f} ms):",
        "",
        "| phase | wall time |",
        "| --- | --- |",
        *rows,
        f"| sum of the phases | {inside * 1000:.0f} ms |",
        f"| beside them: a bare loop of open, read, close over the same {files:,} files | {p['floor_read'] * 1000:.0f} ms |",
        "",
        "The read is one `openat2` per file beneath the tree (the kernel refuses any symlink on the way and any path",
        f"out of it), one read, one close: {p['read'] * 1000:.0f} ms against {p['floor_read'] * 1000:.0f} ms for the bare system calls.",
        f"Everything but those system calls is Python: {python * 1000:.0f} ms, {python / 1000 * 1e6:.0f} µs a pod"
        f" ({files / 1000:.0f} files a pod, each a setting, a desired file and a diff record).",
    ]
    if whole > goal:
        cut = python - max(budget, 0.0)
        by_python = {k: p[k] - (p["floor_read"] if k == "read" else 0.0) for k in phases}
        largest = max(by_python, key=lambda k: by_python[k])
        lines += [
            f"The goal ({goal * 1000:.0f} ms) leaves {max(budget, 0) * 1000:.0f} ms of Python after the interpreter's start and the read's",
            f"floor, {max(budget, 0) / 1000 * 1e6:.0f} µs a pod: {cut * 1000:.0f} ms less than now. The largest phase's Python, {_PHASE_NAMES[largest]},",
            f"is {by_python[largest] * 1000:.0f} ms: every phase would have to shrink by about {cut / python * 100:.0f} %; each is O(pods).",
            "Tried and not kept (earlier runs): two threads reading the files (no faster: the GIL and the file",
            "system's open path serialise them); directory descriptors opened once per directory (no faster for",
            "2.7 files a directory); the confinement verdicts remembered between passes (about 10 ms less a daemon",
            "resync, for 3.8 MiB more resident memory than figure 5 allows). The bytecode is precompiled by `make`",
            "and the cyclic collector is off for a one-shot command.",
        ]
    return lines


def _version_imports(imports: dict[str, float]) -> list[str]:
    """What `version` imports, from `python -X importtime` in this run (the top of its import tree)."""
    top = list(imports.items())[:5]
    parts = ", ".join(f"`{name}` {t * 1000:.1f} ms" for name, t in top)
    return [
        f"What `version` imports (`python -X importtime -m agent version`, best of 3, the largest at the top of the"
        f" tree): {parts}. `site` (the virtualenv's path set-up and its editable-install finder) runs in the"
        " baseline too; the command's own modules are its parser's (argparse and the settings' dataclasses, shared by"
        " every command) and the version's (git for the commit, in a source checkout).",
    ]


def incremental(d: dict[str, Any]) -> list[str]:
    small, big = d["sizes"]["10"], d["sizes"]["1000"]
    rows = [
        ("bare", "**bare node** (the agent owns everything), state store in memory"),
        ("bare_disk", "bare node, per-pod state store on disk (write + fsync of the changed records)"),
        ("kubelet", "**kubelet-owned node** (v1.36: the kubelet resizes; the agent follows, moves the tiers)"),
    ]

    def cell(f: dict[str, Any]) -> str:
        p, r = f["pooled_s"], f["run_medians_s"]
        return f"{ms(p['median'])} / {ms(p['p99'])} ({ms(r['min'])}–{ms(r['max'])})"

    lines = [
        "## 2. Incremental reconcile of one changed pod (agent time)",
        "",
        meta(d),
        "One event = one Guaranteed pod's CPU and memory limits changed (on a bare node its pod and container",
        "cgroups and the QoS tiers' qos-reserved memory change: 5 writes; on a kubelet-owned node the kubelet",
        "writes the pod and container, the agent the 2 tier values). Files are read from and written to an",
        "in-memory tree, the runtime applies container updates to it at once. The one reconciler, as the",
        "daemon builds it (`select_reconciler`) and hands it the event (`reconcile_pod`). Each cell: median /",
        f"p99 over all events, and in brackets the spread of the per-run medians ({d['events_per_run']} events per run).",
        "",
        "| node | 10 pods | 1,000 pods | ratio 1,000/10 (medians) | Python calls per event, 10 → 1,000 pods |",
        "| --- | --- | --- | --- | --- |",
    ]
    for key, label in rows:
        calls = "—"
        if key in small.get("calls_per_event", {}):
            calls = f"{small['calls_per_event'][key]:,.0f} → {big['calls_per_event'][key]:,.0f}"
        lines.append(f"| {label} | {cell(small[key + '_event'])} | {cell(big[key + '_event'])} | {d['ratio'][key]:.2f} | {calls} |")
    bare, kube, disk = (big[k + "_event"]["pooled_s"] for k in ("bare", "kubelet", "bare_disk"))
    lines += [
        "",
        "Targets at 1,000 pods: agent time per resize event p99 < 5 ms; ratio 1,000/10 <= 1.5, on both nodes.",
        "",
        f"- bare node: median {ms(bare['median'])}, p99 {ms(bare['p99'])} — {verdict(bare['p99'] < 0.005)}; ratio "
        f"{d['ratio']['bare']:.2f} — {verdict(d['ratio']['bare'] <= 1.5)}.",
        f"- kubelet-owned node: median {ms(kube['median'])}, p99 {ms(kube['p99'])} — {verdict(kube['p99'] < 0.005)}; "
        f"ratio {d['ratio']['kubelet']:.2f} — {verdict(d['ratio']['kubelet'] <= 1.5)}.",
        f"- with the state on disk: median {ms(disk['median'])}, p99 {ms(disk['p99'])}, ratio {d['ratio']['bare_disk']:.2f}:",
        "  a resize writes and fsyncs the changed pod's record once, its accepted allocation, before the first",
        "  cgroup write (as the kubelet writes its checkpoints: data fsynced, then renamed; the directory is",
        "  fsynced only when a record file is created or removed); the finished resize's record waits for the",
        "  next resync — O(changed pods), where the single checkpoint file of earlier releases was rewritten",
        "  and hashed whole.",
        "- What made the event O(changed): a pod event's pass covers the pods that changed or have a resize",
        "  queued plus the tiers from running totals; admission sees the other pods through running sums; one",
        "  record per pod; the pod's read-back snapshot serves the rest of the pass; a converged scope builds no",
        "  plan (no ordering, no invariant replay). The node-wide pass runs once per resync period.",
    ]
    if max(bare["p99"], kube["p99"]) >= 0.005:
        lines += [
            "- Where the p99 goes (missed in this run): single events at 1,000 pods take several times the median.",
            "  The per-run medians of the same code spread up to 2x on this shared 2-core VM, and the",
            "  interpreter's full garbage collections walk the larger heap; what is still O(node) per event is",
            "  cheap per pod (the immutable records mapping copied per state change, a scan of the records for",
            "  back-off and restarts, the status list): the Python calls per event above, 10 pods against 1,000.",
        ]
    lines.append("")
    return lines
