"""From one run's measurements: the fitted growth, the extrapolation to 5,000 nodes, and each goal of
issue 41 met or missed, with where the cost goes when one is missed (pure: a dict in, a dict out)."""

from __future__ import annotations

import statistics
from typing import Any

from bench.scale import fit

MIB = 1 << 20
SLO = {"mutating": 1.0, "GET": 1.0, "LIST cluster": 30.0, "LIST namespace": 5.0}
MUTATING = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
PER_NODE = ("nodehistories", "leases kcg-*")  # what grows with the nodes; Events expire (1 h)


def _median(rows: dict[str, dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows.values() if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _max(rows: dict[str, dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows.values() if r.get(key) is not None]
    return max(vals) if vals else None


OWN_KINDS = ("Node", "Pod")  # an agent watches only its own Node and pods: none of these is a change elsewhere


def events_elsewhere(agent: dict[str, Any], changes: int) -> float | None:
    """The change events an agent received per change elsewhere, from its proxy's count by type and kind
    (its own Node's and pods' events, and bookmarks, left out); None for a run that did not count them."""
    ev = agent.get("events")
    if ev is None or not changes:
        return None
    n = sum(v for k, v in ev.items() if not k.startswith(("BOOKMARK", "ERROR")) and k.split(" ", 1)[1] not in OWN_KINDS)
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
            v = _median(ag, key)
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
    steady = (quiet.get("per_agent_per_min") or {}).get("max")
    over_run = [r["reads_per_min"] + r["other_writes_per_min"] for r in (data.get("steady") or {}).values()]
    if over_run and steady is not None:  # the quiet window can be shorter than a watch's reconnect period
        steady = max(steady, max(over_run))
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
    ag = fit.agents(share or 0.0, steady or 0.0)
    kub = fit.kubelets()
    extrap = {
        "nodes": fit.NODES, "vpas": fit.VPAS, "objects_elsewhere": x_scale,
        "cluster_changes_per_s": round(fit.cluster_changes_per_s(), 1),
        "kubelets": {"writes_per_s": round(kub.writes_per_s, 1), "watch_events_per_s": round(kub.watch_events_per_s, 1)},
        "agents": {"writes_per_s": round(ag.writes_per_s, 1), "watch_events_per_s": round(ag.watch_events_per_s, 1)},
        "agents_over_kubelets": round(fit.share_of_kubelets(ag, kub), 4),
        "rss_growth_mib_at_scale": round(lines["rss_growth_mib"].at(x_scale), 1) if pts["rss_growth_mib"] else None,
        "cpu_s_per_change_summed_over_nodes": round((_median(last["agents"], "cpu_per_10k_s") or 0) / 1e4 * fit.NODES, 2) if last else None,
    }
    goals: list[dict[str, Any]] = []

    def goal(name: str, value: float | None, limit: float, unit: str, where: str = "") -> None:
        met = value is not None and value <= limit
        goals.append({"goal": name, "value": value, "limit": limit, "unit": unit, "met": met, "where": "" if met else where})

    if last:
        a = last["agents"]
        where = _where_bytes(last)
        reads = next(iter((quiet.get("agents") or {}).values()), {}).get("reads_since_start") or {}
        if reads:
            where += "; what one agent lists, watches and gets from its start: " + ", ".join(f"{k} {v}" for k, v in reads.items())
        goal(f"RSS growth per agent, objects ×{last['factor']} and churn", _max(a, "rss_growth_mib"), 2.0, "MiB", where)
        goal("share of the churn's bytes each agent receives", _max(a, "share"), 0.01, "", where)
        settled = last["churn"]["settled_after_s"]
        goal("CPU per 10,000 changes elsewhere", _max(a, "cpu_per_10k_s"), 0.2, "s",
             where + ("; the agents were still busy when the settle time ended (the CPU is a floor)" if settled is None
                      else f"; the agents were quiet again {settled:.0f} s after the churn began"))
    by = {}
    for row in (quiet.get("agents") or {}).values():
        for k, v in row.get("by", {}).items():
            by[k] = by.get(k, 0) + v
    reads: dict[str, int] = {}
    for row in (data.get("steady") or {}).values():
        for k, v in row.get("reads", {}).items():
            reads[k] = reads.get(k, 0) + v
    goal("steady requests per agent, quiet cluster", steady, 6.0, "/min",
         "requests in the quiet window, all agents: " + ", ".join(f"{k} {v}" for k, v in list(by.items())[:6])
         + ("; reads over the run, all agents: " + ", ".join(f"{k} {v}" for k, v in list(reads.items())[:6]) if reads else ""))
    goal("agents' writes and watch events at 5,000 nodes, over the kubelets'", extrap["agents_over_kubelets"], 0.10, "",
         f"all agents {ag.total:.0f}/s ({ag.watch_events_per_s:.0f} watch events: "
         + (f"each agent received {share or 0:.3g} change events per change elsewhere (its own Node's and pods' apart)" if per_change == "events" else
            f"every agent's bytes grow by {100 * (share or 0):.3g} % of what the churn served, counted as that share")
         + f" of {fit.cluster_changes_per_s():.0f} changes/s; {ag.writes_per_s:.0f} requests: {steady}/min each) "
         f"against the kubelets' {kub.total:.0f}/s")
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
    per_node = sum(v.get("bytes", 0) for k, v in project.items() if k in PER_NODE) / max(1, n_agents)
    at_scale = per_vpa * fit.VPAS + per_node * fit.NODES
    extrap["project_bytes_at_scale"] = int(at_scale)
    goal("project's objects in etcd at 5,000 nodes and 10,000 VPAs", round(at_scale / MIB, 1), 100.0, "MiB",
         ", ".join(f"{k} {v['count']} ({v['bytes'] / 1024:.0f} KiB)" for k, v in project.items() if k in (*PER_NODE, "vpaadmissionparams"))
         + f": {per_vpa:.0f} bytes a VPA, {per_node:.0f} a node")
    if data.get("agents"):
        s = data["agents"][-1]
        minutes = max(1e-9, s["api"]["window_s"]) / 60.0
        by_kind: dict[str, float] = {}
        for key, count in s["project_writes_by"].items():
            resource = key.split(" ", 1)[1].split("/")[0]
            by_kind[resource] = by_kind.get(resource, 0.0) + count / minutes
        keeper_min = by_kind.get("vpaadmissionparams", 0.0)
        agents_min = sum(by_kind.get(k, 0.0) for k in ("leases", "nodehistories")) / max(1, s["n"])
        writes = agents_min * fit.NODES / 60.0 + keeper_min * fit.VPAS / max(1, store.get("vpas") or 1) / 60.0
        extrap["project_writes_per_s_at_scale"] = round(writes, 1)
        extrap["agent_writes_per_min_in_window"] = {k: round(v, 1) for k, v in sorted(by_kind.items(), key=lambda x: -x[1])}
        goal("project's objects' writes at 5,000 nodes", round(writes, 1), 50.0, "/s",
             f"the keeper's VPAAdmissionParams patches {keeper_min:.0f}/min for {store.get('vpas')} VPAs (they follow every "
             f"recommendation), the agents' Leases and partials {agents_min:.1f}/min each")
    return {"fit": {k: {"intercept": v.intercept, "slope": v.slope, "r2": round(v.r2, 4), "points": pts[k]} for k, v in lines.items()},
            "extrapolation": extrap, "goals": goals}
