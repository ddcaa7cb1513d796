"""`make reliability`: every campaign, one table. `python -m tests.reliability [--short] [--write]`.

The full form is the figures of RELIABILITY.md; `--short` (CI) runs the same code paths with fewer
iterations. Exit 1 when a figure that must be 0 is not. `--write` rewrites RELIABILITY.md's table and
bench/results/reliability.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.kernel import skip_reason

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "RELIABILITY.md"
RESULTS = ROOT / "bench" / "results" / "reliability.json"
BEGIN, END = "<!-- reliability:begin -->", "<!-- reliability:end -->"


@dataclass(frozen=True)
class Form:
    crash_kills: int
    engine_rounds: int
    soak_pods: int
    soak_events: int
    soak_seconds: float


FULL = Form(crash_kills=100, engine_rounds=3, soak_pods=1000, soak_events=10_000, soak_seconds=600.0)
SHORT = Form(crash_kills=10, engine_rounds=1, soak_pods=100, soak_events=500, soak_seconds=45.0)
ZERO = ("violations", "lost", "spoiled", "crashes")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _timed(name: str, run: Callable[[], Any]) -> tuple[Any, float]:
    _say(f"== {name}")
    start = time.monotonic()
    out = run()
    took = time.monotonic() - start
    _say(f"   {name}: {took:.0f} s")
    return out, took


def run(form: Form, only: set[str] | None, workdir: Path) -> dict[str, Any]:
    from tests.reliability import api_faults, crash_campaign, engine_faults

    out: dict[str, Any] = {"seconds": {}}
    if only is None or "engine" in only:
        rows, took = _timed("engine faults", lambda: engine_faults.run_all(workdir / "engine", form.engine_rounds))
        out["engine"] = [r.to_json() for r in rows]
        out["seconds"]["engine"] = round(took)
    if only is None or "api" in only:
        rows, took = _timed("API faults", lambda: api_faults.run_all(workdir / "api"))
        out["api"] = [r.to_json() for r in rows]
        out["seconds"]["api"] = round(took)
    if only is None or "crash" in only:
        figures, took = _timed("SIGKILL", lambda: crash_campaign.run(workdir / "crash", form.crash_kills))
        out["crash"] = figures.to_json()
        out["seconds"]["crash"] = round(took)
    if only is None or "hostile" in only:
        from tests.reliability import hostile

        outcomes, took = _timed("hostile input", lambda: hostile.run_all(workdir / "hostile", short=form.crash_kills < 100))
        out["hostile"] = [o.to_json() for o in outcomes]
        out["seconds"]["hostile"] = round(took)
    if only is None or "soak" in only:
        from tests.reliability.soak import run_soak

        soak, took = _timed(
            "soak",
            lambda: run_soak(workdir / "soak", pods=form.soak_pods, events=form.soak_events, duration_s=form.soak_seconds),
        )
        figures = soak.to_json()
        figures.pop("samples", None)  # every few seconds of the run: in the work directory's journal, not here
        out["soak"] = figures
        out["seconds"]["soak"] = round(took)
    return out


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [*result.get("engine", []), *result.get("api", [])]


def failures(result: dict[str, Any]) -> list[str]:
    """Every must-be-0 figure that is not."""
    bad = [
        f"{r['path']} / {r['fault']}: {k} = {r[k]} ({'; '.join(r['notes'][:2])})"
        for r in rows(result)
        for k in ZERO
        if r.get(k)
    ]
    crash = result.get("crash")
    if crash:
        bad += [f"SIGKILL: {k} = {crash[k]}" for k in ("violations", "lost", "not_completed", "corrupt_records") if crash[k]]
    bad += [
        f"hostile input {h['name']}: exit {h['exit']}, {h['tracebacks']} tracebacks ({h['last_line']})"
        for h in result.get("hostile", [])
        if h["exit"] not in (0, 1, 2) or h["tracebacks"]
    ]
    soak = result.get("soak")
    if soak:
        bad += [f"soak: {p}" for p in soak_problems(soak)]
    return bad


RSS_GROWTH_PCT = 10.0
FD_SLACK = 8  # connections in flight (API watches, CRI, probes) come and go between two samples
THREAD_SLACK = 2
LATENCY_RATIO = 3.0  # the last tenth's p99 against the first's (and at least 250 ms worse)


def soak_problems(s: dict[str, Any]) -> list[str]:
    """The soak's must-hold figures: nothing lost, no breach, no crash, no leak, latency not drifting."""
    out = [f"{k} = {s[k]}" for k in ("resizes_lost", "violations", "crashes", "raw_lines", "healthz_failures") if s.get(k)]
    if s.get("healthz_end") != 200:
        out.append(f"/healthz answered {s.get('healthz_end')} at the end")
    if s["rss_growth_pct"] >= RSS_GROWTH_PCT:
        out.append(f"RSS grew {s['rss_growth_pct']} % (first {s['rss_first_mib']} MiB, last {s['rss_last_mib']} MiB)")
    if s["fds_last"] > s["fds_first"] + FD_SLACK:
        out.append(f"descriptors {s['fds_first']} -> {s['fds_last']}")
    if s["threads_last"] > s["threads_first"] + THREAD_SLACK:
        out.append(f"threads {s['threads_first']} -> {s['threads_last']}")
    if s["children_last"] > s["children_first"]:
        out.append(f"child processes {s['children_first']} -> {s['children_last']}")
    # the daemon's own pass time always; the spec-to-files time only over windows holding whole cycles of
    # the fault schedule (a watch fault holds events back by its retry delay: a 4 s window that has one
    # is not comparable with one that has none)
    from tests.reliability.soak_faults import FAULTS

    two_rounds = 2 * 2.0 * len(FAULTS)  # run_soak's default: one fault kind every 2 s, in turn
    windows = ["reconcile_pod", *(["apply_latency"] if s.get("window_s", 0) >= two_rounds else [])]
    for name in windows:
        first, last = s[name]["first"].get("p99_ms"), s[name]["last"].get("p99_ms")
        if first and last and last > LATENCY_RATIO * first and last - first > 250:
            out.append(f"{name} p99 drifted {first} -> {last} ms")
    return out


