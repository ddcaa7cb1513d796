"""Figures 8 and 11, measured by `make e2e-k8s` on a real cluster rather than by `make bench`: the agent
beside a real kubelet on two nodes, and a `pods/resize` to the container's cgroup against the kubelet's."""

from __future__ import annotations

import statistics
from typing import Any

from bench.sections.units import verdict


def _production_nodes(d: dict[str, Any]) -> list[str]:
    """The two-node cluster: start time, the oracle's counts, the five minutes beside the kubelet."""
    lines: list[str] = []
    oracle = d.get("oracle") or {}
    if oracle:
        lines += ["", "Oracle (`tests/e2e_k8s/test_production_nodes.py`): every value the kubelet, the runtime and systemd hold,",
                  "against `kube-cgroup-agent diff --all` run in the agent's pod on that node:", "",
                  "| node | values compared | pods | resizes | disagreements | systemd properties compared | disagreements |",
                  "|---|---|---|---|---|---|---|"]
        reloads = {node: o for node, o in oracle.items() if node.endswith(" daemon-reload")}
        for node, o in sorted(oracle.items()):
            if node in reloads:
                continue
            props = o.get("unit_properties")
            lines.append(f"| {node} | {o['compared']} | {o['pods']} | {o['resizes']} | {o['disagreements']} | "
                         f"{'—' if props is None else props} | {'—' if props is None else o['unit_property_disagreements']} |")
        for node, o in sorted(reloads.items()):
            lines += ["", f"{node.removesuffix(' daemon-reload')} after `systemctl daemon-reload` (systemd re-applies every unit's "
                      f"properties): {o['compared']} values compared, {o['disagreements']} disagreements; {o.get('two_forms', 0)} CPU "
                      f"quotas that are not a whole percent (two forms: exact as runc {o.get('runc', '?')} writes it, rounded "
                      f"to 10 ms as systemd keeps it), {o.get('exact_before', 0)} of them exact before the reload."]
    beside = d.get("beside") or {}
    if beside:
        lines += ["", "Beside the kubelet (`tests/e2e_k8s/test_beside_both_nodes.py`): arrivals, resizes up and down and",
                  "departures on both nodes through the kubelet's 60 s QoS passes, and on the systemd node daemon-reloads",
                  "and a containerd restart. The tier's move is timed from the API call (pod created, `pods/resize`",
                  "patched, pod deleted) to the Burstable tier's CPU file reading a new value on the node (read over",
                  "`cluster.sh exec`, which adds its own round trip: about 0.1 s on the host, more through the guest's",
                  "channel). Without the agent that value moves at the kubelet's next QoS pass: up to 60 s, 30 s on",
                  "average (31–54 s observed after a resize, kubelet-observed.md).", "",
                  "| node | events | tier moved, median / max | fights | kubelet-owned writes | reverted after daemon-reload | agent RSS | agent CPU |",
                  "|---|---|---|---|---|---|---|---|"]
        for node, b in sorted(beside.items()):
            t = sorted(b["tier_move_s"]) or [0.0]
            lines.append(f"| {node} | {b['events']} ({b['daemon_reloads']} reloads, {b['containerd_restarts']} containerd restarts) | "
                         f"{statistics.median(t):.2f} s / {t[-1]:.2f} s | {b['fights']:.0f} | {b['kubelet_owned_writes']} | "
                         f"{b['reverted_after_daemon_reload']} | {b['agent_rss_mib']:.0f} MiB | {b['agent_cpu_pct']:.2f} % of a core |")
        worst = max(b["agent_rss_mib"] for b in beside.values())
        lines += ["", f"Goal: the DaemonSet pod under 80 MiB on a near-empty node — {verdict(worst < 80)} ({worst:.0f} MiB at",
                  "most). What the image's process holds before any pod (the same imports measured on this host without",
                  "the development packages): Python and psutil 13.4 MiB, the agent's modules that `run` loads +32.9 (gRPC",
                  "and protobuf, structlog, prometheus_client), the `kubernetes` package +17.5 (its ApiClient,",
                  "configuration loading and urllib3): 64 MiB. The client's typed API classes and their models (+26 MiB",
                  "before) are never loaded: every call goes through the ApiClient (`agent.infra.apiserver`; a test",
                  "holds the daemon to it). The rest is the watch caches, the allocator's arenas of about twenty threads",
                  "and the first pass's fragmentation."]
    qos = d.get("v2_resize_vs_qos_pass") or []
    if qos:
        lines += ["", "On the v2 node, against the kubelet's own next QoS pass: a `pods/resize` of a Burstable pod timed on the",
                  "guest's clock to the agent's write of `kubepods-burstable.slice/cpu.weight` (an upper bound: one",
                  "exec round trip into the TCG guest included), and to the kubelet's next QoS pass, read from its",
                  "journal (`--vmodule qos_container_manager_linux=4`: one line per pass). A resize triggers no pass",
                  "of the kubelet's; its periodic one runs every 60 s.", "",
                  "| resize to | the agent's tier write | the kubelet's next QoS pass |", "|---|---|---|"]
        lines += [f"| {r['cpu_milli']}m | {r['agent_s']:.2f} s | {r['kubelet_next_pass_s']:.1f} s |" for r in qos]
    return lines


