"""`recommend --samples`: the trace format, one clear line naming a bad line, deterministic output; the
counters' arithmetic (CPU rate, working set, throttling, OOM kills); the state file: persist, restart,
corrupt file, bounded memory."""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pytest

from agent.commands.main import main
from agent.recommender.config import RecommenderSettings, parse_recommender
from agent.recommender.counters import Counters, cpu_sample, observe, parse_v1, parse_v2
from agent.recommender.state import RecommenderState
from agent.recommender.store import load, save
from agent.recommender.trace import Sample

T0 = 1_764_000_000


def _trace(tmp_path: Path, lines: list[object]) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


def _steady(tmp_path: Path) -> Path:
    lines: list[object] = [{"ts": T0, "pod": "shop/api", "container": "app", "requests": {"cpu": "100m", "memory": "128Mi"}}]
    lines += [{"ts": T0 + 60 * i, "pod": "shop/api", "container": "app", "cpu": 0.5, "memory": 300_000_000} for i in range(1440)]
    lines += [{"ts": T0 + 60 * i, "pod": "shop/api", "container": "sidecar", "cpu": 0.02, "memory": 20_000_000} for i in range(1440)]
    return _trace(tmp_path, lines)


def test_recommend_from_a_trace_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--samples", str(_steady(tmp_path)), "--now", str(T0 + 86_400), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [pod] = out["pods"]
    assert pod["pod"] == "shop/api"
    app, side = pod["containerRecommendations"]
    # 0.5 cores is in bucket floor(log(0.5*0.05/0.01 + 1) / log 1.05) = 25, which ends at
    # 0.01 * (1.05^26 - 1) / 0.05 = 0.5111 cores → 511m, + 15 % (76m) = 587m
    assert app["containerName"] == "app" and app["target"]["cpu"] == "587m"
    assert app["uncappedTarget"] == app["target"]
    assert set(app) == {"containerName", "target", "lowerBound", "upperBound", "uncappedTarget", "confidence"}
    # 0.02 cores: bucket 1 ends at 0.01 * (1.05^2 - 1) / 0.05 = 0.0205 → 20m, + 3m = 23m (above 25m / 2 = 12m)
    assert side["target"]["cpu"] == "23m"
    assert 0.99 < app["confidence"] < 1.0  # one day less a minute


