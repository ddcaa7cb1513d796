"""SIGKILLs at random points of multi-container resizes on this host's real cgroup v1 files (fake CRI).

Each round: a fresh private root with a 3-container pod; up to three resizes, each with its agent
process killed (by PID) just before a random step of its run (a cgroup write or a CRI call; the engine
runs in lockstep, tests/resize/crash.py); after every kill the state directory is read as the next start
will read it; then a run without a kill must finish. Figures: kills, violations (child above parent at
any step, on the real files), resizes lost (the kernel not at the latest spec at the end), interrupted
resizes not completed (a status other than Done after the last run), corrupt records found.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.resize.store import PodStore
from tests.resize.crash import run_agent
from tests.resize.harness import node_on_kernel
from tests.resize.manifests import ctr, manifest

CONTAINERS = ("c1", "c2", "c3")


@dataclass
class CrashFigures:
    rounds: int = 0
    kills: int = 0
    violations: int = 0
    lost: int = 0
    not_completed: int = 0
    corrupt_records: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _spec(rng: random.Random) -> dict[str, Any]:
    cpu, mem = rng.choice([100, 200, 300, 500, 700]), rng.choice([64, 128, 160, 192, 256])
    return {"limits": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}}


def _one_round(workdir: Path, rng: random.Random, figures: CrashFigures, kills_left: int) -> None:
    with node_on_kernel(workdir, figures.notes) as node:
        node.add_pod(manifest("p", [ctr(n, lim={"cpu": "300m", "memory": "128Mi"}) for n in CONTAINERS]))
        eng = node.engine()
        eng.start(node.views())
        eng.reconcile()  # the node as the kubelet left it, records written
        for _ in range(min(3, kills_left)):
            node.resize("p", {n: _spec(rng) for n in CONTAINERS})
            # a run of a 3-container resize has at least a few steps; past its end it just finishes
            if run_agent(node, workdir, kill_at=rng.randint(0, 8)) is None:
                figures.kills += 1
            loaded = PodStore(node.settings.state_dir).load(persist=False)
            figures.corrupt_records += len(loaded.damaged)
            figures.notes += [d.reason for d in loaded.damaged]
        statuses = run_agent(node, workdir, kill_at=None) or []
        figures.not_completed += sum(1 for s in statuses if s["state"] != "Done")
        mismatches = node.mismatches("p")
        figures.lost += 1 if mismatches else 0
        figures.notes += mismatches[:2]
        figures.violations += len(node.violations)
        figures.notes += node.violations[:2]


def run(workdir: Path, kills: int, seed: int = 0, progress: Callable[[CrashFigures], None] | None = None) -> CrashFigures:
    """Rounds until `kills` kills have landed."""
    rng = random.Random(seed)
    figures = CrashFigures()
    while figures.kills < kills:
        _one_round(workdir / f"round-{figures.rounds}", rng, figures, kills - figures.kills)
        figures.rounds += 1
        if progress is not None:
            progress(figures)
    return figures
