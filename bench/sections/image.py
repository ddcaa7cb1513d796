"""Figure 13: how fast a command starts in the agent's image, with and without its bytecode
(bench/image_start.py), and the same commands exec'd in the agent's pods of the real cluster."""

from __future__ import annotations

from typing import Any

# `kubectl exec -n kube-cgroup-agent POD -c agent -- kube-cgroup-agent ...` on realk8s-node (the cgroup v1
# host node), 5 runs each, timed around kubectl (its own ~0.15 s included); before: the image of 83543ca
# (no bytecode) during `make e2e-k8s` (load average 3.6), after: the image of d63b3a1 (bytecode) during a
# partial run (load average 1.8), 2026-12-01.
IN_CLUSTER = {
    "version": {"before": [1.048, 0.652, 0.655, 0.849, 0.676], "after": [0.191, 0.184, 0.171, 0.171, 0.181]},
    "diff --all": {"before": [3.538, 3.257, 3.690, 3.508, 4.516], "after": [0.892, 0.759, 0.627, 0.867, 0.767]},
}


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def image_start(d: dict[str, Any]) -> list[str]:
    lines = ["## 13. A command's start in the agent's image (bytecode)", "",
             f"Measured {d['measured']} at commit {d['commit']}; command: `{d['command'].strip()}` (root: the image's "
             f"layers unpacked, each command run {d['runs']} times by `chroot` as `kubectl exec` runs it — a new process, "
             "nothing cached but the page cache — after one warm-up run; the same root with every `__pycache__` "
             "removed is the image as built before its bytecode: its root filesystem is read-only, so nothing ever "
             f"kept what a command compiled). The image holds {d['pyc_files']:,} `.pyc` files (the application, its "
             "dependencies and the stdlib; `unchecked-hash`, compiled by the image's own python3).", "",
             "| command | without bytecode | with it | peak RSS without / with |", "|---|---|---|---|"]
    for name, after in d["with_bytecode"].items():
        before = d["without_bytecode"][name]
        lines.append(f"| {name} | {before['median_s']:.3f} s | {after['median_s']:.3f} s | "
                     f"{before['peak_rss_mib']:.1f} / {after['peak_rss_mib']:.1f} MiB |")
    lines += ["", "In the agent's pod on the real cluster (`kubectl exec ... kube-cgroup-agent CMD` on realk8s-node, 5 runs, "
              "kubectl's own round trip included; before: the image without bytecode, during a full `make e2e-k8s` at "
              "load average 3.6; after: with it, during a partial run at load average 1.8):", "",
              "| command | before, median | after, median |", "|---|---|---|"]
    for name, runs in IN_CLUSTER.items():
        lines.append(f"| {name} | {_median(runs['before']):.2f} s | {_median(runs['after']):.2f} s |")
    lines += ["", "The image grows by the bytecode: 58 MiB compressed and 203 MiB unpacked, from 48 and 159 MiB; two "
              "builds of one commit give the same digest (docs/installation.md, \"The image\").", ""]
    return lines
