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

from tests.fakes.kernel import skip_reason

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
        out["soak"] = soak.to_json()
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
        bad += [f"soak: {p}" for p in soak.get("problems", [])]
    return bad


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
        lines += ["", "| soak | figure |", "|---|---:|"]
        lines += [f"| {k} | {v} |" for k, v in soak.items() if k != "problems" and not isinstance(v, dict | list)]
        for k, v in soak.items():
            if isinstance(v, dict):
                lines += [f"| {k}.{kk} | {vv} |" for kk, vv in v.items()]
    return "\n".join(lines)


def header(form_name: str, result: dict[str, Any]) -> str:
    os_release = Path("/etc/os-release")
    fields = dict(line.split("=", 1) for line in os_release.read_text().splitlines() if "=" in line) if os_release.exists() else {}
    host = fields.get("PRETTY_NAME", "Linux").strip('"')
    return (
        f"Measured {time.strftime('%Y-%m-%d', time.gmtime())} on {host} (kernel {platform.release()}, "
        f"{os.cpu_count()} cores, hybrid cgroup v1 host) with `make reliability` "
        f"({form_name} form; seconds per campaign: {json.dumps(result['seconds'])})."
    )


def write(result: dict[str, Any], form_name: str) -> dict[str, Any]:
    """The campaigns run now replace theirs in the saved results (`--only` runs keep the others)."""
    saved: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if saved.get("form") != form_name:
        saved = {}
    result = {**saved, **result, "seconds": {**saved.get("seconds", {}), **result["seconds"]}, "form": form_name}
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
    from agent.logging import configure

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