def _soak_rows(s: dict[str, Any]) -> list[str]:
    def pct(w: dict[str, Any]) -> str:
        return " / ".join(str(w.get(k)) for k in ("p50_ms", "p95_ms", "p99_ms"))

    rows = [
        ("pods, events sent, over seconds", f"{s['pods']}, {s['events_sent']}, {s['duration_s']:.0f}"),
        ("faults injected (armed, never hit)", f"{s['faults_injected']} ({s['faults_unconsumed']})"),
        ("resizes checked / lost at the end", f"{s['resizes_checked']} / {s['resizes_lost']}"),
        ("invariant violations, crashes, non-JSON log lines", f"{s['violations']}, {s['crashes']}, {s['raw_lines']}"),
        ("RSS first / last / max MiB (growth %)", f"{s['rss_first_mib']} / {s['rss_last_mib']} / {s['rss_max_mib']} ({s['rss_growth_pct']})"),
        ("descriptors first / last", f"{s['fds_first']} / {s['fds_last']}"),
        ("threads first / last", f"{s['threads_first']} / {s['threads_last']}"),
        ("child processes first / last", f"{s['children_first']} / {s['children_last']}"),
        ("daemon CPU, % of a core", str(s["cpu_percent"])),
        ("spec change -> files, ms p50/p95/p99, first tenth", pct(s["apply_latency"]["first"])),
        ("spec change -> files, ms p50/p95/p99, last tenth", pct(s["apply_latency"]["last"])),
        ("pod pass, ms p50/p95/p99, first tenth", pct(s["reconcile_pod"]["first"])),
        ("pod pass, ms p50/p95/p99, last tenth", pct(s["reconcile_pod"]["last"])),
        ("startup to every pod at its spec / faults off to converged, s", f"{s['startup_s']} / {s['converge_s']}"),
    ]
    return [f"| {k} | {v} |" for k, v in rows]


