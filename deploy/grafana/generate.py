#!/usr/bin/env python3
"""Write deploy/grafana/kube-cgroup-agent.json, the Grafana dashboard (schema 39, a Prometheus datasource
variable), from the panel list below: one place for the questions an operator asks and the PromQL that
answers each. `python3 deploy/grafana/generate.py` (a test checks the JSON is current and that every
metric it names is exported by the agent)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "kube-cgroup-agent.json"
SEL = 'instance=~"$instance"'

# (title, question it answers, panel type, [(PromQL, legend)], unit)
PANELS: list[tuple[str, str, str, list[tuple[str, str]], str]] = [
    ("Agents ready", "Is the agent running and ready on every node?", "stat",
     [(f"sum(kube_cgroup_agent_ready{{{SEL}}})", "ready"), (f"count(kube_cgroup_agent_ready{{{SEL}}})", "agents")], "none"),
    ("Resizes by state", "How many pods are in each resize state (Deferred, Infeasible, Error...)?", "timeseries",
     [(f"sum by (state) (kube_cgroup_agent_resize_state_pods{{{SEL}}})", "{{state}}")], "none"),
    ("Reconcile latency", "How long does a reconcile pass take (one pod, or the tiers)?", "heatmap",
     [(f"sum by (le) (rate(kube_cgroup_agent_reconcile_duration_seconds_bucket{{{SEL}}}[$__rate_interval]))", "{{le}}")], "s"),
    ("Reconcile p99 by scope", "Is any kind of pass getting slow?", "timeseries",
     [(f"histogram_quantile(0.99, sum by (le, scope) (rate(kube_cgroup_agent_reconcile_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))", "{{scope}}")], "s"),
    ("Writes", "How many cgroup writes and CRI updates does the agent make?", "timeseries",
     [(f"sum by (kind) (rate(kube_cgroup_agent_writes_total{{{SEL}}}[$__rate_interval]))", "{{kind}}")], "ops"),
    ("Drift", "Is someone else changing values the agent owns, and what did it do?", "timeseries",
     [(f"sum by (thing, action) (rate(kube_cgroup_agent_drift_total{{{SEL}}}[$__rate_interval]))", "{{thing}} {{action}}")], "ops"),
    ("Drift yielded", "Which values has the agent stopped fighting over?", "stat",
     [(f"sum(kube_cgroup_agent_drift_yielded_values{{{SEL}}})", "yielded")], "none"),
    ("Tier memory shortfall", "Is a QoS tier above its qos-reserved limit because the kernel would not lower it?", "timeseries",
     [(f"kube_cgroup_agent_tier_memory_shortfall_bytes{{{SEL}}} > 0", "{{instance}} {{cgroup}}")], "bytes"),
    ("Watch restarts", "Is the pod watch stable (410 relists, errors, closed streams)?", "timeseries",
     [(f"sum by (reason) (increase(kube_cgroup_agent_watch_restarts_total{{{SEL}}}[$__rate_interval]))", "{{reason}}")], "none"),
    ("Errors by class", "What fails, and how often?", "timeseries",
     [(f"sum by (error_class) (rate(kube_cgroup_agent_errors_total{{{SEL}}}[$__rate_interval]))", "{{error_class}}")], "ops"),
    ("Reports", "Are Events and pod conditions reaching the API?", "timeseries",
     [(f"sum by (kind, outcome) (rate(kube_cgroup_agent_status_reports_total{{{SEL}}}[$__rate_interval]))", "{{kind}} {{outcome}}")], "ops"),
    ("Pods known", "How many pods does each agent keep?", "timeseries",
     [(f"kube_cgroup_agent_pods{{{SEL}}}", "{{instance}}")], "none"),
    ("Versions", "Which build runs where?", "table",
     [(f"kube_cgroup_agent_build_info{{{SEL}}}", "{{version}} {{commit}}")], "none"),
]


def panel(i: int, title: str, question: str, kind: str, targets: list[tuple[str, str]], unit: str) -> dict[str, Any]:
    width = 24 if kind == "heatmap" else 12
    return {
        "id": i + 1,
        "title": title,
        "description": question,
        "type": kind,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": (i % 2) * 12 if width == 12 else 0, "y": (i // 2) * 8, "w": width, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"calculate": False} if kind == "heatmap" else {},
        "targets": [
            {"refId": chr(ord("A") + n), "expr": expr, "legendFormat": legend,
             "format": "heatmap" if kind == "heatmap" else ("table" if kind == "table" else "time_series")}
            for n, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard() -> dict[str, Any]:
    return {
        "title": "kube-cgroup-agent",
        "uid": "kube-cgroup-agent",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "tags": ["kubernetes", "cgroups", "kube-cgroup-agent"],
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
                {"name": "instance", "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
                 "query": "label_values(kube_cgroup_agent_pods, instance)", "includeAll": True, "multi": True,
                 "current": {"text": "All", "value": "$__all"}, "refresh": 2},
            ]
        },
        "panels": [panel(i, *p) for i, p in enumerate(PANELS)],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if OUT.read_text() == render() else 1)
    OUT.write_text(render())
