"""The BENCHMARKS.md section of each figure, rendered from its results (bench/results/<name>.json).

Each figure module measures and returns plain data; this module only renders it, with the verdict
against each target of issue 7 and, where one is missed, why and what would close it. Which figures
exist is bench/figures.py; which commit each was measured at, bench/report.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def _verdict(ok: bool) -> str:
    return "**met**" if ok else "**MISSED**"


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _meta(data: dict[str, Any]) -> str:
    meta = data.get("_meta", {})
    return f"Measured {meta.get('date', '?')}; command: `{meta.get('command', 'make bench')}`."


def machine() -> list[str]:
    """The machine BENCHMARKS.md is regenerated on; report.py checks each figure was measured on it."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kib = next(
            int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
        )
        memory = f"{mem_kib / (1 << 20):.1f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "?"
    os_name = "?"
    with contextlib.suppress(OSError, StopIteration):
        os_name = next(
            line.split("=", 1)[1].strip('"')
            for line in Path("/etc/os-release").read_text().splitlines()
            if line.startswith("PRETTY_NAME=")
        )
    return [
        "## Machine",
        "",
        f"`{platform.node()}`: {os_name}, kernel {platform.release()}, {os.cpu_count()} × {model}, {memory} RAM,",
        "cgroup v1 (cpu and memory hierarchies at /sys/fs/cgroup/{cpu,memory}, hugetlb alone on the unified mount),",
        f"CPython {platform.python_version()}, containerd 1.6.20 + runc 1.1.5 (Debian 12) for figure 4.",
        "",
    ]


