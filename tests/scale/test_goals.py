"""Issue 41's goals from one run's measurements (bench/scale/goals.py): each met or missed, the misses
with where the cost goes, and the report's lines (bench/scale/report.py). Made-up measurements only."""

from __future__ import annotations

from typing import Any

import pytest

from bench.scale import goals, rec_measure, report


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


# ---- the node recommender ----

from bench.scale import fit  # noqa: E402

MEASURED = fit.RecommenderMeasured(history_base_bytes=1000, entry_bytes=400, lease_bytes=500, history_writes=1.0,
                                   lease_writes=0.4, status_writes=1.0, lists=1.0)


@pytest.mark.parametrize(("pods", "share", "vpas", "interval", "entries", "histories", "leases", "writes", "per_vpa"), [
    # 5,000 nodes × 110 pods, every VPA naming it: an entry a pod; 16.7 + 13.3 + 33.3 writes a second
    (110, 1.0, 10_000, 300, 110, 5000 * (1000 + 110 * 400), 10_000 * 500, 63.333, 55),
    # the cluster limit, 150,000 pods: 30 a node
    (30, 1.0, 10_000, 300, 30, 5000 * (1000 + 30 * 400), 10_000 * 500, 63.333, 15),
    # half the pods and VPAs: half the entries, Leases, renewals and statuses; every node still writes its own
    (110, 0.5, 10_000, 300, 55, 5000 * (1000 + 55 * 400), 5_000 * 500, 16.667 + 6.667 + 16.667, 55),
    # the harness's 20 s interval: fifteen times the writes, the same bytes
    (110, 1.0, 10_000, 20, 110, 5000 * (1000 + 110 * 400), 10_000 * 500, 950.0, 55),
    # fewer VPAs than a node has pods: at most an entry a VPA
    (110, 1.0, 50, 300, 50, 5000 * (1000 + 50 * 400), 50 * 500, 16.667 + 0.067 + 0.167, 5000),
])
def test_the_recommender_scales_with_its_pairs_vpas_and_interval(pods: float, share: float, vpas: int, interval: float,
                                                                  entries: float, histories: float, leases: float,
                                                                  writes: float, per_vpa: float) -> None:
    at = fit.recommender_at_scale(MEASURED, nodes=5000, vpas=vpas, pods_per_node=pods, interval_s=interval, share=share)
    assert at.entries_per_node == entries
    assert at.histories_bytes == histories and at.leases_bytes == leases and at.bytes == histories + leases
    assert at.writes_per_s == pytest.approx(writes, abs=0.01)
    assert at.history_writes_per_s == pytest.approx(5000 / interval)
    assert at.nodes_per_vpa == pytest.approx(per_vpa)
    assert at.list_bytes_per_s == pytest.approx(at.lists_per_s * per_vpa * (1000 + entries * 400))


def test_requests_made_each_interval_scale_to_the_default_interval() -> None:
    assert fit.at_interval(15.0, 20.0) == 1.0
    assert fit.at_interval(15.0, 20.0, 60.0) == 5.0


def with_recommender(data: dict[str, Any], rec_per_min: float = 9.0, entries: int = 6, leases: int = 6) -> dict[str, Any]:
    """Two agents with the recommender at 20 s, each holding 3 VPAs, 600 s over the run (30 intervals): a
    NodeHistory PUT each interval, a Lease renewal every 2.5, a status patch and a LIST per VPA each."""
    data["recommender"] = {"interval_s": 20.0, "default_interval_s": 300.0, "pods_per_node": 110, "vpas_per_node": 3,
                           "vpas_on_node": 6, "named_pods_per_node": 54}
    tally = {"update nodehistories": 30, "update leases kcg-rec-*": 36, "get leases kcg-rec-*": 36,
             "patch verticalpodautoscalers/status": 90, "list nodehistories": 90}
    data["steady"] = {n: {"window_s": 600, "reads_per_min": 0.4, "other_writes_per_min": 0.0, "reads": {"watch pods": 2},
                          "recommender_per_min": rec_per_min, "recommender": tally, "held_vpas": 3} for n in ("sim-000", "sim-001")}
    for row in data["quiet"]["agents"].values():
        row.update({"per_min_without_recommender": 0.5, "recommender_per_min": rec_per_min,
                    "recommender": {"update nodehistories": 9}, "by_without_recommender": {"watch pods": 1}})
    data["storage"]["project"]["nodehistories"] = {"count": 2, "bytes": 2 * 1000 + entries * 400, "base_bytes": 2000,
                                                   "entry_bytes": entries * 400, "entries": entries, "containers": 8}
    data["storage"]["project"]["leases kcg-rec-*"] = {"count": leases, "bytes": leases * 500}
    data["storage"]["project"]["leases kcg-* (others)"] = {"count": 0, "bytes": 0}
    del data["storage"]["project"]["leases kcg-*"]
    return data