def e2e_k8s(d: dict[str, Any]) -> list[str]:
    ms = sorted(d["resize_to_tier_ms"])
    return [
        "## 8. Beside a real kubelet (`make e2e-k8s`)",
        "",
        f"Measured {d['date']}; command: `make e2e-k8s` (tests/e2e_k8s, outside CI). Kubelet {d['kubelet']} with",
        "containerd 1.6 on two nodes: this host (cgroup v1, cgroupfs driver) and a qemu guest (cgroup v2, systemd",
        f"driver, TCG: no KVM here); `cluster.sh up` took {d['cluster_up_s']:.0f} s from built binaries and a cached guest image.",
        "The agent runs as its DaemonSet (deploy/overlays/realk8s), from its image, with only deploy/'s RBAC.",
        *_production_nodes(d),
        "",
        "On the cgroup v1 node, timed: from the start of `kubectl patch --subresource resize` (a Burstable pod's CPU request) to the",
        "Burstable tier's `cpu.shares` reading the new value, written by the agent once the kubelet reported",
        f"its allocation. {len(ms)} resizes: median {statistics.median(ms):.0f} ms (min {ms[0]:.0f}, max {ms[-1]:.0f}).",
        "The kubelet itself brings the tier there at its next QoS pass, every 60 s (kubelet-observed.md: 31–54 s",
        "stale). Drift counters stay 0: the agent never wrote a value the kubelet owns.",
        *(
            [
                "",
                "VPA in place: from the start of `kubectl patch vpa --subresource status` (a recommendation the",
                f"updater would act on) to the container's `cpu.cfs_quota_us` written by the kubelet: {d['vpa_to_cgroup_ms']:.0f} ms",
                "(the agent's decision, its pods/resize patch, the kubelet's actuation). The kubelet's own resize",
                "latency for a `kubectl patch --subresource resize` on this machine kind: 66–160 ms to the write",
                "(kubelet-observed.md); the VPA updater acts once a minute.",
            ]
            if "vpa_to_cgroup_ms" in d
            else []
        ),
        *(
            [
                "",
                "One recommendation from two nodes (`test_recommender_two_nodes.py`): a Deployment with a replica on each",
                "node and a VPA naming the node recommender; both agents publish their partial histories, the Lease's",
                f"holder writes the merged status (recommenderInterval {d['recommender']['interval_s']:.0f} s, Lease "
                f"{d['recommender']['lease_s']} s). The holder's agent pod deleted: the other node held the Lease after",
                f"{d['recommender']['takeover_s']:.1f} s (the deleted agent gives its Leases up at SIGTERM; the other takes over at its",
                f"next step), and none of {d['recommender']['samples']} samples of the VPA's status (every 0.5 s) lacked a recommendation.",
            ]
            if "recommender" in d
            else []
        ),
        *(
            [
                "",
                "Graceful in-place update: a StatefulSet of two, a sidecar's image changed — both pods updated in place by",
                f"the agent in {d['sts_in_place_s']:.1f} s (web-1 then web-0, 1 s grace each, the app containers untouched, the",
                "pod UIDs kept); the sidecar was down (its old container's end to its new one's start, as the kubelet",
                "reports them, 1 s resolution) " + ", ".join(f"{x:.0f} s" for x in d.get("sts_sidecar_down_s", [])) + ". An env change",
                f"then recreated both in {d['sts_recreate_s']:.1f} s (every container restarted, new pod UIDs).",
                *(
                    [
                        "Requests the API server served (apiserver_request_total, watches excluded, 5 s of quiet before and",
                        f"after each): in place {d['sts_in_place_api_requests']:.0f}, recreated {d['sts_recreate_api_requests']:.0f} — everyone's,",
                        "the agent's, the controllers', the scheduler's and the kubelet's; the cluster's own background included.",
                    ]
                    if "sts_in_place_api_requests" in d
                    else []
                ),
            ]
            if "sts_in_place_s" in d
            else []
        ),
        *_across_nodes(d),
        *_reactions(d.get("reactions")),
        *(
            [
                "",
                "VPA for pod-level resources (`test_vpa_pod_level.py`): a two-container pod with only `spec.resources` and a VPA",
                "that opts in, its pod-level recommendation in the annotation; from the VPA's creation to the pod cgroup's CPU",
                "limit written by the kubelet after the agent's `pods/resize` of `spec.resources`: "
                + ", ".join(f"{n} {ms / 1000:.2f} s" for n, ms in sorted(d["pod_level_vpa_to_cgroup_ms"].items()))
                + " (the VPA found through the node's watch, the decision, the resize, the kubelet's actuation); the pod",
                "cgroup and the tiers then as `diff --all` computes them (0 disagreements)"
                + ("; the Burstable tier's CPU share, written by the agent, moved "
                   + ", ".join(f"{n} {ms / 1000:.2f} s ({_beside(ms, d['pod_level_vpa_to_cgroup_ms'].get(n))})"
                               for n, ms in sorted(d["pod_level_tier_ms"].items()))
                   + " after the VPA's change (both files in one read of the node, 50 ms after the last)"
                   if d.get("pod_level_tier_ms") else "")
                + ", mode Off left alone, and the next",
                "pod created with the recommendation by the admission policy. A pod holding 150 MiB in its tmpfs: the panic",
                "button held a 50Mi recommendation back; released, the pod-level memory limit went down from 400Mi and stopped",
                "above what the pod cgroup held. A pod setting both levels: the pod level took the pod-level recommendation",
                "and the container with resources of its own its container recommendation in one resize (AEP-7571 option 2),",
                "the container without resources got none; a LimitRange type Pod max CPU 500m capped a 400m recommendation",
                "(ratio 2) at 250m, limit 500m; the node recommender published podRecommendations from both nodes' pod cgroups.",
            ]
            if "pod_level_vpa_to_cgroup_ms" in d
            else []
        ),
        "",
    ]


