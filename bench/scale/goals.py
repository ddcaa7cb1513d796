"""From one run's measurements: the fitted growth, the extrapolation to 5,000 nodes, and each goal of
issue 41 met or missed, with where the cost goes when one is missed (pure: a dict in, a dict out)."""

from __future__ import annotations

import statistics
from typing import Any

from bench.scale import fit

MIB = 1 << 20
KIB = 1 << 10
SLO = {"mutating": 1.0, "GET": 1.0, "LIST cluster": 30.0, "LIST namespace": 5.0}
MUTATING = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
# what grows with the nodes; Events expire (1 h). The recommender's NodeHistories and Leases apart
# (recommender_measured): they grow with the (VPA, node) pairs and the VPAs. "leases kcg-*" and
# "nodehistories" here: a run from before the two were told apart, or without the recommender.
PER_NODE = ("leases kcg-* (others)", "leases kcg-*")
REC_HISTORY_WRITES = ("update nodehistories", "create nodehistories")
REC_LEASE_WRITES = ("update leases kcg-rec-*", "create leases kcg-rec-*")
REC_STATUS_WRITES = ("patch verticalpodautoscalers/status",)
REC_LISTS = ("list nodehistories",)


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


def recommender_rows(data: dict[str, Any]) -> list[tuple[dict[str, int], float, int]]:
    """Each agent's recommender requests by "verb part", the seconds they were counted over and the VPAs its
    node held: over the run (from a minute after the agent started: past its first intervals), else the
    quiet window."""
    rec = data.get("recommender") or {}
    rows = [(r["recommender"], float(r["window_s"]), int(r.get("held_vpas", rec.get("vpas_per_node", 0))))
            for r in (data.get("steady") or {}).values() if "recommender" in r and r.get("window_s")]
    if rows:
        return rows
    quiet = data.get("quiet") or {}
    return [(r["recommender"], float(quiet.get("window_s") or 0), int(rec.get("vpas_per_node", 0)))
            for r in (quiet.get("agents") or {}).values() if "recommender" in r and quiet.get("window_s")]


def status_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The agents' rows over the run that tell the holder's status patches of aged VPAs (their pods' histories
    seeded) from those of young ones (harness.status_patches); none for a run before that."""
    return [r for r in (data.get("steady") or {}).values() if r.get("status_patches") and r.get("window_s")]


def status_split(data: dict[str, Any]) -> tuple[float | None, float | None]:
    """(status patches per aged VPA per interval, per young VPA per interval) over the run: the steady state
    and the transient; None where the run had no such VPA, or did not tell them apart."""
    interval = (data.get("recommender") or {}).get("interval_s")
    if not interval:
        return None, None
    sums = {"aged": [0.0, 0.0], "young": [0.0, 0.0]}  # patches, VPA intervals
    for row in status_rows(data):
        for age, acc in sums.items():
            part = row["status_patches"].get(age) or {}
            acc[0] += part.get("patches", 0)
            acc[1] += part.get("vpas", 0) * row["window_s"] / interval
    aged, young = sums["aged"], sums["young"]
    return (aged[0] / aged[1] if aged[1] else None), (young[0] / young[1] if young[1] else None)


def young_intervals(data: dict[str, Any]) -> tuple[float, float, float] | None:
    """The young VPAs' age in intervals over which their patches were counted: (from, the earliest end, the
    latest end) — each agent's from a minute after it started to the end of the run; None without them."""
    interval = (data.get("recommender") or {}).get("interval_s")
    rows = [r for r in status_rows(data) if (r["status_patches"].get("young") or {}).get("vpas")]
    if not interval or not rows:
        return None
    starts = [float(r.get("from_s", 60.0)) / interval for r in rows]
    ends = [(float(r.get("from_s", 60.0)) + r["window_s"]) / interval for r in rows]
    return min(starts), min(ends), max(ends)


