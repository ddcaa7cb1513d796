"""Figure 14: what the CPU starvation reaction costs a node (bench/vpa_react.py); what it does on the real
nodes is in figure 8 ("Reactions in place")."""

from __future__ import annotations

from typing import Any


def vpa_react(d: dict[str, Any]) -> list[str]:
    lines = ["## 14. The CPU starvation reaction's cost (`vpa.react.cpuStarvation`)", "",
             f"Measured {d['measured']} at commit {d['commit']}; command: `{d['command']}` (root, this host's real cgroup v1",
             "files: one container cgroup per pod in the cpu and cpuacct hierarchies below a private root, one VPA acting on",
             f"every pod, the daemon's read pass timed after two warm-up passes, median of {d['passes']}). The reaction reads",
             "each acted-on container's `cpu.stat` and `cpuacct.usage` once a second (descriptors kept open, pread); a",
             "node pays per container a VPA acts on, nothing per container it does not (the last column: the VPA",
             "lookup of every pod, what the reaction costs a node where no VPA acts).", "",
             "| containers acted on | CPU a pass | per container | share of one core at 1 pass/s | no VPA acting: CPU a pass |",
             "|---|---|---|---|---|"]
    for r in d["rows"]:
        cpu = r["acted_on"]["cpu_ms"]
        lines.append(f"| {r['pods']:,} | {cpu:.2f} ms | {cpu * 1000 / r['pods']:.0f} µs | {cpu / 10:.2f} % | "
                     f"{r['none_acted_on']['cpu_ms']:.2f} ms |")
    lines += ["", "On by default from these figures and figure 8's: the cost is per opted-in container, the raise never",
              "takes more than the node has free, and the rule cannot oscillate (docs/vpa-reactions.md).", ""]
    return lines
