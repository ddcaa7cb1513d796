"""The phases of one run, each returning plain data for bench/results/scale.json:

(a) quiet: the agents with their own pods and VPAs only, nothing changing: requests per agent per minute
    (audit log), the recommender's apart, beside the control plane's own rate; the agents' idle CPU and RSS
    (the baselines, the recommender's sampling included);
(b) elsewhere: the big cluster's objects loaded at each scale factor, then one round of churn: each
    agent's RSS growth, its share of the bytes the churn served, CPU per 10,000 changes elsewhere;
(c) agents: N agents, a window of churn at a steady rate with the recommender rewriting VPAs: the API
    server's side (requests/s, watch events and bytes by kind, watchers, p99 by verb);
(d) latency, during (c)'s churn: an agent's own VPA recommendation changed -> that agent's `pods/resize`
    PATCH received by the API server (audit log).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from bench.scale import metrics
from bench.scale.audit import WRITES, split_recommender, tally, tally_recommender
from bench.scale.churn import Recommender, now_iso
from bench.scale.harness import Harness, Snapshot, say
from bench.scale.objects import own_recommendation
from bench.scale.scenario import elsewhere, own_ns

MIB = 1 << 20
SKIP_VERBS = ("WATCH", "CONNECT", "WATCHLIST")


def _kind_of(d: dict[str, str]) -> str:
    return d.get("kind") or d.get("resource") or "?"


def api_window(a: Snapshot, b: Snapshot) -> dict[str, Any]:
    """The API server between two scrapes: rates, watch events and bytes by kind, watchers, p99."""
    dt = max(1e-9, b.at - a.at)
    req = metrics.by(metrics.delta(b.api, a.api, "apiserver_request_total"), "verb", "resource")
    events = metrics.delta(b.api, a.api, "apiserver_watch_events_total")
    sizes = metrics.delta(b.api, a.api, "apiserver_watch_events_sizes_sum")
    ev_kind: dict[str, float] = {}
    for labels, v in events.items():
        ev_kind[_kind_of(dict(labels))] = ev_kind.get(_kind_of(dict(labels)), 0.0) + v
    by_kind: dict[str, float] = {}
    for labels, v in sizes.items():
        by_kind[_kind_of(dict(labels))] = by_kind.get(_kind_of(dict(labels)), 0.0) + v
    watchers = {_kind_of(dict(k)): v for k, v in b.api.get("apiserver_registered_watchers", {}).items()}
    if not watchers:
        watchers = {r: v for (verb, r), v in metrics.by(b.api.get("apiserver_longrunning_requests", {}), "verb", "resource").items()
                    if verb == "WATCH"}
    buckets = metrics.delta(b.api, a.api, "apiserver_request_duration_seconds_bucket")
    p99 = metrics.histogram_quantiles(buckets, 0.99, "verb", "scope", where=lambda d: d.get("verb") not in SKIP_VERBS)
    by_resource = metrics.histogram_quantiles(buckets, 0.99, "verb", "resource", "subresource",
                                              where=lambda d: d.get("verb") not in SKIP_VERBS)
    slowest = sorted(((q, f"{v} {r}{'/' + sub if sub else ''}") for (v, r, sub), q in by_resource.items() if q is not None),
                     reverse=True)[:8]
    return {
        "window_s": round(dt, 1),
        "requests_per_s": round(sum(req.values()) / dt, 2),
        "requests_per_s_by": {f"{v} {r}": round(n / dt, 3) for (v, r), n in sorted(req.items(), key=lambda x: -x[1])[:15]},
        "watch_events_per_s": round(sum(ev_kind.values()) / dt, 2),
        "watch_events_per_s_by_kind": {k: round(v / dt, 2) for k, v in sorted(ev_kind.items(), key=lambda x: -x[1]) if v},
        "watch_bytes_by_kind": {k: int(v) for k, v in sorted(by_kind.items(), key=lambda x: -x[1]) if v},
        "watchers_by_kind": {k: int(v) for k, v in sorted(watchers.items(), key=lambda x: -x[1]) if v},
        "p99_s": {f"{v} {s}".strip(): round(q, 4) for (v, s), q in sorted(p99.items()) if q is not None},
        "p99_slowest_s": {name: round(q, 4) for q, name in slowest},
    }


def events(a: Snapshot, b: Snapshot, name: str) -> dict[str, int]:
    """The watch events the proxy saw the API server send to `name` between two snapshots, by type and kind."""
    before = a.events.get(name, {})
    return {k: v - before.get(k, 0) for k, v in sorted(b.events.get(name, {}).items()) if v - before.get(k, 0)}


def change_events(ev: dict[str, int]) -> int:
    return sum(v for k, v in ev.items() if not k.startswith(("BOOKMARK", "ERROR")))


def per_agent(a: Snapshot, b: Snapshot, names: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for n in names:
        if n in a.usage and n in b.usage and n in a.bytes:
            ev = events(a, b, n)
            out[n] = {"bytes_down": b.bytes[n][1] - a.bytes[n][1], "bytes_up": b.bytes[n][0] - a.bytes[n][0],
                      "cpu_s": round(b.usage[n].cpu_s - a.usage[n].cpu_s, 2), "rss_mib": round(b.usage[n].rss_bytes / MIB, 1),
                      "events": ev, "change_events": change_events(ev)}
    return out


def quiet(h: Harness, seconds: float) -> dict[str, Any]:
    assert h.audit is not None
    # past the recommender's first intervals: the NodeHistories created, the Leases taken, the first
    # statuses written (and what the actuator makes of them), none of which recurs
    first = max((t for n, t in h.started.items() if n != "keeper"), default=time.time())
    time.sleep(max(0.0, first + 2.5 * h.recommender_interval_s - time.time()))
    settled = h.settle(180.0)
    a = h.snapshot()
    time.sleep(seconds)
    b = h.snapshot()
    time.sleep(1.0)  # the audit log's last lines
    dt = b.at - a.at
    agents: dict[str, Any] = {}
    for n, row in per_agent(a, b, sorted(h.agents)).items():
        recs = h.audit.records(a.at, b.at, f"agent:{n}")
        rec, rest = split_recommender(recs)
        since_start = [r for r in h.audit.records(0.0, b.at, f"agent:{n}") if r.verb in ("list", "watch", "get")]
        agents[n] = {**row, "requests": len(recs), "per_min": round(len(recs) * 60 / dt, 2), "by": tally(recs),
                     "per_min_without_recommender": round(len(rest) * 60 / dt, 2), "by_without_recommender": tally(rest),
                     "recommender_per_min": round(len(rec) * 60 / dt, 2), "recommender": tally_recommender(rec),
                     "idle_cpu_share": round(row["cpu_s"] / dt, 4), "reads_since_start": tally(since_start)}
    others = h.audit.records(a.at, b.at, "other:")
    keeper = h.audit.records(a.at, b.at, "keeper")
    users: dict[str, int] = {}
    for r in others:
        users[r.who[6:]] = users.get(r.who[6:], 0) + 1
    rates = [v["per_min"] for v in agents.values()]
    without = [v["per_min_without_recommender"] for v in agents.values()]
    rec_rates = [v["recommender_per_min"] for v in agents.values()]
    return {
        "window_s": round(dt, 1), "settled_after_s": settled, "agents": agents,
        "per_agent_per_min": {"median": statistics.median(rates), "max": max(rates)},
        "per_agent_per_min_without_recommender": {"median": statistics.median(without), "max": max(without)},
        "recommender_per_agent_per_min": {"median": statistics.median(rec_rates), "max": max(rec_rates),
                                          "interval_s": h.recommender_interval_s},
        "control_plane_per_min": round(len(others) * 60 / dt, 2),
        "control_plane_by_user": {u: round(c * 60 / dt, 2) for u, c in sorted(users.items(), key=lambda x: -x[1])},
        "simulated_kubelets_per_min": round(6.0 * (len(h.sims) + len(h.other_nodes)), 1),
        "keeper_per_min": round(len(keeper) * 60 / dt, 2), "keeper_by": tally(keeper),
        "api": api_window(a, b),
    }


def _key(o: dict[str, Any]) -> tuple[str, str, str]:
    return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])


def elsewhere_step(h: Harness, factor: int, previous: int, rate: float, settle_s: float,
                   baseline: dict[str, Any]) -> dict[str, Any]:
    """Load the objects of `factor` (what `previous` did not have), then churn every one of them once."""
    els = elsewhere(h.base, factor, h.other_nodes)
    had = elsewhere(h.base, previous, h.other_nodes) if previous else None
    old = {_key(o) for o in [*had.namespaces, *had.objects, *had.pods]} if had else set()
    new_ns = [o for o in els.namespaces if _key(o) not in old]
    new_objs = [o for o in els.objects if _key(o) not in old]
    new_pods = [o for o in els.pods if _key(o) not in old]
    names = sorted(h.agents)
    say(f"×{factor}: loading {len(new_objs)} objects and {len(new_pods)} pods elsewhere ...")
    a = h.snapshot()
    created = h.loader.objects([*new_ns, *new_objs])
    pods = h.loader.pods(new_pods, now_iso(), first_ip=500_000 + len(h.cluster.pods))
    h.cluster.add(els, [o for o in created if o.get("kind") != "ServiceAccount"], pods)
    load_s = time.time() - a.at
    load_settled = h.settle(settle_s)
    b = h.snapshot()
    k = factor
    churn = h.churn(rate)
    ops = churn.plan(k)
    say(f"×{factor}: churn of {len(ops)} writes at {rate:.0f}/s ...")
    c = h.snapshot()
    took = churn.run(ops)
    settled = h.settle(settle_s)
    d = h.snapshot()
    changes = d.changes - c.changes
    served = d.bytes["reference"][1] - c.bytes["reference"][1]
    dt = d.at - c.at
    agents = {}
    assert h.audit is not None
    for n, row in per_agent(c, d, names).items():
        base = baseline["agents"].get(n, {})
        idle = base.get("idle_cpu_share", 0.0)
        cpu = max(0.0, row["cpu_s"] - idle * dt)
        idle_bytes = base.get("bytes_down", 0) / max(1e-9, baseline["window_s"]) * dt  # bookmarks, reconnects
        marginal = max(0.0, row["bytes_down"] - idle_bytes)
        agents[n] = {**row, "share": round(row["bytes_down"] / served, 6) if served else None,
                     "share_marginal": round(marginal / served, 6) if served else None,
                     "events_per_change": round(row["change_events"] / changes, 6) if changes else None,
                     "requests": tally(h.audit.records(c.at, d.at, f"agent:{n}")),
                     "cpu_churn_s": round(cpu, 2), "cpu_per_10k_s": round(cpu / changes * 1e4, 2) if changes else None,
                     "rss_growth_mib": round(row["rss_mib"] - baseline["agents"].get(n, {}).get("rss_mib", row["rss_mib"]), 1),
                     "load_bytes_down": b.bytes[n][1] - a.bytes[n][1] if n in a.bytes else None}
    objects = {kind: els.count(kind) for kind in ("Deployment", "ReplicaSet", "VerticalPodAutoscaler", "StatefulSet",
                                                 "DaemonSet", "LimitRange")}
    return {
        "factor": factor, "objects": objects, "objects_total": sum(objects.values()) - objects["Deployment"],
        "namespaces": len(els.namespaces), "pods_elsewhere": len(h.cluster.pods),
        "load": {"s": round(load_s, 1), "settled_after_s": load_settled, "served_bytes": b.bytes["reference"][1] - a.bytes["reference"][1]},
        "churn": {"changes": changes, "pod_writes_elsewhere": d.pods - c.pods, "write_s": round(took, 1),
                  "window_s": round(dt, 1), "settled_after_s": settled, "served_bytes": served,
                  "reference_events": dict(h.reference.events) if h.reference else {}},
        "agents": agents,
        "api": api_window(c, d),
    }


def probe(h: Harness, node: str, vpa: str, containers: tuple[str, ...], k: int, timeout_s: float) -> dict[str, Any]:
    """Change one of the node's own VPA recommendations (the app container's CPU, outside the current
    request's bounds); the seconds until that node's agent PATCHed pods/resize."""
    assert h.audit is not None
    cpu = 500 if k % 2 == 0 else 250
    body = own_recommendation(containers, cpu)
    url = f"/apis/autoscaling.k8s.io/v1/namespaces/{own_ns(node)}/verticalpodautoscalers/{vpa}/status"
    t0 = time.time()
    h.client.call("PATCH", url, body, "application/merge-patch+json")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = h.audit.first(f"agent:{node}", "patch", "pods/resize", t0)
        if r is not None:
            return {"node": node, "vpa": vpa, "cpu_milli": cpu, "latency_s": round(r.at - t0, 3)}
        time.sleep(0.05)
    return {"node": node, "vpa": vpa, "cpu_milli": cpu, "latency_s": None}


def agents_step(h: Harness, n: int, window_s: float, rate: float, probes: int, settle_s: float,
                probed: dict[tuple[str, str], int], last: bool = True) -> dict[str, Any]:
    """N agents running; a window of churn at `rate` with the recommender; latency probes during it."""
    say(f"{n} agents: starting ...")
    ready = h.start_agents(n)
    start_settled = h.settle(settle_s)
    churn = h.churn(rate)
    ops = churn.plan(10 + n, vpas=False)[: int(rate * window_s)]
    rec = Recommender(churn)
    stop = threading.Event()
    say(f"{n} agents: {window_s:.0f} s of churn at {rate:.0f}/s with the recommender, {probes} latency probes ...")
    a = h.snapshot()
    rec.start()
    runner = threading.Thread(target=churn.run, args=(ops, stop), daemon=True)
    runner.start()
    results = []
    names = sorted(h.agents)
    for i in range(probes):
        time.sleep(window_s / (probes + 1) * (1 if i == 0 else 0.5))
        node = names[i % len(names)]
        vpa, containers = h.owns[node].vpas[(i // len(names)) % len(h.owns[node].vpas)]
        k = probed.get((node, vpa), 0)
        probed[(node, vpa)] = k + 1
        results.append(probe(h, node, vpa, containers, k, 30.0))
    runner.join(max(0.0, a.at + window_s + 60 - time.time()))
    stop.set()
    rec.stop.set()
    rec.join(10)
    b = h.snapshot()
    time.sleep(1.0)
    assert h.audit is not None
    writes = [r for r in h.audit.records(a.at, b.at) if r.verb in WRITES and (r.who.startswith("agent:") or r.who == "keeper")]
    keeper_writes = [r for r in writes if r.who == "keeper"]
    rows = per_agent(a, b, names)
    settled = h.settle(settle_s) if last else None  # else the next step's start waits
    return {
        "n": n, "ready_s": {k2: round(v, 1) for k2, v in ready.items()}, "settled_before_s": start_settled,
        "changes": b.changes - a.changes, "recommender_rounds": rec.rounds,
        "agents_bytes_down": sum(r["bytes_down"] for r in rows.values()),
        "agents_change_events": sum(r["change_events"] for r in rows.values()),
        "agents_events": {k: sum(r["events"].get(k, 0) for r in rows.values())
                          for k in sorted({k for r in rows.values() for k in r["events"]})},
        "agents_cpu_s": round(sum(r["cpu_s"] for r in rows.values()), 1),
        "agents_rss_mib": {"median": statistics.median(r["rss_mib"] for r in rows.values()),
                           "max": max(r["rss_mib"] for r in rows.values())} if rows else {},
        "keeper": per_agent(a, b, ["keeper"]).get("keeper"),
        "project_writes_per_min": round(len(writes) * 60 / max(1e-9, b.at - a.at), 1),
        "keeper_writes_per_min": round(len(keeper_writes) * 60 / max(1e-9, b.at - a.at), 1),
        "project_writes_by": tally(writes),
        "recommender_writes_by": tally_recommender(w for w in writes if w.who.startswith("agent:")),
        "latency": results, "settled_after_s": settled,
        "api": api_window(a, b),
    }