def recommender_measured(data: dict[str, Any]) -> fit.RecommenderMeasured | None:
    """Bytes per NodeHistory and per entry, per Lease, and requests per interval, from one run; None for a
    run without the recommender, or one whose agents wrote no NodeHistory entry or Lease (nothing to scale).
    The status patches of the VPAs with days of history (the steady state) apart from the young ones' (the
    transient) where the run told them apart; else every VPA's."""
    rec = data.get("recommender") or {}
    interval = rec.get("interval_s")
    project = (data.get("storage") or {}).get("project") or {}
    nh = project.get("nodehistories") or {}
    leases = project.get("leases kcg-rec-*") or {}
    if not interval or not nh.get("count") or not nh.get("entries") or not leases.get("count"):
        return None
    counts: dict[str, float] = {}
    node_intervals = vpa_intervals = 0.0
    for tally, window_s, held in recommender_rows(data):
        for k, v in tally.items():
            counts[k] = counts.get(k, 0) + v
        node_intervals += window_s / interval
        vpa_intervals += held * window_s / interval
    if not node_intervals or not vpa_intervals:
        return None

    def total(keys: tuple[str, ...]) -> float:
        return sum(counts.get(k, 0) for k in keys)

    aged, young = status_split(data)
    return fit.RecommenderMeasured(
        history_base_bytes=nh.get("base_bytes", 0) / nh["count"], entry_bytes=nh.get("entry_bytes", 0) / nh["entries"],
        lease_bytes=leases["bytes"] / leases["count"],
        history_writes=total(REC_HISTORY_WRITES) / node_intervals, lease_writes=total(REC_LEASE_WRITES) / vpa_intervals,
        status_writes=total(REC_STATUS_WRITES) / vpa_intervals if aged is None else aged, lists=total(REC_LISTS) / vpa_intervals,
        status_writes_young=young if aged is not None else None)


def steady_rates(data: dict[str, Any]) -> tuple[float | None, float | None]:
    """(an agent's requests a minute without the recommender's, the recommender's a minute at the run's
    interval): the largest over the agents, of the quiet window and of the whole run (the quiet window can
    be shorter than a watch's reconnect period)."""
    quiet = data.get("quiet") or {}
    rows = (quiet.get("agents") or {}).values()
    without = [r["per_min_without_recommender"] for r in rows if "per_min_without_recommender" in r]
    rec = [r["recommender_per_min"] for r in rows if "recommender_per_min" in r]
    if not without:  # a run from before the recommender's requests were told apart
        total = (quiet.get("per_agent_per_min") or {}).get("max")
        without = [total] if total is not None else []
    over_run = list((data.get("steady") or {}).values())
    without += [r["reads_per_min"] + r["other_writes_per_min"] for r in over_run]
    rec += [r["recommender_per_min"] for r in over_run if "recommender_per_min" in r]
    return (max(without) if without else None), (max(rec) if rec else None)


def steady_writes_reads(data: dict[str, Any]) -> tuple[float | None, float | None]:
    """(an agent's writes a minute, its reads a minute), the recommender's apart, over the run: the largest
    over the agents (None for a run that did not count them)."""
    rows = list((data.get("steady") or {}).values())
    writes = [r["other_writes_per_min"] for r in rows if "other_writes_per_min" in r]
    reads = [r["reads_per_min"] for r in rows if "reads_per_min" in r]
    return (max(writes) if writes else None), (max(reads) if reads else None)


# What a young VPA's status patches are (agent/recommender/estimate.py and publish.worth_writing): its upper
# bound is the percentile × (1 + 1/confidence), the confidence its age in days, so while it is young the bound
# falls by more than statusMinChange (10 %) whenever its age grew by about 10 %: at nearly every merge for
# about its first 10 intervals (50 minutes at the default 5), then ever more rarely, until about a day.
TRANSIENT = ("the transient of a VPA's first hour or so at the default interval: while its confidence (its age in days) "
             "grows, its bounds move by more than 10 % at nearly every merge for about its first 10 intervals, then each "
             "time its age grows by about 10 %, ever more rarely, until it is about a day old")


def _rounded(obj: object, digits: int) -> dict[str, float | None]:
    return {k: None if v is None else round(v, digits) for k, v in vars(obj).items()}


def young_span(ages: tuple[float, float, float] | list[float] | None, interval_s: float | None) -> str:
    """The young VPAs' ages their patches were counted over, in intervals (young_intervals)."""
    if not ages or not interval_s:
        return ""
    start, first_end, last_end = ages
    ends = f"{first_end:.0f}" if round(first_end) == round(last_end) else f"{first_end:.0f}–{last_end:.0f}"
    return f" over its intervals {start:.0f} to {ends} at the run's {interval_s:g} s"