def _goal(out: dict[str, Any], prefix: str) -> dict[str, Any]:
    return next(g for g in out["goals"] if g["goal"].startswith(prefix))


def test_the_run_measures_the_recommender_per_object_entry_and_interval() -> None:
    data = with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3))
    assert rec_measure.recommender_measured(data) == MEASURED
    data["storage"]["project"]["nodehistories"]["entries"] = 0
    assert rec_measure.recommender_measured(data) is None  # nothing published: nothing to scale


def test_the_recommenders_bytes_and_writes_at_5000_nodes_say_where_they_go() -> None:
    out = goals.analyse(with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3)))
    etcd = _goal(out, "project's objects in etcd")
    # at the cluster's 150,000 pods (30 a node): VPAAdmissionParams 10,000 × 100,000/700 bytes + NodeHistories
    # 5,000 × (1,000 + 30 × 400) + Leases 10,000 × 500
    assert etcd["value"] == round((100_000 / 700 * 10_000 + 5000 * 13_000 + 10_000 * 500) / (1 << 20), 1) == 68.1
    assert etcd["met"]
    for part in ("NodeHistories 5,000 × (0.98 KiB + 30 entries × 0.39 KiB) = 62.0 MiB",
                 "110 pods on every node, 550,000 pods beyond that limit, would be 214.6 MiB",
                 "with the harness's share, 49 % of the pods named: 107.",
                 "Leases kcg-rec-* 10,000 × 0.49 KiB = 4.8 MiB", "VPAAdmissionParams 10,000 × 0.14 KiB = 1.4 MiB"):
        assert part in etcd["where"], (part, etcd["where"])
    writes = _goal(out, "project's objects' writes")
    # the keeper's 30/min for 1,000 VPAs -> 5/s at 10,000; NodeHistories 16.7, Leases 13.3, statuses 33.3
    assert writes["value"] == round(5.0 + 5000 / 300 + 10_000 * 0.4 / 300 + 10_000 / 300, 1) == 68.3
    assert not writes["met"]
    for part in ("NodeHistories 5,000 × 1.00 / 300 s = 16.7/s", "Lease renewals 10,000 × 0.40 / 300 s = 13.3/s",
                 "VPA statuses 10,000 × 1.00 / 300 s = 33.3/s", "the holders' LISTs 33.3/s"):
        assert part in writes["where"], (part, writes["where"])
    rec = out["extrapolation"]["recommender"]
    assert rec["at_110_pods_a_node"]["histories_bytes"] == 225_000_000
    assert rec["at_30_pods_a_node"]["histories_bytes"] == 65_000_000


def test_smaller_histories_and_fewer_status_writes_meet_the_storage_and_write_goals() -> None:
    data = with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3))
    data["storage"]["project"]["nodehistories"].update(entry_bytes=6 * 100, bytes=2000 + 6 * 100)
    for row in data["steady"].values():
        row["recommender"]["patch verticalpodautoscalers/status"] = 9
    out = goals.analyse(data)
    etcd, writes = _goal(out, "project's objects in etcd"), _goal(out, "project's objects' writes")
    assert etcd["met"] and etcd["value"] == round((100_000 / 700 * 10_000 + 5000 * 4_000 + 10_000 * 500) / (1 << 20), 1)
    assert "NodeHistories 5,000 × (0.98 KiB + 30 entries × 0.098 KiB)" in etcd["where"]  # said even when met
    assert writes["met"] and writes["value"] == round(5.0 + 5000 / 300 + 10_000 * 0.4 / 300 + 10_000 * 0.1 / 300, 1)


