"""RELIABILITY.md's "Cluster faults" table, from the rows tests/e2e_k8s/test_cluster_faults.py records in
bench/results/e2e_k8s.json (`make e2e-k8s` runs this after its tests: python -m tests.reliability.cluster_faults_doc).
The table is only ever rewritten from measured rows; with none, the document is left as it is."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "RELIABILITY.md"
RESULTS = ROOT / "bench" / "results" / "e2e_k8s.json"
BEGIN, END = "<!-- cluster-faults:begin -->", "<!-- cluster-faults:end -->"


def table(data: dict[str, Any]) -> list[str]:
    rows: dict[str, dict[str, Any]] = data.get("cluster_faults") or {}
    commit = (data.get("commits") or {}).get("cluster_faults", "?")
    lines = [
        f"Measured at {commit} by tests/e2e_k8s/test_cluster_faults.py (part of `make e2e-k8s`), on the two-node cluster",
        "of tests/e2e_k8s/cluster.sh (this host: cgroup v1 + cgroupfs; a TCG qemu guest: cgroup v2 + systemd), the",
        "agent as its DaemonSet. *Injected after*: seconds from the samplers' start; the fault follows the rollout's",
        "and the resize's start at once. *In flight*: StatefulSet pods not yet updated in place / VPA resizes not yet",
        "at their decision when the fault was injected (known afterwards from when each got there: a VPA resize on",
        "the v1 node is done within half a second). *Back*: the fault's end (the component Ready again; for the API",
        "server, 30 s down and then ready); *converged*: from then until every pod is at its spec and its VPA",
        "decision. *Invariant*: samples of both nodes' cgroup trees taken during the fault, violations among them.",
        "*Restored*: tier values someone else changed once that the agent put back (a restarting kubelet resets the",
        "tiers to its start-up values); *fights*: a value changed again after the agent put it back, or given up on.",
        "",
        "| fault | injected after | in flight (rollout / resizes) | lost | reverted | restored | fights | kubelet-owned writes | invariant samples / violations | most unavailable (taken out by the agents) | back | converged |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['injected_after_s']:.1f} s | {r['rollout_in_flight']} / {r['resizes_in_flight']} | {r['lost']} | "
            f"{r['reverted']} | {r.get('restored', '?')} | {r['fights']:.0f} | {r['kubelet_owned_writes']} | {r['invariant_samples']} / "
            f"{r['invariant_violations']} | {r['max_unavailable']} ({r.get('max_updating', '?')}) | {r['back_s']:.1f} s | {r['converge_s']:.1f} s |"
        )
    return lines


def write(results: Path = RESULTS, doc: Path = DOC) -> bool:
    """Rewrite the table between the markers; False (nothing written) when no row was measured."""
    data = json.loads(results.read_text()) if results.exists() else {}
    if not data.get("cluster_faults"):
        return False
    text = doc.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    doc.write_text(text[:start] + "\n" + "\n".join(table(data)) + "\n" + text[end:])
    return True


if __name__ == "__main__":
    wrote = write()
    print("RELIABILITY.md: cluster faults table " + ("rewritten" if wrote else "left as it is (no rows measured)"))
    sys.exit(0)
