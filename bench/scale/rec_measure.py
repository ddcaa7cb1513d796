"""The node recommender's part of a run's measurements (pure): its requests per interval and object sizes
(`recommender_measured`), the VPA statuses of aged and young histories apart, the steady request rates, and
what its objects come to at 5,000 nodes, said where a goal needs it (goals.py reads these)."""

from __future__ import annotations

from typing import Any

from bench.scale import fit

MIB = 1 << 20
KIB = 1 << 10
REC_HISTORY_WRITES = ("update nodehistories", "create nodehistories")
REC_LEASE_WRITES = ("update leases kcg-rec-*", "create leases kcg-rec-*")
REC_STATUS_WRITES = ("patch verticalpodautoscalers/status",)
REC_LISTS = ("list nodehistories",)



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


def rounded(obj: object, digits: int) -> dict[str, float | None]:
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


def where_storage(per_vpa: float, others: float, at: fit.RecommenderAtScale | None, at_limit: fit.RecommenderAtScale | None,
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