def young_statuses(m: fit.RecommenderMeasured, rec: fit.RecommenderAtScale, ages: tuple[float, float, float] | None,
                   interval_s: float) -> str:
    """The young VPAs' status patches measured, and what they would be at scale were every VPA that young
    ("" when the run did not tell them apart)."""
    if m.status_writes_young is None or rec.status_writes_young_per_s is None:
        return ""
    return (f"a VPA whose pods had no history when their agent started (one of each agent node's) was patched "
            f"{m.status_writes_young:.2f} times an interval{young_span(ages, interval_s)}: {TRANSIENT}; were all {rec.vpas:,.0f} "
            f"that young at once, {rec.vpas:,.0f} × {m.status_writes_young:.2f} / {rec.interval_s:g} s = "
            f"{rec.status_writes_young_per_s:.1f}/s")


def _kib(n: float) -> str:
    return f"{n / KIB:.2g} KiB" if n < 10 * KIB else f"{n / KIB:.0f} KiB"


def _where_storage(per_vpa: float, others: float, at: fit.RecommenderAtScale | None, at_limit: fit.RecommenderAtScale | None,
                   at_share: tuple[float, fit.RecommenderAtScale] | None, m: fit.RecommenderMeasured | None,
                   project: dict[str, Any]) -> str:
    parts = [f"VPAAdmissionParams {fit.VPAS:,} × {_kib(per_vpa)} = {per_vpa * fit.VPAS / MIB:.1f} MiB"]
    if at is not None and at_limit is not None and m is not None:
        nh = project.get("nodehistories") or {}
        parts.append(
            f"NodeHistories {at_limit.nodes:,} × ({_kib(m.history_base_bytes)} + {at_limit.entries_per_node:.0f} entries × "
            f"{_kib(m.entry_bytes)}) = {at_limit.histories_bytes / MIB:.1f} MiB (the cluster's limit of {fit.CLUSTER_PODS:,} pods, "
            f"{at_limit.pods_per_node:.0f} a node, every one under a VPA naming kube-cgroup-agent and none beside another of its "
            f"VPA on its node: an entry a pod; 110 pods on every node, {at.nodes * at.pods_per_node:,.0f} pods beyond that limit, "
            f"would be {at.histories_bytes / MIB:.1f} MiB"
            + (f"; with the harness's share, {100 * at_share[0]:.0f} % of the pods named: {at_share[1].histories_bytes / MIB:.1f} MiB"
               if at_share is not None else "")
            + f"; measured: {nh.get('count')} NodeHistories, {nh.get('entries')} entries of {nh.get('containers')} containers)")
        parts.append(f"Leases kcg-rec-* {at.vpas:,.0f} × {_kib(m.lease_bytes)} = {at.leases_bytes / MIB:.1f} MiB")
    elif "nodehistories" in project:
        parts.append("NodeHistories: " + ("none written in this run" if not (project["nodehistories"] or {}).get("entries")
                                          else "no recommender settings in this run"))
    if others:
        parts.append(f"other project objects a node (rollout Leases) {fit.NODES:,} × {others:.0f} bytes")
    return "; ".join(parts)


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
            "measured": _rounded(m, 3),
            "interval_s": default_interval, "measured_interval_s": rec_interval,
            "at_110_pods_a_node": _rounded(rec, 1),
            "at_30_pods_a_node": _rounded(rec_limit, 1),
            **({"at_the_harness_share": {"share": round(rec_share[0], 3), **_rounded(rec_share[1], 1)}} if rec_share else {}),
            **({"young_intervals": [round(a, 1) for a in ages]} if ages is not None and m.status_writes_young is not None else {}),
        }
    where_storage = _where_storage(per_vpa, per_node, rec, rec_limit, rec_share, m, project)
    # a run with the recommender on that measured none of it has not measured the goal
    goal("project's objects in etcd at 5,000 nodes (150,000 pods) and 10,000 VPAs",
         None if with_rec and m is None else round(at_scale / MIB, 1), 100.0, "MiB", where_storage, keep=with_rec)
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
