"""Desired state of a whole node: every pod's values and the QoS tiers above them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.core.compute.config import ComputeConfig
from agent.core.compute.pod import PodComputation, PodComputeError, compute_pod
from agent.core.compute.tiers import TierComputation, compute_tiers
from agent.core.model import PodView, Problem

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class NodeComputation:
    """Every pod's and tier's values, and the problems found computing them."""

    pods: tuple[PodComputation, ...]
    tiers: tuple[TierComputation, ...]
    warnings: tuple[Problem, ...]
    errors: tuple[Problem, ...]


def compute_node(pods: Iterable[PodView], cfg: ComputeConfig) -> NodeComputation:
    """One pod that cannot be computed is reported and left out; the others are still computed."""
    done: list[PodComputation] = []
    errors: list[Problem] = []
    warnings: list[Problem] = []
    for pod in pods:
        if pod.phase in TERMINAL_PHASES:
            continue
        try:
            comp = compute_pod(pod, cfg)
        except PodComputeError as err:
            errors.append(Problem(err.pod, err.message))
            continue
        done.append(comp)
        warnings.extend(Problem(pod.key, w) for w in comp.warnings)
    return NodeComputation(tuple(done), compute_tiers(done, cfg), tuple(warnings), tuple(errors))