def test_the_same_trace_gives_the_same_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _steady(tmp_path)
    main(["recommend", "--samples", str(trace)])
    first = capsys.readouterr().out
    main(["recommend", "--samples", str(trace)])
    assert capsys.readouterr().out == first
    assert first.splitlines()[0].split()[:2] == ["POD", "CONTAINER"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", "not JSON"),
        ({"ts": T0, "pod": "nopod", "container": "c", "cpu": 1}, "pod must be namespace/name"),
        ({"ts": T0, "pod": "a/b", "container": "c", "cpu": -1}, "cpu must be a non-negative number"),
        ({"ts": T0, "pod": "a/b", "container": "c", "oom": True}, "an OOM line needs memory"),
        ({"ts": T0, "pod": "a/b", "container": "c", "requests": {"cpu": "lots"}}, "requests.cpu"),
        ({"pod": "a/b", "container": "c", "cpu": 1}, "ts is missing"),
        ({"ts": T0, "pod": "a/b", "container": "c", "gpu": 1}, "unknown keys ['gpu']"),
    ],
)
def test_a_bad_line_is_one_clear_error_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: object, message: str) -> None:
    trace = _trace(tmp_path, [{"ts": T0, "pod": "a/b", "container": "c", "cpu": 0.1}, bad])
    assert main(["recommend", "--samples", str(trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kube-cgroup-agent: {trace}:2: ") and message in err and len(err.splitlines()) == 1


def test_missing_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--samples", str(tmp_path / "none.jsonl")]) == 2
    assert "cannot read samples" in capsys.readouterr().err


def test_an_oom_line_bumps_the_memory_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [{"ts": T0 + 60 * i, "pod": "a/b", "container": "c", "cpu": 0.1, "memory": 300_000_000} for i in range(10)]
    main(["recommend", "--samples", str(_trace(tmp_path, base)), "-o", "json"])
    before = json.loads(capsys.readouterr().out)["pods"][0]["containerRecommendations"][0]["target"]["memory"]
    oom = [*base, {"ts": T0 + 700, "pod": "a/b", "container": "c", "oom": True, "memory": 300_000_000}]
    main(["recommend", "--samples", str(_trace(tmp_path, oom)), "-o", "json"])
    after = json.loads(capsys.readouterr().out)["pods"][0]["containerRecommendations"][0]["target"]["memory"]
    assert int(after) > int(before)


# ---- counters ----

def test_counters_v1_and_v2_and_the_observation() -> None:
    v1 = parse_v1({"cpuacct.usage": "2000000000\n", "cpu.stat": "nr_periods 10\nnr_throttled 5\nthrottled_time 9\n",
                   "memory.usage_in_bytes": "500\n", "memory.stat": "cache 9\ntotal_inactive_file 100\n",
                   "memory.max_usage_in_bytes": "800\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"})
    assert v1 == Counters(2_000_000_000, 10, 5, 500, 100, 800, 1)
    v2 = parse_v2({"cpu.stat": "usage_usec 3000000\nnr_periods 20\nnr_throttled 15\n", "memory.current": "700",
                   "memory.stat": "inactive_file 200\n", "memory.peak": "900", "memory.events": "low 0\noom_kill 2\n"})
    assert v2 == Counters(3_000_000_000, 20, 15, 700, 200, 900, 2)
    obs = observe(v1, v2, elapsed_s=2.0)
    assert obs.cpu_cores == pytest.approx(0.5)  # 1 s of CPU over 2 s
    assert obs.working_set == 500 and obs.throttled_fraction == pytest.approx(1.0) and obs.new_oom_kills == 1
    assert observe(v2, v1, 1.0).cpu_cores is None  # a counter going back (a restart): no rate
    assert cpu_sample(obs, cpu_limit_cores=1.0, starvation=True, threshold=0.2) == 1.0  # starved: taken at the limit
    assert cpu_sample(obs, cpu_limit_cores=1.0, starvation=False, threshold=0.2) == 0.5


# ---- the state file ----

def test_persist_restart_and_corrupt_file(tmp_path: Path) -> None:
    s = RecommenderSettings()
    state = RecommenderState(s)
    for i in range(100):
        state.observe(Sample(T0 + 60 * i, "a/b", "c", cpu=0.3, memory=400e6))
    path = tmp_path / "recommender.json"
    save(path, state)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    again, warning = load(path, s)
    assert warning is None
    assert again.recommendations() == state.recommendations()  # a restart keeps history
    path.write_text('{"version": 1, "containers": [{"pod": "a/b"')  # torn
    empty, warning = load(path, s)
    assert empty.histories == {} and warning is not None and "starting with no history" in warning
    path.write_text(json.dumps({"version": 99, "containers": []}))
    _, warning = load(path, s)
    assert warning is not None and "not a version 1" in warning


def test_containers_gone_longer_than_the_window_are_dropped_and_memory_stays_bounded() -> None:
    s = RecommenderSettings()
    state = RecommenderState(s)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(10_000):  # short-lived containers, one every minute, each with 5 samples
        t = T0 + n * 60
        for k in range(5):
            state.observe(Sample(t + k, f"ns/p{n}", "c", cpu=0.1 + (n % 7) * 0.1, memory=1e8 + n))
        if n % 1000 == 999:
            state.forget_older_than(t)
    peak_per_container = (tracemalloc.get_traced_memory()[0] - before) / len(state.histories)
    tracemalloc.stop()
    window = s.memory_window_s / 60  # containers started within the last 8 days (one a minute)
    assert len(state.histories) <= window + 1000
    state.forget_older_than(T0 + 10_000 * 60 + s.memory_window_s + 1)
    assert state.histories == {}
    assert peak_per_container < 8_000  # bytes per container kept (two sparse histograms and counters)


def test_config_keys_are_named_as_vpa_flags() -> None:
    s = parse_recommender({"cpuHistogramDecayHalfLife": "12h", "podRecommendationMinMemoryMb": 100,
                           "recommendationMarginFraction": 0.2, "oomMinBumpUpBytes": 1024, "targetCpuPercentile": 0.8})
    assert s.cpu_histogram_decay_half_life_s == 43_200 and s.pod_recommendation_min_memory_mb == 100
    assert s.recommendation_margin_fraction == 0.2 and s.oom_min_bump_up_bytes == 1024 and s.target_cpu_percentile == 0.8
    with pytest.raises(ValueError, match="unknown setting 'bogus'"):
        parse_recommender({"bogus": 1})
    with pytest.raises(ValueError, match="targetCpuPercentile must be in"):
        parse_recommender({"targetCpuPercentile": 2})


@pytest.mark.parametrize(
    ("value", "expected", "error"),
    [
        (None, 0.10, None),  # unset: the default
        (0, 0.0, None),  # every target's move written
        (0.25, 0.25, None),
        (0.999, 0.999, None),
        (1, None, "statusMinChange must be in [0, 1)"),
        (1.5, None, "statusMinChange must be in [0, 1)"),
        (-0.1, None, "statusMinChange: -0.1 is not a non-negative number"),
        ("10%", None, "statusMinChange: '10%' is not a non-negative number"),
        (True, None, "statusMinChange: True is not a non-negative number"),
    ],
)
def test_the_status_min_change_is_a_fraction_below_one(value: object, expected: float | None, error: str | None) -> None:
    raw = {} if value is None else {"statusMinChange": value}
    if error is not None:
        with pytest.raises(ValueError, match=re.escape(error)):
            parse_recommender(raw)
        return
    assert parse_recommender(raw).status_min_change == expected


def test_the_documented_example_is_what_the_sample_trace_gives(capsys: pytest.CaptureFixture[str]) -> None:
    repo = Path(__file__).resolve().parents[2]
    assert main(["recommend", "--samples", str(repo / "agent/commands/samples/recommender/trace.jsonl")]) == 0
    out = capsys.readouterr().out.strip()
    assert out in (repo / "docs" / "recommender.md").read_text()
