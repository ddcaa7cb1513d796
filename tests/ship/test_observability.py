"""The dashboard and the alert rules name only metrics the agent exports (parsed without promtool), the
rules are well formed, the dashboard JSON is what its generator writes, and the ready gauge follows /readyz."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from agent.infra.metrics import KeeperMetrics, Metrics

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "kube-cgroup-agent.json"
NAME = re.compile(r"\b(kube_cgroup_agent_[a-z0-9_]+)")
SUFFIXES = ("_bucket", "_sum", "_count", "_created")


def _exported() -> set[str]:
    names: set[str] = set()
    for metric in (*Metrics().registry.collect(), *KeeperMetrics().registry.collect()):
        names.add(metric.name)
        if metric.type == "counter":  # exposed as NAME_total (a labelled counter has no sample until used)
            names.add(metric.name + "_total")
        names.update(s.name for s in metric.samples)
    return names


def _named(exprs: list[str]) -> set[str]:
    return {m for e in exprs for m in NAME.findall(e)}


def _rule_exprs() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def _dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return exprs


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_metric_named_is_exported(source: str) -> None:
    exprs = _rule_exprs() if source == "rules" else _dashboard_exprs()
    named = _named(exprs)
    assert named, "nothing named: the check would pass vacuously"
    exported = _exported()
    missing = sorted(n for n in named if n not in exported and not any(n.removesuffix(s) in exported for s in SUFFIXES))
    assert not missing, f"{source} name metrics the agent does not export: {missing}"


def test_the_check_catches_an_unknown_metric() -> None:
    exported = _exported()
    assert "kube_cgroup_agent_no_such_thing" not in exported
    assert _named(["rate(kube_cgroup_agent_no_such_thing[5m])"]) == {"kube_cgroup_agent_no_such_thing"}


def test_rules_are_well_formed_alerts() -> None:
    doc = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    assert set(alerts) == {
        "KubeCgroupAgentNotReady",
        "KubeCgroupAgentDriftYielded",
        "KubeCgroupAgentResizeFailing",
        "KubeCgroupAgentTierShortfall",
        "KubeCgroupAgentVPAAdmissionNotReady",
        "KubeCgroupAgentVPAAdmissionWritesFailing",
    }
    for name, rule in alerts.items():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, name
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert rule["expr"].count("(") == rule["expr"].count(")") and rule["expr"].count("{") == rule["expr"].count("}")
    assert alerts["KubeCgroupAgentResizeFailing"]["for"] == "10m" and alerts["KubeCgroupAgentTierShortfall"]["for"] == "10m"


def test_the_dashboard_is_what_its_generator_writes() -> None:
    r = subprocess.run([str(REPO / ".venv" / "bin" / "python"), str(REPO / "deploy" / "grafana" / "generate.py"), "--check"], check=False)
    assert r.returncode == 0, "run python3 deploy/grafana/generate.py"
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and all(p["description"].endswith("?") for p in dash["panels"])


def test_the_ready_gauge_asks_the_readiness_probe_at_each_scrape() -> None:
    m = Metrics()
    state = {"ready": False}
    m.follow_readiness(lambda: (state["ready"], "why"))
    assert m.registry.get_sample_value("kube_cgroup_agent_ready") == 0.0
    state["ready"] = True
    assert m.registry.get_sample_value("kube_cgroup_agent_ready") == 1.0