def table(result: dict[str, Any]) -> str:
    lines = [
        "| path | fault | injected | invariant violations | resizes lost | pods spoiled by another's fault | crashes |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows(result):
        spoiled = "n/a (node-wide)" if r["spoiled"] is None else str(r["spoiled"])
        lines.append(f"| {r['path']} | {r['fault']} | {r['injected']} | {r['violations']} | {r['lost']} | {spoiled} | {r['crashes']} |")
    crash = result.get("crash")
    if crash:
        lines += [
            "",
            "| SIGKILL campaign (real cgroup v1 files, fake CRI) | figure |",
            "|---|---:|",
            f"| rounds (3-container pod, up to 3 resizes each) | {crash['rounds']} |",
            f"| SIGKILLs landed at a random step | {crash['kills']} |",
            f"| invariant violations (every step, real files) | {crash['violations']} |",
            f"| resizes lost (kernel not at the latest spec at the end) | {crash['lost']} |",
            f"| interrupted resizes not completed after restart | {crash['not_completed']} |",
            f"| corrupt records read | {crash['corrupt_records']} |",
        ]
    hostile = result.get("hostile")
    if hostile:
        lines += [
            "",
            f"| hostile input to `diff` (address space limited to {2} GiB) | size MB | exit | seconds | peak RSS MB | tracebacks |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        lines += [f"| {h['name']} | {h['megabytes']} | {h['exit']} | {h['seconds']} | {h['max_rss_mb']} | {h['tracebacks']} |" for h in hostile]
    soak = result.get("soak")
    if soak:
        lines += ["", "| soak (the daemon, fake API server and CRI, faults on) | figure |", "|---|---:|", *_soak_rows(soak)]
    return "\n".join(lines)


def header(form_name: str, result: dict[str, Any]) -> str:
    os_release = Path("/etc/os-release")
    fields = dict(line.split("=", 1) for line in os_release.read_text().splitlines() if "=" in line) if os_release.exists() else {}
    host = fields.get("PRETTY_NAME", "Linux").strip('"')
    kernels: dict[str, list[str]] = {}
    for campaign in result["seconds"]:
        kernels.setdefault(result.get("kernels", {}).get(campaign, platform.release()), []).append(campaign)
    kernel = (
        next(iter(kernels)) if len(kernels) == 1
        else ", ".join(f"{k} ({', '.join(names)})" for k, names in sorted(kernels.items()))
    )  # campaigns --only runs merged in may come from another VM of the same kind
    return (
        f"Measured {time.strftime('%Y-%m-%d', time.gmtime())} on {host} (kernel {kernel}, "
        f"{os.cpu_count()} cores, hybrid cgroup v1 host) with `make reliability` "
        f"({form_name} form; seconds per campaign: {json.dumps(result['seconds'])})."
    )


def write(result: dict[str, Any], form_name: str) -> dict[str, Any]:
    """The campaigns run now replace theirs in the saved results (`--only` runs keep the others)."""
    saved: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if saved.get("form") != form_name:
        saved = {}
    kernels = {**saved.get("kernels", {}), **{campaign: platform.release() for campaign in result["seconds"]}}
    result = {**saved, **result, "seconds": {**saved.get("seconds", {}), **result["seconds"]}, "kernels": kernels, "form": form_name}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    text = DOC.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + "\n" + header(form_name, result) + "\n\n" + table(result) + "\n" + text[end:])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.reliability", description=__doc__)
    ap.add_argument("--short", action="store_true", help="CI: fewer iterations, the same code paths")
    ap.add_argument("--only", action="append", choices=("engine", "api", "crash", "hostile", "soak"))
    ap.add_argument("--write", action="store_true", help="rewrite RELIABILITY.md's table and the JSON results")
    args = ap.parse_args(argv)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # as the agent's own entry point: a fake CRI's GOAWAY at teardown
    from agent.infra.logging import configure

    configure(level="error")  # the in-process reconcilers' lines would drown the table; faults are expected
    reason = skip_reason()
    if reason is not None:
        print(f"make reliability: cannot run here: {reason}", file=sys.stderr)
        return 2
    form_name = "short" if args.short else "full"
    with tempfile.TemporaryDirectory(prefix="kcg-reliability-") as tmp:
        result = run(SHORT if args.short else FULL, set(args.only) if args.only else None, Path(tmp))
    print(header(form_name, result))
    print()
    print(table(result))
    bad = failures(result)  # of this run's campaigns
    if args.write:
        write(result, form_name)
    for b in bad:
        print(f"FAILED {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
