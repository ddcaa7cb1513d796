"""Every figure of BENCHMARKS.md: which `make bench` runs (by name, module and number) and which come
from their own commands. A figure module is imported only when it runs, so one that cannot be imported
fails as that figure, by name, instead of hiding the others."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Run = Callable[[int], dict[str, Any]]


class FigureError(RuntimeError):
    """A figure module without the `run(repeat)` every figure has."""


@dataclass(frozen=True)
class Figure:
    name: str  # also its results file: bench/results/<name>.json
    number: int
    module: str

    def load(self) -> Run:
        run = getattr(importlib.import_module(self.module), "run", None)
        if not callable(run):
            raise FigureError(f"{self.module} has no run(repeat)")
        return run  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Elsewhere:
    """A figure (or part of one) `make bench` does not run: it needs a cluster or a registry."""

    name: str
    number: int
    what: str
    command: str


FIGURES: tuple[Figure, ...] = (
    Figure("diff_process", 1, "bench.diff_process"),
    Figure("incremental", 2, "bench.incremental"),
    Figure("writes", 3, "bench.writes"),
    Figure("containerd", 4, "bench.containerd"),
    Figure("daemon", 5, "bench.daemon"),
    Figure("tiers", 6, "bench.tiers"),
    Figure("recommender", 7, "bench.recommender"),
    Figure("vpa", 9, "bench.vpa"),
    Figure("rollout", 10, "bench.rollout"),
)

ELSEWHERE: tuple[Elsewhere, ...] = (
    Elsewhere("e2e_k8s", 8, "figure 8", "make e2e-k8s"),
    Elsewhere("resize_latency", 11, "figure 11", "make e2e-k8s"),
    Elsewhere("scale", 12, "figure 12", "make scale"),
    Elsewhere("image_start", 13, "figure 13", "make image; python -m bench.image_start"),
    Elsewhere("vpa_react", 14, "figure 14", "python -m bench.vpa_react"),
    Elsewhere(
        "prepull",
        10,
        "figure 10's pre-pull table",
        "KCG_PREPULL_ROUNDS=5 PYTEST_ARGS='-k prepull' KCG_PREPULL_OUT=bench/results/prepull.json bash tests/e2e/run.sh",
    ),
)


def names() -> list[str]:
    return [f.name for f in FIGURES]


def by_name(name: str) -> Figure:
    return next(f for f in FIGURES if f.name == name)
