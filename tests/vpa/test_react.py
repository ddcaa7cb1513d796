"""The reactions' rules (agent.vpa.react): when a throttled container is raised, how far, when it decays; VPA's
OOM bump, a kill told twice, the cap; and, as properties over any throttling trace, that they cannot oscillate."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.vpa.react import (
    HOLD_S,
    MAX_HOLD_S,
    OOM_MIN_BUMP,
    RATE_LIMIT_S,
    THROTTLE_HIGH,
    WINDOW_S,
    CpuState,
    Kind,
    OomState,
    Reaction,
    Reading,
    oom_needed,
    step_cpu,
    step_oom,
    throttled_fraction,
)

MI = 1 << 20
PERIODS_A_SECOND = 10  # CFS periods of 100 ms


def run(demand: list[float], request: int = 500, cap: int | None = None, state: CpuState | None = None,
        start: float = 1000.0) -> tuple[CpuState, list[tuple[float, Reaction]]]:
    """One reading a second of a container whose limit is twice its request: each second's periods all
    throttled while its demand (millicores) is above the limit, none otherwise; the request follows the
    floor (as the spec does once the resize lands)."""
    state = state or CpuState()
    periods = throttled = used = 0
    out: list[tuple[float, Reaction]] = []
    for i, d in enumerate(demand):
        periods += PERIODS_A_SECOND
        throttled += PERIODS_A_SECOND if d > 2 * request else 0
        used += int(min(d, 2 * request) * 1e6)  # ns in a second
        state, reaction = step_cpu(state, Reading(start + i, periods, throttled, used), request, 2 * request, lambda: cap, "app")
        if reaction is not None:
            out.append((start + i, reaction))
            if reaction.kind in (Kind.CPU_RAISED, Kind.CPU_RESTORED):
                request = reaction.floor if reaction.floor is not None else 500
    return state, out


@pytest.mark.parametrize(
    ("window", "fraction"),
    [
        ((), None),
        ((Reading(0, 0, 0), Reading(1, 10, 10)), None),  # 1 s: too short to say
        ((Reading(0, 0, 0), Reading(3, 30, 9)), 0.3),
        ((Reading(0, 0, 0), Reading(3, 5, 5)), 0.0),  # 5 periods in 3 s: an idle container says nothing
        ((Reading(0, 100, 50), Reading(2, 130, 50)), 0.0),
    ],
)
def test_the_throttled_share_of_a_window(window: tuple[Reading, ...], fraction: float | None) -> None:
    assert throttled_fraction(window) == fraction


def test_a_starved_container_is_raised_within_seconds_and_stays_raised_through_short_calms() -> None:
    # demand 3 cores, limit 1: raised after 2 s of readings (3 readings), then again when the rate limit
    # allows, to a limit of 4 cores, where it is no longer throttled
    state, reactions = run([3000] * 30)
    assert [(t - 1000, r.kind, r.floor) for t, r in reactions] == [
        (2, Kind.CPU_RAISED, 1000), (2 + RATE_LIMIT_S, Kind.CPU_RAISED, 2000)]
    assert "100% of CFS periods throttled" in reactions[0][1].why and "500m → 1000m" in reactions[0][1].why
    # calm shorter than the hold: nothing moves
    state, none = run([0] * 100, request=2000, state=state, start=1030.0)
    assert none == [] and state.floor == 2000 and state.calm_since is not None


def test_throttling_between_low_and_high_neither_raises_nor_counts_as_calm() -> None:
    state = CpuState(floor=1000, limit_before=1000, calm_since=900.0, changed_at=0.0)
    for i in range(5):  # 1 period in 10 throttled: 10 %
        state, r = step_cpu(state, Reading(1000.0 + i, 10 * i, i), 1000, 2000, lambda: None, "app")
        assert r is None
    assert state.calm_since is None and state.floor == 1000


def test_the_raise_decays_to_the_recommendation_after_the_hold_of_calm() -> None:
    state, _ = run([3000] * 4)
    state, reactions = run([0] * int(HOLD_S + 10), request=1000, state=state, start=1010.0)
    (at, r), = reactions
    assert r.kind is Kind.CPU_RESTORED and r.floor is None and state.floor is None
    # calm from the second reading with a full window (1012), decayed HOLD_S later
    assert at == pytest.approx(1010 + 2 + HOLD_S)


def test_a_raise_soon_after_a_decay_doubles_the_hold() -> None:
    state, _ = run([3000] * 4)
    state, _ = run([0] * int(HOLD_S + 5), request=1000, state=state, start=1010.0)
    assert state.floor is None and state.hold_s == HOLD_S
    state, reactions = run([3000] * 5, state=state, start=1010.0 + HOLD_S + 30)
    assert reactions[0][1].kind is Kind.CPU_RAISED and state.hold_s == 2 * HOLD_S


@pytest.mark.parametrize(
    ("cpu_request", "cap", "expected"),
    [
        (500, None, [(Kind.CPU_RAISED, 1000), (Kind.CPU_RAISED, 2000), (Kind.CPU_RAISED, 4000), (Kind.CPU_RAISED, 8000)]),
        # maxAllowed or the node's free allocatable; at the cap: said once, nothing raised
        (500, 800, [(Kind.CPU_RAISED, 800), (Kind.CPU_AT_CAP, 800)]),
        (800, 800, [(Kind.CPU_AT_CAP, None)]),
        (0, None, []),  # no request to scale
    ],
)
def test_the_raise_is_capped_and_a_cap_is_said_once(cpu_request: int, cap: int | None, expected: list[tuple[Kind, int | None]]) -> None:
    _, reactions = run([100_000] * 60, request=cpu_request, cap=cap)
    assert [(r.kind, r.floor) for _, r in reactions] == expected


def test_a_restarted_container_starts_a_new_window() -> None:
    state, _ = run([0.0] * 5)
    state, r = step_cpu(state, Reading(1010, 3, 3), 500, 1000, lambda: None, "app")  # counters went back: new cgroup
    assert r is None and state.window == (Reading(1010, 3, 3),)


@pytest.mark.parametrize(
    ("used", "needed"),
    [(100 * MI, 200 * MI), (1000 * MI, 1200 * MI), (500 * MI, 600 * MI), (0, OOM_MIN_BUMP)],
)
def test_vpas_oom_bump(used: int, needed: int) -> None:
    assert oom_needed(used) == needed


def test_an_oom_bumps_memory_once_per_kill_and_backs_off_to_the_cap() -> None:
    cap = 300 * MI
    state, r = step_oom(OomState(), 100.0, 128 * MI, None, cap, "app")
    assert r is not None and r.kind is Kind.OOM_BUMPED and r.floor == 228 * MI
    # the same kill told again (kernel, then pod status): nothing
    assert step_oom(state, 110.0, 128 * MI, None, cap, "app")[1] is None
    # killed again before the bump reached the spec (request still 128Mi): the same bump stands
    state, r = step_oom(state, 200.0, 128 * MI, None, cap, "app")
    assert r is None and state.floor == 228 * MI
    # killed with the bump in place: bumped again (328Mi needed), to the cap
    state, r = step_oom(state, 300.0, 228 * MI, None, cap, "app")
    assert r is not None and r.floor == cap and "capped" in r.why
    # at the cap: said once, then silent
    state, r = step_oom(state, 400.0, cap, None, cap, "app")
    assert r is not None and r.kind is Kind.OOM_AT_CAP and "the maximum is" in r.why
    assert step_oom(state, 500.0, cap, None, cap, "app")[1] is None


def test_the_oom_bump_starts_from_the_peak_when_it_is_above_the_request() -> None:
    _, r = step_oom(OomState(), 1.0, 64 * MI, 128 * MI, None, "app")
    assert r is not None and r.floor == 228 * MI


fractions = st.lists(st.sampled_from([0.0, 0.0, 0.02, 0.1, 0.3, 1.0]), min_size=1, max_size=900)


@settings(max_examples=150, deadline=None)
@given(fractions, st.one_of(st.none(), st.integers(600, 8000)))
def test_no_trace_makes_it_oscillate(trace: list[float], cap: int | None) -> None:
    assert 0 < THROTTLE_HIGH < 1
    """For any throttling trace: two changes at least RATE_LIMIT_S apart; a decay only after `hold` of calm
    since the last change; the hold never shrinks and is at most MAX_HOLD_S; the floor never above the cap;
    raise-decay-raise cycles grow longer (each hold after a quick return is twice the last)."""
    state = CpuState()
    periods = throttled = 0
    changes: list[tuple[float, Kind, float]] = []
    request = 500
    holds = [state.hold_s]
    for i, f in enumerate(trace):
        periods += PERIODS_A_SECOND
        throttled += round(f * PERIODS_A_SECOND)
        state, r = step_cpu(state, Reading(float(i), periods, throttled), request, 2 * request, lambda: cap, "app")
        assert state.hold_s >= holds[-1] and state.hold_s <= MAX_HOLD_S
        holds.append(state.hold_s)
        if state.floor is not None and cap is not None:
            assert state.floor <= max(cap, 500)
        if r is None or r.kind is Kind.CPU_AT_CAP:
            continue
        changes.append((float(i), r.kind, state.hold_s))
        request = r.floor if r.floor is not None else 500
    for (t1, _, _), (t2, _, _) in itertools.pairwise(changes):
        assert t2 - t1 >= RATE_LIMIT_S
    for (t1, k1, _), (t2, k2, hold) in itertools.pairwise(changes):
        if k2 is Kind.CPU_RESTORED:
            assert t2 - t1 >= min(hold, HOLD_S)  # at least the hold in force after a change
        if k1 is Kind.CPU_RESTORED and k2 is Kind.CPU_RAISED:
            assert t2 - t1 >= WINDOW_S * 2 / 3  # a new starvation needs a window of its own
    restores = [t for t, k, _ in changes if k is Kind.CPU_RESTORED]
    assert len(restores) <= math.ceil(len(trace) / HOLD_S)


def test_a_bursty_load_over_ten_minutes_changes_the_cpu_once() -> None:
    """Bursts of 1.5 cores against a 1-core limit, 20 s on and 40 s off for 10 minutes: raised once (to a
    2-core limit, enough), never lowered while the bursts go on; after them, back once."""
    trace = ([1500] * 20 + [0] * 40) * 10 + [0] * int(HOLD_S + 5)
    _, reactions = run(trace)
    assert [(t - 1000, r.kind) for t, r in reactions] == [(2, Kind.CPU_RAISED), (560 + HOLD_S + 2, Kind.CPU_RESTORED)]  # calm from the first second of no use after the last burst


bursts = st.lists(st.tuples(st.integers(1, 60), st.integers(1, int(HOLD_S) - 5), st.integers(1100, 6000)), min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(bursts)
def test_a_load_whose_pauses_are_shorter_than_the_hold_is_never_lowered(load: list[tuple[int, int, int]]) -> None:
    """Bursts of any length and height (above the 1-core limit) with pauses shorter than the hold: only
    raises while the load goes on — the 0 oscillations of a bursty load, for any such load."""
    trace: list[float] = []
    for on, off, height in load:
        trace += [height] * on + [0] * off
    _, reactions = run(trace)
    assert all(r.kind in (Kind.CPU_RAISED, Kind.CPU_AT_CAP) for _, r in reactions)
    if any(on >= 3 for on, _, _ in load):  # a burst of 3 s is sustained throttling: raised
        assert reactions
