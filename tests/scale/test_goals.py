"""Issue 41's goals from one run's measurements (bench/scale/goals.py): each met or missed, the misses
with where the cost goes, and the report's lines (bench/scale/report.py). Made-up measurements only."""

from __future__ import annotations

from typing import Any

from bench.scale import goals, report


def _agent(share: float, cpu: float, rss: float) -> dict[str, Any]:
    return {"share": share, "cpu_per_10k_s": cpu, "rss_growth_mib": rss, "rss_mib": 60 + rss, "bytes_down": 1000}


def _api(events: float, p99: dict[str, float]) -> dict[str, Any]:
    return {"window_s": 60.0, "requests_per_s": 40.0, "requests_per_s_by": {}, "watch_events_per_s": events,
            "watch_events_per_s_by_kind": {}, "watch_bytes_by_kind": {"replicasets": 3 << 20, "verticalpodautoscalers": 1 << 20},
            "watchers_by_kind": {"pods": 4}, "p99_s": p99}


def run(share: float, cpu: float, rss: float, steady: float, latency: float | None) -> dict[str, Any]:
    return {
        "commit": "abc1234", "mode": "full", "base": {"replicasets": 250, "vpas": 60, "statefulsets": 20, "daemonsets": 6, "limitranges": 20},
        "quiet": {"window_s": 180, "per_agent_per_min": {"median": steady, "max": steady},
                  "agents": {"sim-000": {"by": {"list pods": 1}}}},
        "elsewhere": [
            {"factor": f, "objects_total": 356 * f, "churn": {"changes": 360 * f, "settled_after_s": 10.0, "served_bytes": 1 << 20},
             "agents": {"sim-000": _agent(share, cpu, rss * f / 16), "sim-001": _agent(share, cpu, rss * f / 16)},
             "api": _api(10.0, {})}
            for f in (1, 4, 16)],
        "agents": [
            {"n": n, "changes": 1800, "agents_bytes_down": n * 1000, "project_writes_by": {"patch vpaadmissionparams": 30},
             "latency": [{"latency_s": latency}], "api": _api(20.0 * n, {"PATCH resource": 0.2, "GET resource": 0.05, "LIST cluster": 2.0})}
            for n in (4, 8, 16)],
        "storage": {"project": {"vpaadmissionparams": {"count": 50, "bytes": 100_000}, "nodehistories": {"count": 0, "bytes": 0},
                                "leases kcg-*": {"count": 0, "bytes": 0}}, "vpas": 1000, "vpas_opted_in": 700},
    }


def _verdicts(data: dict[str, Any]) -> dict[str, bool]:
    return {g["goal"].split(",")[0]: g["met"] for g in goals.analyse(data)["goals"]}


def test_an_agent_that_receives_everything_misses_the_per_agent_goals_and_says_where() -> None:
    out = goals.analyse(run(share=0.9, cpu=120.0, rss=16.0, steady=0.2, latency=24.0))
    by = {g["goal"]: g for g in out["goals"]}
    share = next(g for name, g in by.items() if name.startswith("share"))
    assert not share["met"] and "replicasets 3.0 MiB (75 %)" in share["where"]
    assert not next(g for n, g in by.items() if n.startswith("RSS"))["met"]
    assert not next(g for n, g in by.items() if n.startswith("CPU"))["met"]
    assert next(g for n, g in by.items() if n.startswith("steady"))["met"]
    assert not next(g for n, g in by.items() if n.startswith("own VPA"))["met"]
    assert out["extrapolation"]["agents_over_kubelets"] > 100


def test_an_agent_that_receives_only_its_own_meets_every_goal() -> None:
    verdicts = _verdicts(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3))
    assert all(verdicts.values()), verdicts


def test_the_fits_grow_with_the_objects_and_the_agents() -> None:
    out = goals.analyse(run(share=0.9, cpu=120.0, rss=16.0, steady=0.2, latency=1.0))
    assert out["fit"]["rss_growth_mib"]["slope"] > 0
    assert abs(out["fit"]["watch_events_per_s"]["slope"] - 20.0) < 1e-9
    assert out["extrapolation"]["rss_growth_mib_at_scale"] > 16


def test_a_probe_without_a_resize_misses_and_p99_is_held_to_its_slo() -> None:
    data = run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=None)
    data["agents"][1]["api"]["p99_s"]["LIST cluster"] = 31.0
    verdicts = _verdicts(data)
    assert verdicts["own VPA recommendation -> pods/resize"] is False
    assert verdicts["API server p99"] is False  # the LIST over 30 s


def test_the_report_prints_each_goal_and_the_section_compares_with_before() -> None:
    before = run(share=0.9, cpu=120.0, rss=16.0, steady=0.2, latency=24.0)
    after = run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3)
    for d in (before, after):
        d.update(goals.analyse(d))
    after["commit"] = "def5678"
    lines = report.goal_lines(after)
    assert len(lines) == len(after["goals"]) and all(" — **met**." in line for line in lines)
    section = "\n".join(report.markdown(after, before))
    assert section.startswith("## 12. At scale")
    assert "| abc1234 (full, ×16, 16 agents) | 90.0 % |" in section
    assert "| def5678 (full, ×16, 16 agents) | 0.005 % |" in section
    assert "Before and after" not in "\n".join(report.markdown(after, after))


def test_the_run_long_read_rate_counts_when_the_quiet_window_saw_no_reconnect() -> None:
    data = run(share=0.00005, cpu=0.1, rss=1.0, steady=0.0, latency=0.3)
    data["steady"] = {"sim-000": {"reads_per_min": 7.5, "other_writes_per_min": 0.5, "reads": {"watch pods": 60}}}
    g = next(g for g in goals.analyse(data)["goals"] if g["goal"].startswith("steady"))
    assert g["value"] == 8.0 and not g["met"]
    assert "watch pods 60" in g["where"]


def test_the_model_takes_what_the_churn_added_to_an_agents_bytes() -> None:
    data = run(share=0.01, cpu=0.1, rss=1.0, steady=0.0, latency=0.3)
    for a in data["elsewhere"][-1]["agents"].values():
        a["share_marginal"] = 0.0
    out = goals.analyse(data)
    assert out["extrapolation"]["agents"]["watch_events_per_s"] == 0.0
    assert next(g for g in out["goals"] if g["goal"].startswith("agents'"))["met"]


def test_a_missed_p99_names_the_slowest_resources() -> None:
    data = run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3)
    data["agents"][2]["api"]["p99_s"]["PUT resource"] = 1.5
    data["agents"][2]["api"]["p99_slowest_s"] = {"PUT leases": 1.5, "GET pods": 0.2}
    g = next(g for g in goals.analyse(data)["goals"] if g["goal"].startswith("API server p99, mutating"))
    assert not g["met"]
    assert g["where"] == "the slowest by resource: PUT leases 1.50 s (16 agents)"


def test_an_agents_own_node_and_pod_events_are_not_changes_elsewhere() -> None:
    agent = {"events": {"MODIFIED Node": 1, "MODIFIED Pod": 4, "BOOKMARK DaemonSet": 5, "MODIFIED ReplicaSet": 2}}
    assert goals.events_elsewhere(agent, 1000) == 0.002
    assert goals.events_elsewhere({}, 1000) is None
    assert goals.events_elsewhere(agent, 0) is None
