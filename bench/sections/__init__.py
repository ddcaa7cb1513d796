"""The BENCHMARKS.md section of each figure, rendered from its results (bench/results/<name>.json).

Each figure module measures and returns plain data; this package only renders it, with the verdict
against each target of issue 7 and, where one is missed, why and what would close it. Which figures
exist is bench/figures.py; which commit each was measured at, bench/report.py. Here: the document's
order and the machine it is regenerated on; each figure's section is in the module of its kind.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.sections import agent_time, cluster, daemon_runs, image, on_host, reactions
from bench.sections.units import load, meta, ms


def machine() -> list[str]:
    """The machine BENCHMARKS.md is regenerated on; report.py checks each figure was measured on it."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kib = next(
            int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
        )
        memory = f"{mem_kib / (1 << 20):.1f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "?"
    os_name = "?"
    with contextlib.suppress(OSError, StopIteration):
        os_name = next(
            line.split("=", 1)[1].strip('"')
            for line in Path("/etc/os-release").read_text().splitlines()
            if line.startswith("PRETTY_NAME=")
        )
    return [
        "## Machine",
        "",
        f"`{platform.node()}`: {os_name}, kernel {platform.release()}, {os.cpu_count()} × {model}, {memory} RAM,",
        "cgroup v1 (cpu and memory hierarchies at /sys/fs/cgroup/{cpu,memory}, hugetlb alone on the unified mount),",
        f"CPython {platform.python_version()}, containerd 1.6.20 + runc 1.1.5 (Debian 12) for figure 4.",
        "",
    ]


def _recommender(data: dict[str, Any]) -> list[str]:
    from bench import recommender

    return recommender.markdown(data)


def _vpa(d: dict[str, Any]) -> list[str]:
    from bench import vpa

    return vpa.markdown(d, ms, meta(d))


def _rollout(d: dict[str, Any], results: Path) -> list[str]:
    from bench import rollout

    return rollout.markdown(d, meta(d), load(results, "prepull"))


def _scale(d: dict[str, Any], results: Path) -> list[str]:
    from bench.scale import report

    return report.markdown(d, load(results, "scale-before"))


Render = Callable[[dict[str, Any]], list[str]]


def in_order(results: Path) -> list[tuple[str, Render]]:
    """Each results file's section, in the document's order (the figure numbers)."""
    return [
        ("diff_process", agent_time.diff_process),
        ("incremental", agent_time.incremental),
        ("writes", on_host.writes),
        ("containerd", on_host.containerd),
        ("daemon", daemon_runs.daemon),
        ("tiers", daemon_runs.tiers),
        ("recommender", _recommender),
        ("e2e_k8s", cluster.e2e_k8s),
        ("vpa", _vpa),
        ("rollout", lambda d: _rollout(d, results)),
        ("resize_latency", cluster.resize_latency),
        ("scale", lambda d: _scale(d, results)),
        ("image_start", image.image_start),
        ("vpa_react", reactions.vpa_react),
    ]