def test_a_run_whose_recommender_published_nothing_has_not_measured_its_goals() -> None:
    out = goals.analyse(with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3), entries=0))
    etcd, writes = _goal(out, "project's objects in etcd"), _goal(out, "project's objects' writes")
    assert etcd["value"] is None and not etcd["met"] and "none written" in etcd["where"]
    assert writes["value"] is None and not writes["met"]


@pytest.mark.parametrize(("rec_per_min", "with_rec", "met"), [
    (9.0, 0.5 + 9.0 * 20 / 300, True),  # 9 a minute at 20 s is 0.6 at 5 minutes
    (90.0, 0.5 + 90.0 * 20 / 300, False),  # 6.0 at 5 minutes, beside 0.5 without
])
def test_the_steady_requests_are_stated_without_and_with_the_recommender_at_its_default(rec_per_min: float, with_rec: float,
                                                                                       met: bool) -> None:
    out = goals.analyse(with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3), rec_per_min))
    without = _goal(out, "steady requests per agent, quiet cluster, without")
    assert without["value"] == 0.5 and without["met"]
    g = _goal(out, "steady requests per agent with the recommender")
    assert g["value"] == round(with_rec, 2) and g["met"] is met
    assert f"the recommender {rec_per_min}/min at the run's 20 s" in g["where"]
    assert out["extrapolation"]["recommender_requests_per_agent_per_min"]["at_default"] == round(rec_per_min * 20 / 300, 2)
    # all agents' writes at 5,000 nodes count the recommender's at its default interval (NodeHistories 16.7,
    # Leases 13.3, statuses 33.3 a second: whatever its requests a minute, which are mostly reads)
    assert out["extrapolation"]["agents"]["writes_per_s"] == round(5000 / 300 + 10_000 * 0.4 / 300 + 10_000 / 300, 1)
    assert out["extrapolation"]["agents"]["reads_per_s"] == round(5000 * 0.4 / 60 + 10_000 / 300, 1)


def test_the_agents_share_of_the_kubelets_load_counts_writes_and_the_watch_events_the_statuses_make() -> None:
    """As deploy/ ships it (no recommender) the agents write nothing on a quiet cluster; with the recommender
    serving every VPA each status patch reaches the nodes of its VPA's pods and the keeper (150,000 pods /
    10,000 VPAs: 15 + 1 watchers)."""
    out = goals.analyse(with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3)))
    shipped = _goal(out, "agents' writes and watch events at 5,000 nodes, over the kubelets' (as deploy/ ships")
    kub = 2 * 5000 * (6 + 0.2) / 60
    events_elsewhere = 5000 * 0.00005 * 10_000 / 60
    assert shipped["met"] and shipped["value"] == round(events_elsewhere / kub, 4)
    rec = _goal(out, "agents' writes and watch events at 5,000 nodes, over the kubelets' (the node recommender")
    statuses = 10_000 / 300
    assert rec["value"] == round((5000 / 300 + 10_000 * 0.4 / 300 + statuses + 16 * statuses + events_elsewhere) / kub, 4)
    assert not rec["met"] and "reaching 16 watchers" in rec["where"]


def test_the_report_says_what_the_recommender_ran_with_and_comes_to() -> None:
    data = with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3))
    data.update(goals.analyse(data))
    text = "\n".join(report.markdown(data))
    assert "3 of each agent node's 6 VPAs name it (54 of its 110 pods)" in text
    assert "NodeHistories 215 MiB at 110 pods a node (62 MiB at 30" in text
    assert "Where it goes: VPAAdmissionParams" in text