def _beside(tier_ms: float, pod_ms: float | None) -> str:
    """When the tier moved, said against the pod cgroup's limit read in the same probes."""
    if pod_ms is None:
        return "the pod cgroup's limit not timed"
    if tier_ms == pod_ms:
        return "in the same read as the pod cgroup's limit"
    return f"{abs(tier_ms - pod_ms) / 1000:.2f} s {'before' if tier_ms < pod_ms else 'after'} the pod cgroup's limit"


def _reactions(r: dict[str, Any] | None) -> list[str]:
    """Reactions in place on both nodes (tests/e2e_k8s/test_vpa_reactions.py; docs/vpa-reactions.md)."""
    if not r:
        return []
    cpu, oom = r["cpu"], r["oom"]
    lines = ["", "Reactions in place (`test_vpa_reactions.py`, `vpa.react` as shipped): a container at its 200m limit with",
             f"one busy thread in bursts ({r['bursty_s'] / 60:.0f} minutes of 20 s busy, 40 s idle; maxAllowed 600m); timed from the",
             "test's start of the first burst. VPA upstream has no throttling signal: its recommender and updater run once",
             "a minute, and its answer is an eviction. A container growing to ~80 MB under a 64Mi memory limit (request 64Mi),",
             "OOM-killed: VPA's OOM bump, in place (the kill timed from the 0.5 s poll that first saw it in the pod status).",
             "", "| node | starved → spec raised | → quota written | CPU limits over the bursts | lowered / oscillations |"
             " back after the load | OOM kills | kill → memory bumped | memory limits | evictions |", "|---|---|---|---|---|---|---|---|---|---|"]
    for node in sorted(cpu):
        c, o = cpu[node], oom.get(node, {})
        limits = " → ".join(f"{m}m" for m in [200, *c["cpu_limits_during"]])
        mem = " → ".join(f"{m >> 20}Mi" for m in o.get("memory_limits", []) if m)
        lines.append(f"| {node} | {c['raise_spec_s']:.1f} s | {c['raise_cgroup_s']:.1f} s | {limits} | {c['lowered_during']} / "
                     f"{c['oscillations']} | {c['restored_after_stop_s']:.0f} s | {o.get('kills', '?')} | "
                     f"{o.get('bump_after_kill_s', float('nan')):.1f} s | {mem} | {0 if o.get('pod_uids') == 1 else '?'} |")
    return lines


