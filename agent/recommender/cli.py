"""`kube-cgroup-agent recommend`: VPA's recommendation per pod and container, from a recorded trace
(`--samples FILE`, deterministic) or from what the daemon's sampler keeps on this node (`stateDir`);
`--record FILE` samples the node and writes a trace in the same format."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.recommender import render
from agent.recommender.config import RecommenderSettings
from agent.recommender.state import RecommenderState
from agent.recommender.store import load
from agent.recommender.trace import read_trace


def from_samples(source: str, settings: RecommenderSettings, now: float | None) -> RecommenderState:
    state = RecommenderState(settings)
    latest = 0.0
    if source == "-":
        lines = sys.stdin
        name = "<stdin>"
    else:
        try:
            handle = Path(source).open(encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as err:
            from agent.errors import AgentError

            raise AgentError(f"cannot read samples {source}: {err.strerror}") from err
        lines, name = handle, source
    try:
        for sample in read_trace(lines, name):
            state.observe(sample)
            latest = max(latest, sample.ts)
    finally:
        if lines is not sys.stdin:
            lines.close()
    state.forget_older_than(now if now is not None else latest)
    return state


def run(settings: RecommenderSettings, state_dir: Path, samples: str | None, now: float | None, output: str) -> int:
    if samples is not None:
        state = from_samples(samples, settings, now)
    else:
        state, warning = load(state_dir / settings.state_file, settings)
        if warning:
            print(f"kube-cgroup-agent: warning: {warning}", file=sys.stderr)
        if now is not None:
            state.forget_older_than(now)
    items = state.recommendations()
    print(render.to_json(items) if output == "json" else render.to_table(items))
    return 0
