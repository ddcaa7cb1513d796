"""The run's results as read: the console summary, the SVG beside the results file, and the BENCHMARKS.md
section "At scale" (bench/sections renders it from bench/results/scale.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.scale import goals, rec_measure, svg

MIB = 1 << 20
analyse = goals.analyse
ROLLOUT_RESOURCES = ("pods", "pods/status", "events", "leases", "daemonsets", "controllerrevisions")


def pct(share: float) -> str:
    """A share as a percentage, small ones with their first digits."""
    return f"{100 * share:.1f} %" if share >= 0.01 or share == 0 else f"{100 * share:.2g} %"


def _v(g: dict[str, Any]) -> str:
    v = g["value"]
    if v is None:
        return "not measured"
    if g["unit"] == "":
        return pct(v)
    return f"{v:g} {g['unit']}"


def _limit(g: dict[str, Any]) -> str:
    return f"{100 * g['limit']:g} %" if g["unit"] == "" else f"{g['limit']:g} {g['unit']}"


def goal_lines(data: dict[str, Any]) -> list[str]:
    out = []
    for g in data.get("goals", []):
        out.append(f"- {g['goal']} ≤ {_limit(g)}: {_v(g)} — {'**met**' if g['met'] else '**MISSED**'}."
                   + (f" Where it goes: {g['where']}." if g.get("where") else ""))
    return out


def charts(data: dict[str, Any]) -> list[svg.Chart]:
    pts = data.get("fit", {})

    def p(k: str) -> list[tuple[float, float]]:
        return [(float(x[0]), float(x[1])) for x in pts.get(k, {}).get("points", [])]

    return [
        svg.Chart("Share of the churn's bytes, per agent", "objects elsewhere", "share (1 = all)", p("share"), 0.01, "goal 1 %"),
        svg.Chart("CPU per 10,000 changes elsewhere", "objects elsewhere", "CPU seconds", p("cpu_per_10k_s"), 0.2, "goal 0.2 s"),
        svg.Chart("RSS growth per agent", "objects elsewhere", "MiB", p("rss_growth_mib"), 2.0, "goal 2 MiB"),
        svg.Chart("API server: watch events sent", "agents", "events / s", p("watch_events_per_s")),
    ]


def write_svg(data: dict[str, Any], path: Path) -> None:
    meta = data.get("_meta") or {}
    note = f"make scale at {data.get('commit', '?')}, {meta.get('date', '?')}: points measured (median over the agents), line: least squares"
    path.write_text(svg.figure(charts(data), "kube-cgroup-agent at scale (issue 41)", note))


def summary(data: dict[str, Any]) -> list[str]:
    q = data.get("quiet") or {}
    out = ["", f"make scale ({data.get('mode')}) at {data.get('commit')}: {data.get('wall_s')} s",
           f"quiet: {q.get('per_agent_per_min')} requests/min per agent; control plane {q.get('control_plane_per_min')}/min; "
           f"keeper {q.get('keeper_per_min')}/min"]
    for s in data.get("elsewhere", []):
        a = s["agents"]
        row: dict[str, Any] = next(iter(a.values()), {})
        out.append(f"×{s['factor']}: {s['objects_total']} objects, churn {s['churn']['changes']} changes, "
                   f"{s['churn']['served_bytes'] / MIB:.1f} MiB served; an agent: share {row.get('share')}, "
                   f"cpu/10k {row.get('cpu_per_10k_s')} s, RSS +{row.get('rss_growth_mib')} MiB; settled {s['churn']['settled_after_s']}")
    for s in data.get("agents", []):
        out.append(f"N={s['n']}: {s['api']['requests_per_s']} req/s, {s['api']['watch_events_per_s']} watch events/s, "
                   f"p99 {s['api']['p99_s']}, latency {[p['latency_s'] for p in s['latency']]}")
    out += ["goals:", *goal_lines(data)]
    return out


def _table(rows: list[list[str]], head: list[str]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def _headline(d: dict[str, Any]) -> dict[str, str]:
    """One run's figures for the before/after table: at its largest factor and its largest N."""
    last = (d.get("elsewhere") or [{}])[-1]
    a = last.get("agents") or {}

    def med(k: str) -> float | None:
        vals = sorted(r[k] for r in a.values() if r.get(k) is not None)
        return vals[len(vals) // 2] if vals else None

    share, cpu, rss = med("share"), med("cpu_per_10k_s"), med("rss_growth_mib")
    lat = [p["latency_s"] for p in ((d.get("agents") or [{}])[-1].get("latency") or [])]
    quiet = d.get("quiet") or {}
    # without the recommender's requests when the run told them apart (it runs at a short interval)
    q = quiet.get("per_agent_per_min_without_recommender") or quiet.get("per_agent_per_min") or {}
    run = [r["reads_per_min"] + r["other_writes_per_min"] for r in (d.get("steady") or {}).values()]
    return {
        "run": f"{d.get('commit', '?')} ({d.get('mode', '?')}, ×{last.get('factor', '?')}, {(d.get('agents') or [{}])[-1].get('n', '?')} agents)",
        "share": "—" if share is None else pct(share),
        "cpu": "—" if cpu is None else f"{cpu:g} s",
        "rss": "—" if rss is None else f"{rss:+g} MiB",
        "steady": f"{q.get('max', '—')}/min" + (f" ({max(run):g}/min over the run)" if run else ""),
        "latency": ", ".join("none in 30 s" if v is None else f"{v:.2f} s" for v in lat) or "—",
    }


def comparison(data: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    if not before or before.get("commit") == data.get("commit"):
        return []
    rows = [[h["run"], h["share"], h["cpu"], h["rss"], h["steady"], h["latency"]] for h in (_headline(before), _headline(data))]
    return ["Before and after (bench/results/scale-before.json: the first run, before the redesign of what the agent",
            "watches; the run above):", "",
            *_table(rows, ["run", "share of the churn's bytes", "CPU / 10k changes", "RSS growth", "steady requests",
                           "own VPA -> pods/resize"]), ""]


def steady_line(data: dict[str, Any]) -> str:
    run = data.get("steady") or {}
    if not run:
        return ""
    rates = sorted(r["reads_per_min"] + r["other_writes_per_min"] for r in run.values())
    reads: dict[str, int] = {}
    for r in run.values():
        for k, v in r["reads"].items():
            reads[k] = reads.get(k, 0) + v
    window = min(r["window_s"] for r in run.values()) / 60
    return (f" Over the whole run (from a minute after each agent started, {window:.0f} minutes at least, whatever"
            f" happened around it): {rates[len(rates) // 2]:g} reads a minute per agent (max {rates[-1]:g}; all agents: "
            + ", ".join(f"{k} {v}" for k, v in list(reads.items())[:6]) + ").")


def recommender_lines(data: dict[str, Any]) -> list[str]:
    """The node recommender as the run had it and as goals.py extrapolates it (nothing for a run without)."""
    info = data.get("recommender") or {}
    ex = (data.get("extrapolation") or {}).get("recommender")
    if not info:
        return []
    text = (f"The node recommender ran in every agent (`recommender.enabled`, `recommenderInterval` {info.get('interval_s'):g} s "
            f"so that the run sees many intervals; the default is {info.get('default_interval_s', 300) / 60:g} minutes): "
            f"{info.get('vpas_per_node')} of each agent node's {info.get('vpas_on_node')} VPAs name it "
            f"({info.get('named_pods_per_node')} of its {info.get('pods_per_node')} pods), on containers whose CPU counters "
            "advance every second (bench/scale/usage.py).")
    seeded = info.get("seeded") or {}
    if seeded.get("vpas_per_node"):
        text += (f" Before the agents started, the pods of {seeded['vpas_per_node']} of those VPAs on each node were given "
                 f"{seeded['days']:g} days of history, as the node's sampler would have left it (its recommender state "
                 f"written through the agent's own code: bench/scale/README.md), the pods of the other "
                 f"{seeded.get('young_vpas_per_node')} none: the steady state of a cluster whose agents have run for days, "
                 "and a VPA's start.")
    if not ex:
        return ["", text + " It published nothing this run could measure."]
    m, big, small = ex["measured"], ex["at_110_pods_a_node"], ex["at_30_pods_a_node"]
    young = m.get("status_writes_young")
    statuses = (f"{m['status_writes']:.2f} status patches"
                + (f" a VPA with {seeded['days']:g} days of history (the steady state)" if young is not None and seeded.get("days") else ""))
    text += (f" Measured: a NodeHistory {m['history_base_bytes']:.0f} bytes and {m['entry_bytes']:.0f} a (VPA, node) entry, a "
             f"Lease {m['lease_bytes']:.0f} bytes; per interval {m['history_writes']:.2f} NodeHistory writes a node, "
             f"{m['lease_writes']:.2f} Lease writes, {statuses} and {m['lists']:.2f} LISTs a VPA"
             + (f"; a VPA with no history {young:.2f} status patches an interval{rec_measure.young_span(ex.get('young_intervals'), info.get('interval_s'))}: "
                f"{rec_measure.TRANSIENT}" if young is not None else "") + ". "
             f"At {big['nodes']:,.0f} nodes, every VPA naming it and its default interval: NodeHistories "
             f"{big['histories_bytes'] / MIB:.0f} MiB at 110 pods a node ({small['histories_bytes'] / MIB:.0f} MiB at 30, the "
             f"cluster limit of 150,000 pods), Leases {big['leases_bytes'] / MIB:.1f} MiB; writes {big['history_writes_per_s']:.1f} + "
             f"{big['lease_writes_per_s']:.1f} + {big['status_writes_per_s']:.1f} a second (NodeHistories, Lease renewals, statuses); "
             f"the holders' LISTs {big['lists_per_s']:.1f} a second, {big['list_bytes_per_s'] / MIB:.0f} MiB a second."
             + (f" Were every VPA in its first hour at once, its statuses would be {big['status_writes_young_per_s']:.1f} a second "
                f"instead of {big['status_writes_per_s']:.1f}." if big.get("status_writes_young_per_s") is not None else ""))
    return ["", text]



def rollout_lines(data: dict[str, Any]) -> list[str]:
    """The DaemonSet rollout phase (bench/scale/rollout.py), measured and at 5,000 nodes."""
    r = data.get("rollout")
    if not r:
        return []
    agents = list(r["agents"].values())
    n = max(1, r["pods_updated"])
    # what the rollout asked of each agent (its other work in the same seconds apart: the recommender's...)
    per_agent = sorted(sum(v for k, v in a["by"].items() if k.split(" ", 1)[-1] in ROLLOUT_RESOURCES) for a in agents)
    events = sorted(a["change_events"] for a in agents)
    kinds: dict[str, int] = {}
    for a in agents:
        for k, v in a["events"].items():
            if not k.startswith(("BOOKMARK", "ERROR")):
                kinds[k.split(" ", 1)[-1]] = kinds.get(k.split(" ", 1)[-1], 0) + v
    keeper_events = sum(v for k, v in r["keeper_events"].items() if not k.startswith(("BOOKMARK", "ERROR")))
    nodes = ((data.get("extrapolation") or {}).get("nodes")) or 5000
    herd = r["ds_status_writes"] / n * nodes * nodes
    return ["", f"A DaemonSet's rollout over the {r['nodes']} agent nodes (bench/scale/rollout.py: a new image; the keeper hands "
            f"out the turns, max-unavailable 1; a simulated DaemonSet controller writes its status as the pods move): "
            f"{'complete' if r['complete'] else 'NOT complete'}, {r['pods_updated']} pods in {r['took_s']} s ({r['per_pod_s']} s a pod). "
            f"Each agent received {events[0]}–{events[-1]} change events (by kind over all agents: "
            + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=lambda x: -x[1])) + "; no DaemonSet: none watches it) "
            f"and sent {per_agent[0]}–{per_agent[-1]} requests for it (its pod, its status, Events, the DaemonSet and its revisions; its slot Lease {sum(a['slot_requests'] for a in agents) / n:.1f} a pod, "
            f"{r['slot_lease_writes'] / n:.1f} of them writes); the keeper {r['keeper_requests']} requests "
            f"({', '.join(f'{k} {v}' for k, v in list(r['keeper_by'].items())[:4])}) and {keeper_events} change events received. "
            f"The DaemonSet's status changed {r['ds_status_writes']} times: with every node watching it (before this design) each "
            f"change reached every agent — over a rollout of {nodes:,} nodes about {herd:,.0f} watch events, now none; per pod "
            f"the cost is constant: at {nodes:,} nodes about {nodes * sum(per_agent) / max(1, len(per_agent)) / 1:,.0f} agent requests "
            f"and {nodes * r['keeper_requests'] / n:,.0f} of the keeper's for the whole rollout."]