def _incremental(d: dict[str, Any]) -> list[str]:
    small, big = d["sizes"]["10"], d["sizes"]["1000"]
    rows = [
        ("bare", "**bare node** (the agent owns everything), state store in memory"),
        ("bare_disk", "bare node, per-pod state store on disk (write + fsync of the changed records)"),
        ("kubelet", "**kubelet-owned node** (v1.36: the kubelet resizes; the agent follows, moves the tiers)"),
    ]

    def cell(f: dict[str, Any]) -> str:
        p, r = f["pooled_s"], f["run_medians_s"]
        return f"{_ms(p['median'])} / {_ms(p['p99'])} ({_ms(r['min'])}–{_ms(r['max'])})"

    lines = [
        "## 2. Incremental reconcile of one changed pod (agent time)",
        "",
        _meta(d),
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
        f"- bare node: median {_ms(bare['median'])}, p99 {_ms(bare['p99'])} — {_verdict(bare['p99'] < 0.005)}; ratio "
        f"{d['ratio']['bare']:.2f} — {_verdict(d['ratio']['bare'] <= 1.5)}.",
        f"- kubelet-owned node: median {_ms(kube['median'])}, p99 {_ms(kube['p99'])} — {_verdict(kube['p99'] < 0.005)}; "
        f"ratio {d['ratio']['kubelet']:.2f} — {_verdict(d['ratio']['kubelet'] <= 1.5)}.",
        f"- with the state on disk: median {_ms(disk['median'])}, p99 {_ms(disk['p99'])}, ratio {d['ratio']['bare_disk']:.2f}:",
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


def _writes(d: dict[str, Any]) -> list[str]:
    lines = ["## 3. Writes on the real cgroup v1 files", "", _meta(d)]
    if "skipped" in d:
        return [*lines, f"Skipped: {d['skipped']}.", ""]
    resyncs = [r["writes"] for r in d["resyncs"]]
    resizes = d["resizes"]
    exact = all(r["writes"] == r["changed_values"] and r["same_files"] and not r["read_back_wrong"] for r in resizes)
    lines += [
        f"{d['pods']} generated pods (no hugepages) applied by `apply` (`reconcile_once`) under the private root",
        f"`{d['root']}` in the cpu and memory hierarchies (pod cgroups made first, as the kubelet would); the",
        f"first apply wrote {d['first_apply_writes']} values. Writes are counted by `CgroupFiles.writes`; the",
        "expected count comes independently from the desired files before and after, compared as the kernel",
        "stores them (page-rounded memory). Root removed afterwards"
        + (": nothing left behind." if not d["left_behind"] else f": LEFT BEHIND {d['left_behind']}."),
        "",
        "| pass | values changed (independent count) | writes | same files | read back |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines.append(f"| {len(resyncs)} converged resyncs | 0 each | {', '.join(map(str, resyncs))} | — | — |")
    wrong = [p for r in resizes for p in r["read_back_wrong"]]
    lines.append(
        f"| {len(resizes)} resizes (3 pods' CPU and memory limits, alternating) | "
        f"{', '.join(str(r['changed_values']) for r in resizes)} | {', '.join(str(r['writes']) for r in resizes)} | "
        f"{'all' if all(r['same_files'] for r in resizes) else 'NOT ALL'} | "
        f"{'every new value' if not wrong else 'WRONG: ' + ', '.join(wrong)} |"
    )
    lines += [
        "",
        f"Targets: zero writes when converged — {_verdict(all(w == 0 for w in resyncs))}; exactly the changed "
        f"values otherwise — {_verdict(exact)}.",
        "",
        "Wall time of one write, same file and same value, interleaved (n per side in the table):",
        "",
        "| file (depth below the mount) | agent `CgroupFiles.write` median / p99 | bare `os.open/write/close` median / p99 | ratio | agent overhead |",
        "| --- | --- | --- | --- | --- |",
    ]
    for w in d["per_write"]:
        a, b = w["agent_s"], w["bare_s"]
        lines.append(
            f"| `{w['file']}` ({w['depth']}) | {_us(a['median'])} / {_us(a['p99'])} | {_us(b['median'])} / "
            f"{_us(b['p99'])} | {w['ratio']:.2f} (n={a['n']}) | {_us(a['median'] - b['median'])} |"
        )
    lines += [
        "",
        "The agent's write opens every path component with `openat(O_NOFOLLOW)` from the mount down (confinement:",
        "no symlink is ever followed) and checks the write was whole; the bare write is one `open`. The extra",
        "~10-15 µs per write is about 0.1 % of one UpdateContainerResources call (figure 4). Caching an fd of",
        "each owned root would cut the walk to the components below it, if it ever mattered.",
        "",
    ]
    return lines


THE_RECONCILER = "engine"  # the key tests/e2e/test_bench_resize.py records the daemon's one reconciler under


def _left_out(kinds: list[str], figure: str) -> list[str]:
    """Rows of reconcilers the daemon no longer has, in results measured before it had one: not shown as
    if they described the code."""
    if not kinds:
        return []
    return ["", f"Left out: rows of reconciler(s) {', '.join(kinds)} in these results, measured before the daemon had "
            f"one reconciler; `python -m bench --only {figure}` measures the one it has."]


def _containerd(d: dict[str, Any]) -> list[str]:
    lines = ["## 4. Real containerd: a resize through the agent vs the bare CRI call", "", _meta(d)]
    if "skipped" in d:
        tail = d.get("output_tail", "")
        return [*lines, f"Skipped: {d['skipped']}.", *(["", "```", tail[-1500:], "```"] if tail else []), ""]
    lines += [
        f"Harness: `{d['command']}` (private containerd 1.6.20 + runc, whole run {d['harness_wall_s']:.0f} s),",
        "module tests/e2e/test_bench_resize.py. A Guaranteed one-container pod is resized back and forth",
        f"({d['rounds']} rounds, 2 resizes each); agent = the daemon's per-pod work item (`reconcile_pod`) with a",
        "long-lived CRI client: compute, read the pod's cgroup files from the kernel, diff, plan, write the pod",
        "cgroup, call UpdateContainerResources. Bare = the raw gRPC UpdateContainerResources with the same",
        "container values, on a twin pod. Median (min–max); ratio of medians.",
        "",
        "| change | agent | bare CRI | ratio | CRI calls / resize | agent's own time (agent − time in CRI) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    others = sorted({kind for kinds in d["scenarios"].values() for kind in kinds} - {THE_RECONCILER})
    for name, kinds in d["scenarios"].items():
        s = kinds.get(THE_RECONCILER)
        if s is None:
            continue
        a, b, own = s["agent_s"], s["bare_s"], s["own_s"]
        lines.append(
            f"| {name} | {_ms(a['median'])} ({_ms(a['min'])}–{_ms(a['max'])}) | {_ms(b['median'])} "
            f"({_ms(b['min'])}–{_ms(b['max'])}) | {s['ratio']:.2f} | {s['cri_calls_per_resize']:.0f} | "
            f"{_ms(own['median'])} |"
        )
    lines += _left_out(others, "containerd")
    cpu = d["scenarios"].get("cpu", {}).get(THE_RECONCILER)
    both = d["scenarios"].get("cpu+memory", {}).get(THE_RECONCILER)
    if cpu and both:
        lines += [
            "",
            "Target: through the agent <= 1.10 × the bare CRI call. Same change, one CRI call on each side (CPU):",
            f"{cpu['ratio']:.2f} — {_verdict(cpu['ratio'] <= 1.10)}.",
            f"CPU and memory together: {both['ratio']:.2f} — {_verdict(both['ratio'] <= 1.10)}, by design: the agent",
            "actuates as the kubelet does, memory phase first, then CPU, one UpdateContainerResources each (each",
            "carrying all values), so two runc forks where the bare call makes one; the kubelet itself always",
            "makes two. The rest (last column) is the reconciler's own work (figure 2), reading the pod's kernel",
            "files, the pod cgroup writes, and the changed pod's state record written and fsynced before the",
            "first write (its accepted allocation, as the kubelet checkpoints its own before it actuates).",
        ]
    prof = d.get("own_time_profile")
    if prof:
        per = prof["per_resize_s"]
        parts = ", ".join(f"{label} {_ms(t)}" for label, t in per.items())
        largest = max(per, key=per.get)
        lines += [
            "",
            f"Where the agent's own time goes (a second run of the CPU scenario under cProfile, {prof['resizes']} resizes;",
            f"the profiler slows the Python part, so these add to more than the last column): {parts}; per",
            f"resize {_ms(prof['own_s'])} outside gRPC against {_ms(prof['in_grpc_s'])} in it. The largest part: {largest}.",
            f"To reach 1.10 the agent's own time would have to fall under {_ms(0.1 * cpu['bare_s']['median'])} (a tenth of",
            "one `runc update`): about what the pass's compute, diff, plan and invariant replay take on their own,",
            "without any I/O (figure 2: 1.2 ms a resize event in memory, whatever the node's size).",
        ]
    lines.append("")
    return lines


def _daemon(d: dict[str, Any]) -> list[str]:
    lines = [
        "## 5. The daemon with 1,000 pods",
        "",
        _meta(d),
        f"{d['pods']} generated pods ({d.get('containers', '?')} containers) on a converged fake cgroup tree on disk",
        "(real file I/O, not the kernel's files); the fake CRI server (tests/fakes/fake_cri.py) in the bench",
        "process mirrors each update into the tree. The daemon runs in its own process, wired as",
        "`kube-cgroup-agent run` except that pod events are pushed to it as a watch would (`sink.upsert`), so",
        "latency is the daemon's own: from the event reaching it to the pod's pass having written everything",
        "(pod cgroup + UpdateContainerResources), and to the tiers pass finishing. RSS and CPU from psutil;",
        f"CPU over {d['idle_window_s']:.0f} s with no events, with the default resyncPeriod (60 s), so the",
        "window holds one resync of every pod; the per-second median shows the daemon between resyncs",
        "(the bench's own ready-polling in the daemon's process stops before the window).",
        "",
        "| node | first pass done | RSS | idle CPU, 60 s (% of one core) | per-second median | event → pod applied p50 / p99 | event → tiers applied p50 / p99 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, r in d["runs"].items():
        if r.get("ready_s") is None:
            prog = r.get("first_pass_progress") or {}
            done = prog.get("progress", 0)
            first = f"not after {prog.get('at', 0):.0f} s ({done} of {d['pods'] + 1} passes)"
            cpu = f"{r['cpu_percent']:.0f} % (busy with the first pass, {r['cpu_window_s']:.0f} s window)"
            lines.append(f"| {kind} | {first} | {r['rss_idle_mib']:.0f} MiB | {cpu} | — | not measured | not measured |")
            continue
        pod, tiers = r["event_to_pod_applied_s"], r["event_to_tiers_applied_s"]
        missed = f"; {r['events_missed']} of {d['events']} not reported within 30 s" if r.get("events_missed") else ""
        lines.append(
            f"| {kind} | {r['ready_s']:.1f} s | {r['rss_after_events_mib']:.0f} MiB | {r['cpu_percent']:.2f} % | "
            f"{r['cpu_percent_per_second']['median']:.2f} % | {_ms(pod['median'])} / {_ms(pod['p99'])} (n={pod['n']}{missed}) | "
            f"{_ms(tiers['median'])} / {_ms(tiers['p99'])} |"
        )
    for kind, label in (("bare", "bare node"), ("kubelet", "kubelet-owned node")):
        r = d["runs"].get(kind, {})
        if r.get("ready_s") is None:
            continue
        rss, cpu = r["rss_after_events_mib"], r["cpu_percent"]
        lines += [
            "",
            f"Targets, {label}: RSS < 72 MiB — {_verdict(rss < 72)} ({rss:.1f} MiB); idle CPU < 0.5 % of one core — "
            f"{_verdict(cpu < 0.5)} ({cpu:.2f} % over 60 s with one resync; "
            f"{r['cpu_percent_per_second']['median']:.2f} % between resyncs).",
        ]
    bare = d["runs"].get("bare", {})
    if bare.get("ready_s") is not None:
        pod = bare["event_to_pod_applied_s"]
        lines += [
            "",
            "Against the kubelet (kubelet-observed.md, 8 resizes of two-container pods on this machine kind): first",
            "cgroup write 13–94 ms, last write 66–160 ms, status 90–231 ms after the resize call, and the QoS tiers",
            "left 31–54 s stale until its 60 s pass. Here every write of the pod is done "
            f"{_ms(pod['median'])} (p99 {_ms(pod['p99'])}) after the event reaches the daemon on a bare node, and the",
            "tiers follow in the same event instead of up to a minute later (the API watch delivery, a few ms on",
            "a local API server, comes on top).",
            "",
            "Idle CPU is the resync: once per resyncPeriod the reconciler's node-wide pass reads every pod's and",
            "container's files on a bare node (`read_many`, about 13,000 files here) and diffs them; between",
            "resyncs the daemon is at 0. A converged resync reads no memory usage file (only where a memory value",
            "is about to change) and re-renders only the pods whose computation changed; on a kubelet-owned node",
            "it reads only the tiers and what the agent owns. A longer resyncPeriod divides the rest.",
            "",
            "RSS on a bare node is above the kubelet-owned node's by what makes the resync cheap: the reconciler",
            "keeps, per pod, its computation at its allocated values and its rendered files (about 13,000 file",
            "settings here), besides the pod views the daemon caches. Trading that back for CPU (rendering every",
            "pod each resync) is a one-line change in `ResizeEngine.snapshot`; the CPU target was chosen.",
            "",
            "Where the bare node's RSS goes (`/proc/PID/smaps` and tracemalloc in the daemon after the events, at",
            "commit 9603e4b): about 23 MiB of shared libraries (gRPC's cygrpc 9, libpython 5, libcrypto 3.4, libc",
            "and the C++ runtime 3.5); 53 MiB of heap, of which tracemalloc sees 31: 16 MiB of imported modules (code",
            "objects, classes: gRPC and protobuf, structlog, prometheus_client, the HTTP server; rich and pygments",
            "about 3 MiB, present in the development virtualenv only), 10 MiB of per-pod data kept for the",
            "incremental passes (13,066 rendered files 4.1, pod views 2.1, computations 2.4, resize state 0.5), 4.5",
            "MiB else; the untraced rest is the allocator's fragmentation from the first pass, gRPC's and OpenSSL's C",
            "allocations and the threads' arenas. Every record that exists thousands of times is already slotted.",
            "Without the development-only packages (as in the image) the same run is 71.8 MiB.",
        ]
    lines.append("")
    return lines


def _tiers(d: dict[str, Any]) -> list[str]:
    from bench.tiers import RECONCILERS

    lo, hi = d["kubelet_observed_stale_s"]
    current = {*RECONCILERS, THE_RECONCILER}  # results before the node kind named the one reconciler call it "engine"
    cells = [c for c in d["cells"].values() if c["reconciler"] in current]
    others = sorted({c["reconciler"] for c in d["cells"].values()} - current)
    if not cells:
        return ["## 6. From a resize to the QoS tiers being current (the daemon, 1,000 pods)", "", _meta(d),
                *_left_out(others, "tiers"), ""]
    settings = sorted({c["qos_reserved"] for c in cells}, key=lambda q: int(q.rstrip("%")))
    per_cell = d["runs"] * d["events_per_direction_per_run"]
    lines = [
        "## 6. From a resize to the QoS tiers being current (the daemon, 1,000 pods)",
        "",
        _meta(d),
        f"Figure 5's setup ({d['pods']:,} generated pods on a converged fake cgroup tree on disk, the fake CRI",
        "server mirroring container updates into it, the daemon in its own process with pod events pushed",
        "to it as a watch would), with `qosReserved: {memory: "
        + "}` and `{memory: ".join(settings)
        + "}`. One event = one Guaranteed",
        f"pod's memory limit up by {d['up_bytes'] >> 20}Mi (the Burstable and BestEffort tier limits shrink) or",
        "halved (they grow). Timed: from the pod update handed to the daemon (`sink.upsert`) until the",
        "Burstable AND BestEffort `memory.limit_in_bytes` both read back at their new values (page-rounded),",
        "read back in the daemon's process right after every write to either file and at the end of every",
        "pass. The expected values come from the bench (`compute_tiers` over every pod, not the daemon's",
        "running totals), and the bench reads the files again itself once the event's passes are done.",
        f"{d['runs']} run(s) × {d['events_per_direction_per_run']} events per direction, each run a fresh",
        "daemon process (bare node: the agent owns the pods too), no pod resized twice. Cells: p50 / p99 over",
        f"all events (n={per_cell} per row; nearest rank, so the p99 is the slowest event), min–max;",
        "spread = min–max of the per-run medians. \"Pod's own pass\" = the pass of the resized pod, the work",
        "item the event enqueued first; the event also enqueues a tiers pass.",
        "",
        "| who | qos-reserved | resize | tiers current p50 / p99 (min–max, n) | spread of run medians "
        "| pass that made both current | pod's pass done p50 | tiers pass still wrote | left the new values again / not current at the end |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| kubelet v1.36.2 (observed in kubelet-observed.md, **not measured here**) | 50% | in place, 8 resizes | "
        f"stale {lo:.0f} s–{hi:.0f} s | — | its periodic QoS pass (every 60 s), not the resize's | "
        "last pod write 66–160 ms after the resize call | — | — |",
    ]
    same_pass = True
    total = tiers_pass_wrote = 0
    slowest: tuple[float, str] | None = None
    medians: dict[str, list[float]] = {}
    pod_medians: dict[str, list[float]] = {}
    for cell in cells:
        for direction in ("up", "down"):
            c = cell[direction]
            total += c["n"]
            tiers_pass_wrote += c.get("tiers_pass_wrote", 0)
            t, r, pod = c["tiers_current_s"], c["run_medians_s"], c["pod_applied_s"]
            ok = (
                c["n"] > 0
                and c["by"].get("own pod pass", 0) == c["n"]
                and c["pass"].get("1", 0) == c["n"]
                and c["reverted"] == 0
                and c["not_current_at_end"] == 0
                and c["not_read_back_here"] == 0
                and c["timed_out"] == 0
            )
            same_pass = same_pass and ok
            if t is not None:
                medians.setdefault(direction, []).append(t["median"])
                if slowest is None or t["p99"] > slowest[0]:
                    slowest = (t["p99"], f"{cell['qos_reserved']}, memory {direction}")
            if pod is not None:
                pod_medians.setdefault(direction, []).append(pod["median"])
            current = (
                f"{_ms(t['median'])} / {_ms(t['p99'])} ({_ms(t['min'])}–{_ms(t['max'])}, n={t['n']})" if t else "never"
            )
            spread = f"{_ms(r['min'])}–{_ms(r['max'])}" if r else "—"
            by = ", ".join(
                f"{'pod' + chr(39) + 's own pass' if k == 'own pod pass' else k} {v}/{c['n']}"
                for k, v in sorted(c["by"].items(), key=lambda kv: -kv[1])
            )
            later = {k: v for k, v in c["pass"].items() if k != "1"}
            if later:
                by += " (" + ", ".join(f"pass {k} after the event: {v}" for k, v in sorted(later.items())) + ")"
            wrote = f"{c.get('tiers_pass_wrote', 0)}/{c['n']}"
            left = f"{c['reverted']} / {c['not_current_at_end'] + c['not_read_back_here'] + c['timed_out']}"
            lines.append(
                f"| the agent | {cell['qos_reserved']} | memory {direction} | {current} | {spread} | {by} | "
                f"{_ms(pod['median']) if pod else '—'} | {wrote} | {left} |"
            )
    lines += [
        "",
        f"Goal: both tiers current in the resize's own pass — {_verdict(same_pass)} ({total} events"
        + (f"; slowest {_ms(slowest[0])}: {slowest[1]}" if slowest else "")
        + f"); the kubelet leaves them stale {lo:.0f}–{hi:.0f} s.",
        *_left_out(others, "tiers"),
    ]
    for err in d.get("errors", []):
        lines.append(f"- ERROR: {err}")
    if medians.get("up") and medians.get("down") and pod_medians.get("up"):
        up, down, pup = medians["up"], medians["down"], pod_medians["up"]

        def span(xs: list[float]) -> str:
            return f"{_ms(min(xs))}–{_ms(max(xs))}"

        lines += [
            "",
            "What the number is: the tier values are in the resized pod's own plan, so both files hold their",
            f"new values {span(up)} (row medians) after a memory increase and {span(down)} after a decrease;",
            f"the kubelet leaves them stale {lo:.0f}–{hi:.0f} s, until its 60 s QoS pass (the slowest event here, "
            f"{_ms(slowest[0]) if slowest else '?'}, is",
            f"{lo / (slowest[0] if slowest else 1):,.0f}× sooner than the kubelet's best). The two directions show "
            "the plan's order: a growing",
            "request shrinks the tiers *first*, before any pod or container memory value grows, so they are",
            f"current before the pod's pass ends (at {span(pup)}); a shrinking request grows them *last*, after the",
            "container's UpdateContainerResources and the pod cgroup — in between they still reserve for the",
            "larger request, the safe side. The milliseconds are figure 5's pod latency (queue hand-off, compute",
            "and reads, admission, the pod's state record fsynced before the first write, the fake CRI call,",
            "the read-back). "
            + (
                "The tiers pass the event also enqueues found nothing left to write."
                if tiers_pass_wrote == 0
                else f"The tiers pass the event also enqueues still wrote in {tiers_pass_wrote} of {total} events."
            )
            + " Not included: the API watch",
            "delivery (a few ms) and the kernel's reclaim when a tier shrinks below its usage (fake usage 1 MiB).",
        ]
    load = d.get("loadavg_before"), d.get("loadavg_after")
    if load[0] and load[1]:
        lines += [
            "",
            f"Load average (1 min) while measured: {load[0][0]:.1f} before, {load[1][0]:.1f} after, on {os.cpu_count()} CPUs"
            + (
                ": the machine was shared with other jobs, so these times are upper bounds (the pass"
                " that made the tiers current is not a timing)."
                if max(load[0][0], load[1][0]) > (os.cpu_count() or 1) / 2
                else "."
            ),
        ]
    lines.append("")
    return lines


def _recommender(data: dict[str, Any]) -> list[str]:
    from bench import recommender

    return recommender.markdown(data)


def _production_nodes(d: dict[str, Any]) -> list[str]:
    """The two-node cluster: start time, the oracle's counts, the five minutes beside the kubelet."""
    lines: list[str] = []
    oracle = d.get("oracle") or {}
    if oracle:
        lines += ["", "Oracle (`tests/e2e_k8s/test_production_nodes.py`): every value the kubelet, the runtime and systemd hold,",
                  "against `kube-cgroup-agent diff --all` run in the agent's pod on that node:", "",
                  "| node | values compared | pods | resizes | disagreements | systemd properties compared | disagreements |",
                  "|---|---|---|---|---|---|---|"]
        for node, o in sorted(oracle.items()):
            props = o.get("unit_properties")
            lines.append(f"| {node} | {o['compared']} | {o['pods']} | {o['resizes']} | {o['disagreements']} | "
                         f"{'—' if props is None else props} | {'—' if props is None else o['unit_property_disagreements']} |")
    beside = d.get("beside") or {}
    if beside:
        lines += ["", "Beside the kubelet (`tests/e2e_k8s/test_beside_both_nodes.py`): arrivals, resizes up and down and",
                  "departures on both nodes through the kubelet's 60 s QoS passes, and on the systemd node daemon-reloads",
                  "and a containerd restart. The tier's move is timed from the API call (pod created, `pods/resize`",
                  "patched, pod deleted) to the Burstable tier's CPU file reading a new value on the node (read over",
                  "`cluster.sh exec`, which adds its own round trip: about 0.1 s on the host, more through the guest's",
                  "channel). Without the agent that value moves at the kubelet's next QoS pass: up to 60 s, 30 s on",
                  "average (31–54 s observed after a resize, kubelet-observed.md).", "",
                  "| node | events | tier moved, median / max | fights | kubelet-owned writes | reverted after daemon-reload | agent RSS | agent CPU |",
                  "|---|---|---|---|---|---|---|---|"]
        for node, b in sorted(beside.items()):
            t = sorted(b["tier_move_s"]) or [0.0]
            lines.append(f"| {node} | {b['events']} ({b['daemon_reloads']} reloads, {b['containerd_restarts']} containerd restarts) | "
                         f"{statistics.median(t):.2f} s / {t[-1]:.2f} s | {b['fights']:.0f} | {b['kubelet_owned_writes']} | "
                         f"{b['reverted_after_daemon_reload']} | {b['agent_rss_mib']:.0f} MiB | {b['agent_cpu_pct']:.2f} % of a core |")
        worst = max(b["agent_rss_mib"] for b in beside.values())
        lines += ["", f"Goal: the DaemonSet pod under 80 MiB on a near-empty node — {_verdict(worst < 80)} ({worst:.0f} MiB at",
                  "most). What the image's process holds before any pod (the same imports measured on this host without",
                  "the development packages): Python and psutil 13.4 MiB, the agent's modules that `run` loads +32.9 (gRPC",
                  "and protobuf, structlog, prometheus_client), the `kubernetes` package +17.5, the typed `CoreV1Api`",
                  "with the models it imports +21.5, the apps, custom-objects and event APIs +4.9: 90 MiB; the rest is",
                  "the watch caches, the allocator's arenas of about twenty threads and the first pass's fragmentation.",
                  "Calling the API without the typed classes, through the same ApiClient, is what is left to save."]
    qos = d.get("v2_resize_vs_qos_pass") or []
    if qos:
        lines += ["", "On the v2 node, against the kubelet's own next QoS pass: a `pods/resize` of a Burstable pod timed on the",
                  "guest's clock to the agent's write of `kubepods-burstable.slice/cpu.weight` (an upper bound: one",
                  "exec round trip into the TCG guest included), and to the kubelet's next QoS pass, read from its",
                  "journal (`--vmodule qos_container_manager_linux=4`: one line per pass). A resize triggers no pass",
                  "of the kubelet's; its periodic one runs every 60 s.", "",
                  "| resize to | the agent's tier write | the kubelet's next QoS pass |", "|---|---|---|"]
        lines += [f"| {r['cpu_milli']}m | {r['agent_s']:.2f} s | {r['kubelet_next_pass_s']:.1f} s |" for r in qos]
    return lines


def _e2e_k8s(d: dict[str, Any]) -> list[str]:
    ms = sorted(d["resize_to_tier_ms"])
    return [
        "## 8. Beside a real kubelet (`make e2e-k8s`)",
        "",
        f"Measured {d['date']}; command: `make e2e-k8s` (tests/e2e_k8s, outside CI). Kubelet {d['kubelet']} with",
        "containerd 1.6 on two nodes: this host (cgroup v1, cgroupfs driver) and a qemu guest (cgroup v2, systemd",
        f"driver, TCG: no KVM here); `cluster.sh up` took {d['cluster_up_s']:.0f} s from built binaries and a cached guest image.",
        "The agent runs as its DaemonSet (deploy/overlays/realk8s), from its image, with only deploy/'s RBAC.",
        *_production_nodes(d),
        "",
        "On the cgroup v1 node, timed: from the start of `kubectl patch --subresource resize` (a Burstable pod's CPU request) to the",
        "Burstable tier's `cpu.shares` reading the new value, written by the agent once the kubelet reported",
        f"its allocation. {len(ms)} resizes: median {statistics.median(ms):.0f} ms (min {ms[0]:.0f}, max {ms[-1]:.0f}).",
        "The kubelet itself brings the tier there at its next QoS pass, every 60 s (kubelet-observed.md: 31–54 s",
        "stale). Drift counters stay 0: the agent never wrote a value the kubelet owns.",
        *(
            [
                "",
                "VPA in place: from the start of `kubectl patch vpa --subresource status` (a recommendation the",
                f"updater would act on) to the container's `cpu.cfs_quota_us` written by the kubelet: {d['vpa_to_cgroup_ms']:.0f} ms",
                "(the agent's decision, its pods/resize patch, the kubelet's actuation). The kubelet's own resize",
                "latency for a `kubectl patch --subresource resize` on this machine kind: 66–160 ms to the write",
                "(kubelet-observed.md); the VPA updater acts once a minute.",
            ]
            if "vpa_to_cgroup_ms" in d
            else []
        ),
        *(
            [
                "",
                "Graceful in-place update: a StatefulSet of two, a sidecar's image changed — both pods updated in place by",
                f"the agent in {d['sts_in_place_s']:.1f} s (web-1 then web-0, 1 s grace each, the app containers untouched, the",
                "pod UIDs kept); the sidecar was down (its old container's end to its new one's start, as the kubelet",
                "reports them, 1 s resolution) " + ", ".join(f"{x:.0f} s" for x in d.get("sts_sidecar_down_s", [])) + ". An env change",
                f"then recreated both in {d['sts_recreate_s']:.1f} s (every container restarted, new pod UIDs).",
                *(
                    [
                        "Requests the API server served (apiserver_request_total, watches excluded, 5 s of quiet before and",
                        f"after each): in place {d['sts_in_place_api_requests']:.0f}, recreated {d['sts_recreate_api_requests']:.0f} — everyone's,",
                        "the agent's, the controllers', the scheduler's and the kubelet's; the cluster's own background included.",
                    ]
                    if "sts_in_place_api_requests" in d
                    else []
                ),
            ]
            if "sts_in_place_s" in d
            else []
        ),
        "",
    ]


def _vpa(d: dict[str, Any]) -> list[str]:
    from bench import vpa

    return vpa.markdown(d, _ms, _meta(d))


def _rollout(d: dict[str, Any], results: Path) -> list[str]:
    from bench import rollout

    return rollout.markdown(d, _meta(d), _load(results, "prepull"))


def _spread(d: dict[str, float]) -> str:
    def ms(x: float) -> str:
        return f"{x * 1000:.0f} ms"

    return f"{ms(d['median_s'])} ({ms(d['min_s'])}–{ms(d['max_s'])}, n={d['repeat']})"


def _diff_process(data: dict[str, Any]) -> list[str]:
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
            "Where the 1,000-pod run goes (in-process CPU, best of 11, at commit cbdced2): reading the node's files",
            "133 ms — about 100 ms of it in 20,133 `open`, 26,158 `read` and 20,132 `close` calls (some 2.5 µs each",
            "on this VM; every path component is opened with O_NOFOLLOW, each file read to its end), which is the",
            "floor for 13,000 files here; loading and parsing the pods 46 ms; rendering the desired files 45;",
            "computing 38; the diff 23; then imports about 45 ms and the interpreter's own start 24 ms. About 35 ms",
            "of the pure phases is making 39,000 small frozen records (the files, desired and diffed). Each phase is",
            "O(pods); the bytecode is precompiled by `make` (an editable install with PYTHONDONTWRITEBYTECODE would",
            "compile every module on each run) and the cyclic collector is off for a one-shot command line.",
        ]
    lines.append("")
    return lines


def _resize_latency(d: dict[str, Any]) -> list[str]:
    agent, kubelet = d["agent"]["resize_to_cgroup"], d["kubelet"]["resize_to_cgroup"]

    def cell(s: dict[str, float]) -> str:
        return f"{s['median_ms']:.1f} ms / {s['p99_ms']:.1f} ms ({s['min_ms']:.1f}–{s['max_ms']:.1f}, n={s['n']})"

    ok = agent["median_ms"] <= kubelet["median_ms"] and agent["p99_ms"] <= kubelet["p99_ms"]
    return [
        "## 11. A `pods/resize` call to the container's cgroup: the agent on a bare node against the kubelet",
        "",
        f"Measured {d.get('date', '?')} on `{d.get('machine', '?')}`; command: `make e2e-k8s`"
        " (tests/e2e/test_resize_latency_vs_kubelet.py, run by tests/e2e_k8s/run.sh while the cluster is up).",
        f"The same `pods/resize` calls (a Guaranteed pod's CPU {' -> '.join(d.get('cpus', ['?', '?']))} and back, "
        f"{d['rounds']} rounds, interleaved) on two pods: one on `realk8s-node`, resized by the real v1.36 kubelet;",
        "one on a node with no kubelet that resizes (a Node object at v1.32; its container in `make e2e`'s private",
        "containerd under the pod's API UID), resized by `kube-cgroup-agent run` (a host process, timed once it",
        "reports ready: a resize sent before, during its start-up work, took 103 ms in one run). Timed from just",
        "before the PATCH to the first read of the container's `cpu.cfs_quota_us` at its new value (polled every",
        "0.2 ms). The floor: one API write (the PATCH round trip below), one watch event, one runc update.",
        "",
        "| who | resize -> container cgroup, median / p99 (min–max, n) | the PATCH's own round trip, median |",
        "| --- | --- | --- |",
        f"| kubelet v1.36 | {cell(kubelet)} | {d['kubelet']['patch']['median_ms']:.1f} ms |",
        f"| the agent (bare node) | {cell(agent)} | {d['agent']['patch']['median_ms']:.1f} ms |",
        "",
        f"Goal: median and p99 at or below the kubelet's, same calls, same run — {_verdict(ok)}.",
        *(
            [
                "",
                "Where the agent's time goes: its own pass for the resize (compute, the pod's state record written",
                "and fsynced, the pod cgroup, UpdateContainerResources — one `runc update` —, the read-back), from its",
                f"log: {d['agent']['pass']['median_ms']:.1f} ms median (max {d['agent']['pass']['max_ms']:.1f} ms);"
                f" the PATCH's round trip {d['agent']['patch']['median_ms']:.1f} ms. Part of the pass follows the"
                " container's write (the read-back; on a decrease, the pod cgroup), so the two overlap the total; the",
                "runc update is the largest part of both sides' time.",
            ]
            if "pass" in d["agent"]
            else []
        ),
        "",
    ]


Render = Callable[[dict[str, Any]], list[str]]


def sections(results: Path) -> list[tuple[str, Render]]:
    """Each results file's section, in the document's order (the figure numbers)."""
    return [
        ("diff_process", _diff_process),
        ("incremental", _incremental),
        ("writes", _writes),
        ("containerd", _containerd),
        ("daemon", _daemon),
        ("tiers", _tiers),
        ("recommender", _recommender),
        ("e2e_k8s", _e2e_k8s),
        ("vpa", _vpa),
        ("rollout", lambda d: _rollout(d, results)),
        ("resize_latency", _resize_latency),
    ]