def _across_nodes(d: dict[str, Any]) -> list[str]:
    """Rollouts across both nodes, the agent's own upgrade and the cluster faults' convergence."""
    lines: list[str] = []
    if "sts4_in_place_s" in d:
        lines += [
            "",
            "Across both nodes (`test_rollout_two_nodes.py`): a StatefulSet of 4, two pods a node, a new sidecar image —",
            f"in place in {d['sts4_in_place_s']:.1f} s (" + ", ".join(f"{p} on {n}" for p, n in d.get("sts4_order", [])) + ";",
            "15 s of it the partition held at 2), most unavailable at once "
            f"{d['sts4_max_unavailable'][0]} (from a watch of the pods); an env change then recreated",
            f"them in {d['sts4_recreate_s']:.1f} s, same order, most unavailable at once {d['sts4_max_unavailable'][1]}."
            " API requests the whole cluster served per pod",
            f"(apiserver_request_total, watches excluded, the idle cluster's {d['background_requests_per_s']:.1f} requests/s",
            f"taken off): in place {d['sts4_in_place_api_requests_per_pod']:.0f}, recreated {d['sts4_recreate_api_requests_per_pod']:.0f}.",
        ]
    if "upgrade_s" in d:
        rollout, resizes = d["upgrade_in_flight"]
        lines += [
            "",
            "The agent's own upgrade (`test_agent_upgrade.py`): `kubectl set image` on its DaemonSet to a second build,",
            f"both nodes' agents Ready from it {d['upgrade_s']:.1f} s later (one node at a time, maxUnavailable 1; the",
            "guest's agent starts slowly under TCG); 3 s into it a rollout of "
            f"{rollout} pods and {resizes} VPA resizes began ({d.get('upgrade_in_flight_after', ['?', '?'])[0]} and "
            f"{d.get('upgrade_in_flight_after', ['?', '?'])[1]} still to do when the upgrade completed); every pod at its spec and decision",
            f"{d['upgrade_converge_s']:.1f} s after that; nothing lost, reverted or fought over.",
        ]
    if faults := d.get("cluster_faults"):
        lines += [
            "",
            "Time to converge after each cluster fault (RELIABILITY.md, \"Cluster faults\", has the whole table): "
            + "; ".join(f"{name} {r['converge_s']:.1f} s (back after {r['back_s']:.1f} s)" for name, r in faults.items()) + ".",
        ]
    return lines + _vpa_admission(d)