def markdown(data: dict[str, Any], before: dict[str, Any] | None = None) -> list[str]:
    meta = data.get("_meta") or {}
    q = data.get("quiet") or {}
    rq = q.get("recommender_per_agent_per_min")
    rec_quiet = (f" (the recommender's, at its {rq.get('interval_s'):g} s interval: median {rq.get('median')}, max {rq.get('max')};"
                 f" without them: max {(q.get('per_agent_per_min_without_recommender') or {}).get('max')})") if rq else ""
    lines = [
        "## 12. At scale (`make scale`)", "",
        f"Measured {meta.get('date', '?')} at commit {data.get('commit', '?')}; command: `{meta.get('command', 'make scale')}` "
        f"({data.get('wall_s', 0) / 60:.0f} minutes; bench/scale/README.md). The kit's real v1.36 etcd and kube-apiserver",
        "(no controllers), simulated nodes (Node objects and pods with a kubelet's status), and real agent processes, one per",
        "agent node, each installed as `deploy/` installs it (its ClusterRoles, the admission policies, a token bound to its pod",
        "on its node) with 110 pods of its own and their VPAs, on a cgroup tree of its own; the keeper beside them. Bytes and",
        "watch events are counted by a proxy per agent (it ends the agent's TLS and sees what it forwards), requests by the",
        "API server's audit log.",
        "", "![At scale](bench/results/scale.svg)", "",
        f"Quiet cluster ({q.get('window_s')} s, nothing changing): requests per agent per minute median "
        f"{(q.get('per_agent_per_min') or {}).get('median')}, max {(q.get('per_agent_per_min') or {}).get('max')}{rec_quiet}; "
        f"the control plane's own {q.get('control_plane_per_min')}/min (the simulated kubelets' Leases besides: "
        f"{q.get('simulated_kubelets_per_min')}/min); the keeper {q.get('keeper_per_min')}/min." + steady_line(data), "",
        "Objects elsewhere (on no agent's node) and one round of their churn (every object changed once, VPA statuses",
        "rewritten as the recommender does, Deployments rolled, VPAs re-created, pods elsewhere replaced, Events):", "",
    ]
    rows = []
    for s in data.get("elsewhere", []):
        a = s["agents"]
        med = {k: sorted(r[k] for r in a.values() if r.get(k) is not None)
               for k in ("share", "cpu_per_10k_s", "rss_growth_mib", "rss_mib", "change_events")}
        mid = {k: (v[len(v) // 2] if v else None) for k, v in med.items()}
        rows.append([f"×{s['factor']}", f"{s['objects_total']:,}", f"{s['churn']['changes']:,}",
                     f"{s['churn']['served_bytes'] / MIB:.1f} MiB",
                     ("—" if mid["share"] is None else pct(mid["share"]))
                     + ("" if mid["change_events"] is None else f" ({mid['change_events']:,} change event{'' if mid['change_events'] == 1 else 's'})"),
                     f"{mid['cpu_per_10k_s']}", f"{mid['rss_mib']} MiB (+{mid['rss_growth_mib']})",
                     "still busy" if s["churn"]["settled_after_s"] is None else f"{s['churn']['settled_after_s']:.0f} s"])
    lines += _table(rows, ["factor", "objects elsewhere", "changes", "served (one watcher of all)", "an agent received",
                           "agent CPU s / 10k changes", "agent RSS (growth)", "agents quiet again after"])
    lines += ["", "The API server with N agents, during a window of churn with the recommender rewriting VPA statuses each minute;",
              "latency: an agent's own VPA recommendation changed -> its `pods/resize` PATCH received by the API server:", ""]
    rows = []
    for s in data.get("agents", []):
        api = s["api"]
        p99 = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in api["p99_s"].items() if not k.startswith(("WATCH", "CONNECT")))
        lat = [p["latency_s"] for p in s["latency"]]
        rows.append([str(s["n"]), f"{api['requests_per_s']}", f"{api['watch_events_per_s']}",
                     ", ".join(f"{k} {v}" for k, v in list(api["watchers_by_kind"].items())[:3]), p99 or "—",
                     ", ".join("none in 30 s" if v is None else f"{v:.2f} s" for v in lat)])
    lines += _table(rows, ["agents", "requests/s", "watch events/s", "watchers (most)", "p99 by verb", "own VPA -> pods/resize"])
    keeper = [(s["n"], s["keeper"], s["changes"]) for s in data.get("agents", []) if s.get("keeper")]
    if keeper:
        lines += ["", "The keeper (one per cluster, it watches every VPA, LimitRange and workload) in the same windows: "
                  + "; ".join(f"{n} agents: {k['cpu_s']:.1f} s of CPU for {c:,} changes, {k['bytes_down'] / MIB:.1f} MiB received"
                              + (f" ({sum(v for e, v in k['events'].items() if not e.startswith('BOOKMARK')):,} change events)"
                                 if k.get("events") else "") + f", RSS {k['rss_mib']:.0f} MiB" for n, k, c in keeper) + "."]
    ex = data.get("extrapolation") or {}
    lines += ["", f"Extrapolated to {ex.get('nodes', 5000):,} nodes × 110 pods and {ex.get('vpas', 10000):,} VPAs "
              f"({ex.get('objects_elsewhere', 0):,} objects elsewhere at the harness's mix; changes elsewhere at their floor, "
              f"{ex.get('cluster_changes_per_s')}/s: every VPA's status rewritten once a minute): all agents "
              f"{ex.get('agents', {}).get('writes_per_s')} requests/s (their steady rate) and {ex.get('agents', {}).get('watch_events_per_s')} "
              "watch events/s (the change events one agent received per change elsewhere, its own Node's and pods' apart); "
              f"the kubelets (Lease every 10 s, status every 5 min, one watcher each) {ex.get('kubelets', {}).get('writes_per_s')} writes/s "
              f"and as many watch events; RSS growth per agent {ex.get('rss_growth_mib_at_scale')} MiB; "
              f"CPU summed over the nodes per change elsewhere {ex.get('cpu_s_per_change_summed_over_nodes')} s.",
              *recommender_lines(data), *rollout_lines(data),
              "", "Goals (issue 41):", *goal_lines(data), "", *comparison(data, before)]
    return lines
