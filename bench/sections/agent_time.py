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
    if thousand and not (thousand["median_s"] / base <= 8 and thousand["median_s"] < 0.25):
        lines += [
            "",
            "Where the 1,000-pod run goes (in-process wall time of each phase, best of 3, at commit c804842, measured",
            "beside this figure; the whole process took 350–390 ms then, bare `python -c pass` 20 ms): imports 46 ms",
            "(about 25 of them the dataclasses of the command's modules, whose generated methods Python 3.11",
            "compiles at import); loading and parsing the pods 38; computing 35; rendering the desired files 41;",
            "reading the node's files 108 — one `openat2` per file beneath the tree (the kernel refuses any symlink",
            "on the way and any path out of it; the component-by-component O_NOFOLLOW walk where openat2 is",
            "missing), one read for a short file: 13,079 opens, reads and closes, which a bare loop of the same",
            "calls over the same files does in 70 ms, the floor; the diff 17; then the output and the interpreter's",
            "start. The remaining distance is per-record Python work (39,000 small frozen records: each file's",
            "setting, desired file and diff) and the imports, not system calls. Tried and not kept: two threads",
            "reading the files (no faster: the GIL and the file system's open path serialise them); directory",
            "descriptors opened once per directory (no faster for 2.7 files a directory); each file's path stored",
            "in its record and the confinement verdicts remembered between passes (about 10 ms less a daemon",
            "resync, for 3.8 MiB more resident memory than figure 5 allows). Each phase is O(pods); the bytecode",
            "is precompiled by `make` and the cyclic collector is off for a one-shot command line.",
        ]
    lines.append("")
    return lines



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
        "- Where the p99 goes when it is missed: the medians are well under 5 ms and the ratio is met, but single",
        "  events at 1,000 pods reach 10-20 ms. The per-run medians of the same code spread up to 2x on this",
        "  shared 2-core VM (a 10-pod run measured 5.4 ms median once and 2.8 ms a minute later), and the",
        "  interpreter's full garbage collections walk the larger heap; what is still O(node) per event is",
        "  cheap per pod (the immutable records mapping copied per state change, a scan of the records for",
        "  back-off and restarts, the status list), about 1,000 extra Python calls per event at 1,000 pods.",
        "",
    ]
    return lines