def test_the_share_goal_counts_what_the_churn_added_not_the_recommenders_own_requests() -> None:
    data = run(share=0.02, cpu=0.1, rss=1.0, steady=0.5, latency=0.3)  # 2 % of the churn's bytes with the quiet rate
    for step in data["elsewhere"]:
        for a in step["agents"].values():
            a["share_marginal"] = 0.001  # what the churn added
    out = goals.analyse(data)
    g = _goal(out, "share of the churn's bytes")
    assert g["value"] == 0.001 and g["met"]
    assert out["fit"]["share"]["points"][-1][1] == 0.001
    del data["elsewhere"][-1]["agents"]["sim-000"]["share_marginal"], data["elsewhere"][-1]["agents"]["sim-001"]["share_marginal"]
    assert _goal(goals.analyse(data), "share of the churn's bytes")["value"] == 0.02  # a run that did not count it


# ---- the status patches of VPAs with days of history (seeded) and of young ones ----

def with_ages(data: dict[str, Any], aged: tuple[int, int], young: tuple[int, int], windows: tuple[int, int] = (600, 600),
              ) -> dict[str, Any]:
    """The two agents' status patches over the run told apart: per agent those of its 2 VPAs whose pods' histories
    were seeded (8 days) and those of its young one, each counted from a minute after it started."""
    data["recommender"]["seeded"] = {"vpas_per_node": 2, "young_vpas_per_node": 1, "vpas": ["svc-2", "svc-3"], "days": 8.0,
                                     "sample_step_s": 600.0, "count_step_s": 60.0, "nodes": 2}
    for (name, row), a, y, w in zip(data["steady"].items(), aged, young, windows, strict=True):
        row["window_s"], row["from_s"] = w, 60.0
        row["recommender"]["patch verticalpodautoscalers/status"] = a + y
        row["status_patches"] = {"aged": {"vpas": 2, "patches": a}, "young": {"vpas": 1, "patches": y}}
        row["status_patches_by_vpa"] = {f"own-{name}/svc-2": a, f"own-{name}/svc-4": y}
    return data


def _aged_run(aged: tuple[int, int] = (3, 3), young: tuple[int, int] = (30, 30),
              windows: tuple[int, int] = (600, 600)) -> dict[str, Any]:
    return with_ages(with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3)), aged, young, windows)


@pytest.mark.parametrize(("aged", "young", "windows", "aged_rate", "young_rate", "ages"), [
    # 600 s at 20 s: 30 intervals an agent; 2 aged VPAs and 1 young each
    ((3, 3), (30, 30), (600, 600), 6 / 120, 60 / 60, (3.0, 33.0, 33.0)),
    ((0, 0), (20, 10), (600, 600), 0.0, 30 / 60, (3.0, 33.0, 33.0)),
    # an agent started later: a shorter window, its young VPA counted over its intervals 3 to 18
    ((0, 1), (15, 15), (600, 300), 1 / (60 + 30), 30 / (30 + 15), (3.0, 18.0, 33.0)),
])
def test_the_status_patches_of_aged_and_young_vpas_are_measured_apart(aged: tuple[int, int], young: tuple[int, int],
                                                                      windows: tuple[int, int], aged_rate: float,
                                                                      young_rate: float, ages: tuple[float, ...]) -> None:
    data = _aged_run(aged, young, windows)
    got_aged, got_young = rec_measure.status_split(data)
    assert got_aged == pytest.approx(aged_rate) and got_young == pytest.approx(young_rate)
    assert rec_measure.young_intervals(data) == ages
    m = rec_measure.recommender_measured(data)
    assert m is not None
    assert m.status_writes == pytest.approx(aged_rate) and m.status_writes_young == pytest.approx(young_rate)
    # the other counts as they were (here over 2 agents' 600 s or 600 + 300 s)
    intervals = sum(windows) / 20
    assert m.history_writes == pytest.approx(60 / intervals) and m.lists == pytest.approx(180 / (3 * intervals))


@pytest.mark.parametrize("case", ["no split", "nothing seeded"])
def test_a_run_that_did_not_tell_them_apart_counts_every_vpas_patches(case: str) -> None:
    data = with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3))
    if case == "nothing seeded":  # every VPA young: no steady state measured, every patch counted as before
        for row in data["steady"].values():
            row["status_patches"] = {"aged": {"vpas": 0, "patches": 0}, "young": {"vpas": 3, "patches": 90}}
    m = rec_measure.recommender_measured(data)
    assert m == MEASURED and m.status_writes_young is None
    out = goals.analyse(data)
    assert out["extrapolation"]["recommender"]["measured"]["status_writes_young"] is None
    assert "young_intervals" not in out["extrapolation"]["recommender"]
    assert "no history" not in _goal(out, "project's objects' writes")["where"]