def _vpa_admission(d: dict[str, Any]) -> list[str]:
    """VPA at pod creation (`test_vpa_admission.py`): the agreement table and the cost of a pod create."""
    created = d.get("pod_create_ms_by_vpas_in_namespace")
    if not created:
        return []
    lines = [
        "",
        "VPA at pod creation (`test_vpa_admission.py`; docs/admission.md): the MutatingAdmissionPolicy",
        f"and the node agent's agent/vpa/policy.py set the same requests and limits in {d.get('vpa_admission_rows', '?')} of",
        f"{d.get('vpa_admission_rows', '?')} rows (modes × controlledValues × container policies × QoS, each pod created",
        "through the real admission chain with server-side dry run)"
        + (f"; and agent/vpa/podlevel_decide.py's in {d['vpa_admission_pod_level_rows']} of {d['vpa_admission_pod_level_rows']} "
           "pod-level rows (tests/vpa/admission_podlevel_rows.py)" if "vpa_admission_pod_level_rows" in d else "")
        + ". A pod create, timed end to end through the",
        "agent's API client (scheduling gated, so nothing runs), median of 50 and p90, with the policy bound and",
        "with its binding deleted:",
        "",
        "| VPAs in the namespace | with the policy | without | p90 with | p90 without |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n, r in sorted(created.items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {n} | {r['with_ms']:.1f} ms | {r['without_ms']:.1f} ms | {r['with_p90_ms']:.1f} ms | {r['without_p90_ms']:.1f} ms |")
    lines += [
        "",
        "One parameter object per namespace: the policy is evaluated once per create whatever the number of VPAs",
        "(an earlier layout of one object per VPA cost 22–49 ms a create at 43 VPAs: each object is one more",
        "evaluation and, past its match, one more conversion of the whole pod).",
    ]
    return lines


def resize_latency(d: dict[str, Any]) -> list[str]:
    agent, kubelet = d["agent"]["resize_to_cgroup"], d["kubelet"]["resize_to_cgroup"]

    def cell(s: dict[str, float]) -> str:
        return f"{s['median_ms']:.1f} ms / {s['p99_ms']:.1f} ms ({s['min_ms']:.1f}–{s['max_ms']:.1f}, n={s['n']})"

    ok = agent["median_ms"] <= kubelet["median_ms"] and agent["p99_ms"] <= kubelet["p99_ms"]
    return [
        "## 11. A `pods/resize` call to the container's cgroup: the agent on a bare node against the kubelet",
        "",
        f"Measured {d.get('date', '?')} on `{d.get('machine', '?')}`; command: `make e2e-k8s`"
        " (tests/e2e/test_resize_latency_vs_kubelet.py, run by tests/e2e_k8s/run.sh while the cluster is up).",
        f"The same `pods/resize` calls (a Guaranteed pod's CPU {' -> '.join(d.get('cpus', ['?', '?']))} and back, "
        f"{d['rounds']} rounds, interleaved) on two pods: one on `realk8s-node`, resized by the real v1.36 kubelet;",
        "one on a node with no kubelet that resizes (a Node object at v1.32; its container in `make e2e`'s private",
        "containerd under the pod's API UID), resized by `kube-cgroup-agent run` (a host process, timed once it",
        "reports ready: a resize sent before, during its start-up work, took 103 ms in one run). Timed from just",
        "before the PATCH to the first read of the container's `cpu.cfs_quota_us` at its new value (polled every",
        "0.2 ms). The floor: one API write (the PATCH round trip below), one watch event, one runc update.",
        "",
        "| who | resize -> container cgroup, median / p99 (min–max, n) | the PATCH's own round trip, median |",
        "| --- | --- | --- |",
        f"| kubelet v1.36 | {cell(kubelet)} | {d['kubelet']['patch']['median_ms']:.1f} ms |",
        f"| the agent (bare node) | {cell(agent)} | {d['agent']['patch']['median_ms']:.1f} ms |",
        "",
        f"Goal: median and p99 at or below the kubelet's, same calls, same run — {verdict(ok)}.",
        *(
            [
                "",
                "Where the agent's time goes: its own pass for the resize (compute, the pod's state record written",
                "and fsynced, the pod cgroup, UpdateContainerResources — one `runc update` —, the read-back), from its",
                f"log: {d['agent']['pass']['median_ms']:.1f} ms median (max {d['agent']['pass']['max_ms']:.1f} ms);"
                f" the PATCH's round trip {d['agent']['patch']['median_ms']:.1f} ms. Part of the pass follows the"
                " container's write (the read-back; on a decrease, the pod cgroup), so the two overlap the total; the",
                "runc update is the largest part of both sides' time.",
            ]
            if "pass" in d["agent"]
            else []
        ),
        "",
    ]
