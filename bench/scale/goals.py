"""From one run's measurements: the fitted growth, the extrapolation to 5,000 nodes, and each goal of
issue 41 met or missed, with where the cost goes when one is missed (pure: a dict in, a dict out)."""

from __future__ import annotations

import statistics
from typing import Any

from bench.scale import fit
from bench.scale.rec_measure import (
    recommender_measured,
    rounded,
    steady_rates,
    steady_writes_reads,
    where_storage,
    young_intervals,
    young_statuses,
)

MIB = 1 << 20
KIB = 1 << 10
SLO = {"mutating": 1.0, "GET": 1.0, "LIST cluster": 30.0, "LIST namespace": 5.0}
MUTATING = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
# what grows with the nodes; Events expire (1 h). The recommender's NodeHistories and Leases apart
# (recommender_measured): they grow with the (VPA, node) pairs and the VPAs. "leases kcg-*" and
# "nodehistories" here: a run from before the two were told apart, or without the recommender.
PER_NODE = ("leases kcg-* (others)", "leases kcg-*")
def _median(rows: dict[str, dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows.values() if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _max(rows: dict[str, dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows.values() if r.get(key) is not None]
    return max(vals) if vals else None


SHARE_KEY = "share_marginal"  # an agent's bytes in a churn round less its quiet rate, over the churn's
OWN_KINDS = ("Node", "Pod")  # an agent watches only its own Node and pods: none of these is a change elsewhere


def events_elsewhere(agent: dict[str, Any], changes: int) -> float | None:
    """The change events an agent received per change elsewhere, from its proxy's count by type and kind
    (its own Node's and pods' events, and bookmarks, left out); None for a run that did not count them."""
    ev = agent.get("events")
    if ev is None or not changes:
        return None
    n: float = sum(v for k, v in ev.items() if not k.startswith(("BOOKMARK", "ERROR")) and k.split(" ", 1)[1] not in OWN_KINDS)
    return n / changes


def points(data: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """The measured points: per agent (median over the agents) against the objects elsewhere, and the
    API server's side against the number of agents."""
    out: dict[str, list[tuple[float, float]]] = {"share": [], "cpu_per_10k_s": [], "rss_growth_mib": [], "bytes_per_change": []}
    for step in data.get("elsewhere", []):
        x = float(step["objects_total"])
        ag = step["agents"]
        changes = step["churn"]["changes"] or 1
        for key in ("share", "cpu_per_10k_s", "rss_growth_mib"):
            v = _median(ag, SHARE_KEY if key == "share" and _median(ag, SHARE_KEY) is not None else key)
            if v is not None:
                out[key].append((x, float(v)))
        b = _median(ag, "bytes_down")
        if b is not None:
            out["bytes_per_change"].append((x, b / changes))
    for key in ("watch_events_per_s", "requests_per_s"):
        out[key] = [(float(s["n"]), float(s["api"][key])) for s in data.get("agents", [])]
    out["agents_bytes_per_s"] = [(float(s["n"]), s["agents_bytes_down"] / max(1e-9, s["api"]["window_s"]))
                                 for s in data.get("agents", [])]
    return out


def _slo_key(verb_scope: str) -> str | None:
    verb, _, scope = verb_scope.partition(" ")
    if verb in MUTATING:
        return "mutating"
    if verb == "GET":
        return "GET"
    if verb == "LIST":
        return "LIST namespace" if scope == "namespace" else "LIST cluster"
    return None


def _where_bytes(step: dict[str, Any]) -> str:
    kinds = step["api"].get("watch_bytes_by_kind") or {}
    total = sum(kinds.values()) or 1
    top = ", ".join(f"{k} {v / MIB:.1f} MiB ({100 * v / total:.0f} %)" for k, v in list(kinds.items())[:4])
    return f"watch bytes the API server sent in the ×{step['factor']} churn, by kind (all watchers): {top}"


def analyse(data: dict[str, Any]) -> dict[str, Any]:
    pts = points(data)
    lines = {k: fit.linear([p[0] for p in v], [p[1] for p in v]) for k, v in pts.items()}
    base = data.get("base") or {}
    base_objects = sum(base.get(k, 0) for k in ("replicasets", "vpas", "statefulsets", "daemonsets", "limitranges"))
    x_scale = fit.objects_at_scale(base_objects, base.get("vpas", 0))
    quiet = data.get("quiet") or {}
    rec_info = data.get("recommender") or {}
    rec_interval = float(rec_info.get("interval_s") or 0)
    default_interval = float(rec_info.get("default_interval_s") or fit.DEFAULT_RECOMMENDER_INTERVAL_S)
    without, rec_min = steady_rates(data)
    rec_default = fit.at_interval(rec_min, rec_interval, default_interval) if rec_min is not None and rec_interval else None
    steady = None if without is None else without + (rec_default or 0.0)  # an agent's requests, its recommender's at the default
    last = (data.get("elsewhere") or [None])[-1]
    share = None
    per_change = "events"
    if last:  # the watch events an agent received per change elsewhere (counted by its proxy), else the bytes
        per = [v for a in last["agents"].values() if (v := events_elsewhere(a, last["churn"]["changes"])) is not None]
        share = sorted(per)[len(per) // 2] if per else None
        if share is None:  # a run before the proxy counted events: what the churn added to its bytes
            per_change = "bytes"
            share = _median(last["agents"], "share_marginal")
            share = _median(last["agents"], "share") if share is None else share
    # the recommender's objects and requests at scale (its writes and the watch events they make count
    # among the agents' below; its objects among the project's)
    m = recommender_measured(data)
    rec = fit.recommender_at_scale(m, interval_s=default_interval) if m is not None else None
    ages = young_intervals(data)
    seed_days = (rec_info.get("seeded") or {}).get("days")
    steady_state = (f": VPAs whose pods have {seed_days:g} days of history, the steady state"
                    if m is not None and m.status_writes_young is not None and seed_days else "")
    rec_limit = (fit.recommender_at_scale(m, pods_per_node=fit.CLUSTER_PODS / fit.NODES, interval_s=default_interval)
                 if m is not None else None)
    writes_min, reads_min = steady_writes_reads(data)
    watchers = fit.status_watchers()
    ag = fit.agents(share or 0.0, writes_min or 0.0, other_writes_per_s=rec.writes_per_s if rec is not None else 0.0,
                    caused_events_per_s=rec.status_writes_per_s * watchers if rec is not None else 0.0)
    reads_at_scale = fit.NODES * (reads_min or 0.0) / 60.0 + (rec.lists_per_s if rec is not None else 0.0)
    kub = fit.kubelets()
    extrap: dict[str, Any] = {
        "nodes": fit.NODES, "vpas": fit.VPAS, "objects_elsewhere": x_scale,
        "cluster_changes_per_s": round(fit.cluster_changes_per_s(), 1),
        "kubelets": {"writes_per_s": round(kub.writes_per_s, 1), "watch_events_per_s": round(kub.watch_events_per_s, 1)},
        "agents": {"writes_per_s": round(ag.writes_per_s, 1), "watch_events_per_s": round(ag.watch_events_per_s, 1),
                   "reads_per_s": round(reads_at_scale, 1)},
        "agents_over_kubelets": round(fit.share_of_kubelets(ag, kub), 4),
        "rss_growth_mib_at_scale": round(lines["rss_growth_mib"].at(x_scale), 1) if pts["rss_growth_mib"] else None,
        "cpu_s_per_change_summed_over_nodes": round((_median(last["agents"], "cpu_per_10k_s") or 0) / 1e4 * fit.NODES, 2) if last else None,
    }
    goals: list[dict[str, Any]] = []

    def goal(name: str, value: float | None, limit: float, unit: str, where: str = "", keep: bool = False) -> None:
        """`keep`: say where it goes even when met (the parts of an extrapolation)."""
        met = value is not None and value <= limit
        goals.append({"goal": name, "value": value, "limit": limit, "unit": unit, "met": met,
                      "where": where if keep or not met else ""})

    if last:
        a = last["agents"]
        where = _where_bytes(last)
        first: dict[str, Any] = next(iter((quiet.get("agents") or {}).values()), {})
        since_start: dict[str, Any] = first.get("reads_since_start") or {}
        if since_start:
            where += "; what one agent lists, watches and gets from its start: " + ", ".join(f"{k} {v}" for k, v in since_start.items())
        goal(f"RSS growth per agent, objects ×{last['factor']} and churn", _max(a, "rss_growth_mib"), 2.0, "MiB", where)
        # what the churn added to an agent's bytes over its quiet rate, which holds its recommender's own
        # requests (a NodeHistory PUT and LISTs each interval: about 1 KiB/s at the harness's 20 s interval,
        # some 0.5 % of a ×16 round's bytes); the share of all its bytes where a run did not count that
        marginal = _max(a, SHARE_KEY)
        goal("share of the churn's bytes each agent receives", _max(a, "share") if marginal is None else marginal, 0.01, "",
             where + ("" if marginal is None else f"; with what it receives when nothing changes: {_max(a, 'share')}"))
        settled = last["churn"]["settled_after_s"]
        goal("CPU per 10,000 changes elsewhere", _max(a, "cpu_per_10k_s"), 0.2, "s",
             where + ("; the agents were still busy when the settle time ended (the CPU is a floor)" if settled is None
                      else f"; the agents were quiet again {settled:.0f} s after the churn began"))
    by: dict[str, int] = {}
    rec_by: dict[str, int] = {}
    for row in (quiet.get("agents") or {}).values():  # the recommender's requests apart, when the run told them apart
        for k, v in row.get("by_without_recommender", row.get("by", {})).items():
            by[k] = by.get(k, 0) + v
        for k, v in (row.get("recommender") or {}).items():
            rec_by[k] = rec_by.get(k, 0) + v
    reads: dict[str, int] = {}
    for row in (data.get("steady") or {}).values():
        for k, v in row.get("reads", {}).items():
            reads[k] = reads.get(k, 0) + v
    where_steady = ("requests in the quiet window, all agents: " + ", ".join(f"{k} {v}" for k, v in list(by.items())[:6])
                    + ("; reads over the run, all agents: " + ", ".join(f"{k} {v}" for k, v in list(reads.items())[:6]) if reads else ""))
    goal("steady requests per agent, quiet cluster, without the recommender", without, 6.0, "/min", where_steady)
    if rec_min is not None and rec_default is not None:
        extrap["recommender_requests_per_agent_per_min"] = {
            "measured": rec_min, "interval_s": rec_interval, "at_default": round(rec_default or 0.0, 2),
            "default_interval_s": default_interval, "without": without}
        goal(f"steady requests per agent with the recommender on (at its default {default_interval / 60:g}-minute interval)",
             None if steady is None else round(steady, 2), 6.0, "/min",
             f"without the recommender {without}/min; the recommender {rec_min}/min at the run's {rec_interval:g} s, "
             f"× {rec_interval:g}/{default_interval:g} = {rec_default:.2f}/min at the default (quiet window, all agents: "
             + ", ".join(f"{k} {v}" for k, v in rec_by.items()) + ")"
             + ("" if steady is None or steady <= 6.0 else "; " + where_steady), keep=True)
    rec_writes = (f"the recommender's {rec.writes_per_s:.1f}/s at its default interval (NodeHistories {rec.history_writes_per_s:.1f}, "
                  f"Leases {rec.lease_writes_per_s:.1f}, VPA statuses {rec.status_writes_per_s:.1f}{steady_state}), each status change "
                  f"reaching {watchers:.0f} watchers (the nodes of its VPA's {fit.CLUSTER_PODS / fit.VPAS:.0f} pods and the keeper): "
                  f"{rec.status_writes_per_s * watchers:.0f} watch events/s"
                  + (f"; every VPA in its first hour at once: statuses {rec.status_writes_young_per_s:.1f}/s, "
                     f"{rec.status_writes_young_per_s * watchers:.0f} watch events/s" if rec.status_writes_young_per_s is not None else "")
                  if rec is not None else "no recommender")
    shipped = fit.agents(share or 0.0, writes_min or 0.0)  # deploy/'s configuration: the node recommender off
    extrap["agents_shipped"] = {"writes_per_s": round(shipped.writes_per_s, 1), "watch_events_per_s": round(shipped.watch_events_per_s, 1)}
    extrap["agents_shipped_over_kubelets"] = round(fit.share_of_kubelets(shipped, kub), 4)
    goal("agents' writes and watch events at 5,000 nodes, over the kubelets' (as deploy/ ships them: the node recommender off)",
         extrap["agents_shipped_over_kubelets"], 0.10, "",
         f"all agents {shipped.total:.0f}/s: writes {shipped.writes_per_s:.0f}/s ({'not measured' if writes_min is None else f'{writes_min:.2f}'}"
         f"/min each on a quiet cluster), watch events {shipped.watch_events_per_s:.0f}/s (per change elsewhere, of "
         f"{fit.cluster_changes_per_s():.0f}/s); against the kubelets' {kub.total:.0f}/s", keep=True)
    goal("agents' writes and watch events at 5,000 nodes, over the kubelets' (the node recommender serving every VPA)",
         extrap["agents_over_kubelets"], 0.10, "",
         f"all agents {ag.total:.0f}/s: writes {ag.writes_per_s:.0f}/s ({'not measured' if writes_min is None else f'{writes_min:.2f}'}"
         f"/min each on a quiet cluster beside {rec_writes}); watch events {ag.watch_events_per_s:.0f}/s ("
         + (f"each agent received {share or 0:.3g} change events per change elsewhere (its own Node's and pods' apart)" if per_change == "events" else
            f"every agent's bytes grow by {100 * (share or 0):.3g} % of what the churn served, counted as that share")
         + f" of {fit.cluster_changes_per_s():.0f} changes/s, and the recommender's statuses); against the kubelets' "
         f"{kub.writes_per_s:.0f} writes and {kub.watch_events_per_s:.0f} watch events a second. Reads beside them (not writes, "
         f"no watch event): {reads_at_scale:.0f}/s ({'—' if reads_min is None else f'{reads_min:.2f}'}/min an agent, its watches "
         f"reconnecting, and the holders' LISTs {rec.lists_per_s if rec is not None else 0:.1f}/s)", keep=True)
    worst: dict[str, float] = {}
    slow: dict[str, list[tuple[float, str]]] = {}
    for step in data.get("agents", []):
        for vs, q in step["api"]["p99_s"].items():
            k = _slo_key(vs)
            if k is not None:
                worst[k] = max(worst.get(k, 0.0), q)
        for name, q in (step["api"].get("p99_slowest_s") or {}).items():
            k = _slo_key(name.split(" ")[0] + (" cluster" if name.startswith("LIST") else ""))
            if k is not None:
                slow.setdefault(k, []).append((q, f"{name} {q:.2f} s ({step['n']} agents)"))
    for k, limit in SLO.items():
        if k in worst:
            goal(f"API server p99, {k} (with N agents and the churn)", worst[k], limit, "s",
                 "the slowest by resource: " + ", ".join(t for _, t in sorted(slow[k], reverse=True)[:4]) if k in slow else "")
    lat = [p["latency_s"] for s in data.get("agents", [])[-1:] for p in s["latency"]]
    if lat:
        val = None if any(v is None for v in lat) else max(lat)
        goal(f"own VPA recommendation -> pods/resize, {data['agents'][-1]['n']} agents and churn", val, 1.0, "s",
             f"probes {lat} (None: no resize within 30 s)")
    store = data.get("storage") or {}
    project = store.get("project") or {}
    vpas = store.get("vpas_opted_in") or 1
    n_agents = max((s["n"] for s in data.get("agents", [])), default=1)
    per_vpa = project.get("vpaadmissionparams", {}).get("bytes", 0) / vpas
    with_rec = bool(rec_info)
    per_node_kinds = PER_NODE if with_rec else (*PER_NODE, "nodehistories")
    per_node = sum(v.get("bytes", 0) for k, v in project.items() if k in per_node_kinds) / max(1, n_agents)
    named_share = (rec_info.get("named_pods_per_node") or 0) / (rec_info.get("pods_per_node") or fit.PODS_PER_NODE)
    rec_share = ((named_share, fit.recommender_at_scale(m, interval_s=default_interval, share=named_share))
                 if m is not None and 0 < named_share < 1 else None)
    # at the cluster's supported size: 5,000 nodes hold at most 150,000 pods (30 a node); 110 a node on every
    # node is beyond it, and said beside
    at_scale = per_vpa * fit.VPAS + per_node * fit.NODES + (rec_limit.bytes if rec_limit is not None else 0.0)
    extrap["project_bytes_at_scale"] = int(at_scale)
    if m is not None and rec is not None and rec_limit is not None:
        extrap["recommender"] = {
            "measured": rounded(m, 3),
            "interval_s": default_interval, "measured_interval_s": rec_interval,
            "at_110_pods_a_node": rounded(rec, 1),
            "at_30_pods_a_node": rounded(rec_limit, 1),
            **({"at_the_harness_share": {"share": round(rec_share[0], 3), **rounded(rec_share[1], 1)}} if rec_share else {}),
            **({"young_intervals": [round(a, 1) for a in ages]} if ages is not None and m.status_writes_young is not None else {}),
        }
    storage_where = where_storage(per_vpa, per_node, rec, rec_limit, rec_share, m, project)
    # a run with the recommender on that measured none of it has not measured the goal
    goal("project's objects in etcd at 5,000 nodes (150,000 pods) and 10,000 VPAs",
         None if with_rec and m is None else round(at_scale / MIB, 1), 100.0, "MiB", storage_where, keep=with_rec)
    if data.get("agents"):
        s = data["agents"][-1]
        minutes = max(1e-9, s["api"]["window_s"]) / 60.0
        by_kind: dict[str, float] = {}
        for key, count in s["project_writes_by"].items():
            resource = key.split(" ", 1)[1].split("/")[0]
            by_kind[resource] = by_kind.get(resource, 0.0) + count / minutes
        keeper_min = by_kind.get("vpaadmissionparams", 0.0)
        rec_leases_min = sum(v for k, v in (s.get("recommender_writes_by") or {}).items() if k.endswith(" leases kcg-rec-*")) / minutes
        # the agents' other writes of the project's kinds a minute each (the rollout's Leases); the recommender's
        # apart, scaled by recommender_at_scale
        other_kinds = ("leases",) if with_rec else ("leases", "nodehistories")
        agents_min = max(0.0, sum(by_kind.get(k, 0.0) for k in other_kinds) - (rec_leases_min if with_rec else 0.0)) / max(1, s["n"])
        keeper_s = keeper_min * fit.VPAS / max(1, store.get("vpas") or 1) / 60.0
        writes = agents_min * fit.NODES / 60.0 + keeper_s + (rec.writes_per_s if rec is not None else 0.0)
        extrap["project_writes_per_s_at_scale"] = round(writes, 1)
        extrap["agent_writes_per_min_in_window"] = {k: round(v, 1) for k, v in sorted(by_kind.items(), key=lambda x: -x[1])}
        where = (f"the keeper's VPAAdmissionParams patches {keeper_min:.0f}/min for {store.get('vpas')} VPAs (they follow every "
                 f"recommendation): {keeper_s:.1f}/s at {fit.VPAS:,} VPAs; the agents' other Leases {agents_min:.1f}/min each")
        if rec is not None and m is not None:
            where += (f"; the recommender at its default {default_interval:g} s interval (measured per interval at {rec_interval:g} s): "
                      f"NodeHistories {rec.nodes:,} × {m.history_writes:.2f} / {default_interval:g} s = {rec.history_writes_per_s:.1f}/s, "
                      f"Lease renewals {rec.vpas:,.0f} × {m.lease_writes:.2f} / {default_interval:g} s = {rec.lease_writes_per_s:.1f}/s "
                      f"(a renewal every 3-4 intervals: 0.25-0.33 an interval), VPA statuses {rec.vpas:,.0f} × {m.status_writes:.2f} / "
                      f"{default_interval:g} s = {rec.status_writes_per_s:.1f}/s (the holder's patch when the recommendation changed"
                      f"{steady_state}); "
                      + (f"beside them, not counted: {young}; " if (young := young_statuses(m, rec, ages, rec_interval)) else "")
                      + f"reads beside them: the holders' LISTs {rec.lists_per_s:.1f}/s, each of the {rec.nodes_per_vpa:.0f} NodeHistories "
                      f"of a VPA's nodes ({rec.nodes_per_vpa * rec.history_bytes / MIB:.1f} MiB), {rec.list_bytes_per_s / MIB:.0f} MiB/s")
        elif with_rec:
            where += "; the recommender: not measured (no NodeHistory entry or Lease was written)"
        goal("project's objects' writes at 5,000 nodes", None if with_rec and m is None else round(writes, 1), 50.0, "/s",
             where, keep=with_rec)
    return {"fit": {k: {"intercept": v.intercept, "slope": v.slope, "r2": round(v.r2, 4), "points": pts[k]} for k, v in lines.items()},
            "extrapolation": extrap, "goals": goals}
