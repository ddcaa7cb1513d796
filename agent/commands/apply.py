"""`kube-cgroup-agent apply`: reconcile once (`agent.pipeline.apply`), print what was done, exit."""

from __future__ import annotations

import json

from agent.config.settings import Settings
from agent.pipeline.apply import ApplyReport, reconcile_once
from agent.pipeline.execute import describe

EXIT_OK = 0
EXIT_ERROR = 2


def render_table(report: ApplyReport) -> str:
    lines = []
    for o in report.execution.outcomes:
        lines.append(
            ("done    " if o.ok else "FAILED  ") + describe(o.step) + (f": {o.error}" if o.error else "")
        )
    if report.execution.skipped:
        lines.append(f"skipped {report.execution.skipped} later step(s) after the failure")
    for key in report.waiting:
        lines.append(f"waiting {key}: its pod cgroup does not exist yet")
    for w in report.warnings:
        lines.append(f"warning: {w.pod + ': ' if w.pod else ''}{w.message}")
    for e in report.errors:
        lines.append(f"error: {e.pod + ': ' if e.pod else ''}{e.message}")
    lines.append(f"{report.execution.writes} write(s)")
    return "\n".join(lines)


def apply_once(settings: Settings, output: str) -> int:
    report = reconcile_once(settings)
    print(json.dumps(report.to_json(), indent=2) if output == "json" else render_table(report))
    return EXIT_OK if report.ok else EXIT_ERROR
