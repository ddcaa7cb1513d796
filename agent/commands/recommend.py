"""`kube-cgroup-agent recommend`: VPA's recommendation per pod and container, from a recorded trace
(`--samples FILE`, deterministic) or from what the daemon's sampler keeps on this node (`stateDir`);
`--record FILE` samples the node and writes a trace in the same format."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from agent import pipeline
from agent.config.settings import Settings
from agent.recommender import render
from agent.recommender.config import RecommenderSettings
from agent.recommender.sampler import Sampler, reader_for, targets
from agent.recommender.state import RecommenderState
from agent.recommender.store import load
from agent.recommender.trace import Sample, read_trace


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
            from agent.infra.errors import AgentError

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


def record(settings: Settings, out: Path, duration_s: float) -> int:
    """`recommend --record FILE`: sample this node for `duration_s` and write the trace."""
    env = pipeline.environment(settings)
    loaded = pipeline.load_pods(settings)
    wanted = targets(loaded.pods, settings.cgroup_root_name, settings.cgroup_driver, env.hierarchy)
    reader = reader_for(settings.cgroupfs, settings.cgroup_root_name, settings.cgroup_driver, env.hierarchy)
    sampler = Sampler(reader, settings.recommender.cpu_starvation, settings.recommender.throttle_threshold)
    interval = settings.recommender.sample_interval_s
    end = time.monotonic() + duration_s
    lines = 0
    with out.open("w", encoding="utf-8") as f, contextlib.closing(sampler):
        now = time.time()
        for t in wanted:
            req = Sample(now, t.pod, t.container, request_memory=t.memory_request) if t.memory_request else None
            if req is not None:
                f.write(req.to_json() + "\n")
                lines += 1
        while True:
            samples, _ = sampler.tick(time.time(), wanted)
            for s in samples:
                f.write(s.to_json() + "\n")
            lines += len(samples)
            f.flush()
            if time.monotonic() + interval > end:
                break
            time.sleep(interval)
    print(f"recorded {lines} lines for {len(wanted)} containers to {out}")
    return 0