def test_the_writes_goal_takes_the_aged_rate_and_states_the_young_one_beside() -> None:
    out = goals.analyse(_aged_run())
    writes = _goal(out, "project's objects' writes")
    # the keeper's 5/s, NodeHistories 16.7, Leases 13.3, statuses 10,000 × 0.05 / 300 = 1.7 (not 33.3)
    assert writes["value"] == round(5.0 + 5000 / 300 + 10_000 * 0.4 / 300 + 10_000 * 0.05 / 300, 1) == 36.7
    assert writes["met"]
    for part in ("VPA statuses 10,000 × 0.05 / 300 s = 1.7/s (the holder's patch when the recommendation changed: VPAs "
                 "whose pods have 8 days of history, the steady state)",
                 "beside them, not counted: a VPA whose pods had no history when their agent started (one of each agent "
                 "node's) was patched 1.00 times an interval over its intervals 3 to 33 at the run's 20 s: the transient of a "
                 "VPA's first hour or so", "were all 10,000 that young at once, 10,000 × 1.00 / 300 s = 33.3/s"):
        assert part in writes["where"], (part, writes["where"])
    rec = out["extrapolation"]["recommender"]
    assert rec["measured"]["status_writes"] == 0.05 and rec["measured"]["status_writes_young"] == 1.0
    assert rec["at_110_pods_a_node"]["status_writes_per_s"] == 1.7
    assert rec["at_110_pods_a_node"]["status_writes_young_per_s"] == 33.3
    assert rec["young_intervals"] == [3.0, 33.0, 33.0]


def test_the_agents_share_of_the_kubelets_load_counts_the_steady_statuses() -> None:
    out = goals.analyse(_aged_run())
    g = _goal(out, "agents' writes and watch events at 5,000 nodes, over the kubelets' (the node recommender")
    kub = 2 * 5000 * (6 + 0.2) / 60
    statuses = 10_000 * 0.05 / 300
    events_elsewhere = 5000 * 0.00005 * 10_000 / 60
    assert g["value"] == round((5000 / 300 + 10_000 * 0.4 / 300 + statuses + 16 * statuses + events_elsewhere) / kub, 4)
    assert g["met"]
    assert "VPA statuses 1.7: VPAs whose pods have 8 days of history, the steady state" in g["where"]
    assert "every VPA in its first hour at once: statuses 33.3/s, 533 watch events/s" in g["where"]


@pytest.mark.parametrize(("data", "says", "not_said"), [
    (_aged_run(), ["Before the agents started, the pods of 2 of those VPAs on each node were given 8 days of history",
                   "0.05 status patches a VPA with 8 days of history (the steady state)",
                   "a VPA with no history 1.00 status patches an interval over its intervals 3 to 33 at the run's 20 s: "
                   "the transient of a VPA's first hour or so",
                   "Were every VPA in its first hour at once, its statuses would be 33.3 a second instead of 1.7."], []),
    (_aged_run(windows=(600, 300), young=(15, 15)), ["over its intervals 3 to 18–33 at the run's 20 s"], []),
    # a run from before: every VPA's patches, nothing said of ages
    (with_recommender(run(share=0.00005, cpu=0.1, rss=1.0, steady=0.5, latency=0.3)), ["1.00 status patches and 1.00 LISTs a VPA"],
     ["history (the steady state)", "no history", "Before the agents started", "first hour"]),
])
def test_the_report_states_the_steady_state_and_the_transient(data: dict[str, Any], says: list[str], not_said: list[str]) -> None:
    data.update(goals.analyse(data))
    text = "\n".join(report.recommender_lines(data))
    for part in says:
        assert part in text, (part, text)
    for part in not_said:
        assert part not in text, (part, text)
