"""Reactions in place, in seconds: a throttled container gets more CPU, an OOM-killed one more memory (pure).

VPA upstream reacts to neither quickly: its recommender folds an OOM into a histogram once a minute, it has no
throttling signal at all, and its updater's answer is an eviction. The node sees both the moment they happen
and can resize in place, so these rules set a *floor* under a container's VPA target, which the VPA source
(agent.vpa.source) applies as a decision that need not wait for the updater's conditions.

CPU starvation (per container with a CPU limit; the kernel's CFS counters, cpu.stat `nr_periods` and
`nr_throttled`, read every second):
- starved: at least THROTTLE_HIGH of the CFS periods of the last WINDOW_S throttled (and at least MIN_PERIODS
  periods: an idle container says nothing); calm: at most THROTTLE_LOW. Between the two nothing moves (the
  hysteresis band).
- a starved container's CPU request is raised ×RAISE_FACTOR (its limit follows in proportion, VPA's rule),
  never above `cap` (the policy's maxAllowed, the node's free allocatable, a RequestsOnly limit); starved
  again RATE_LIMIT_S later, raised again; at the cap, said once.
- the raise decays back to the recommendation after `hold_s` of continuous calm (no step down in between:
  one change, back to what VPA says). Calm is not "no longer throttled" — a raise that is enough ends the
  throttling while the load goes on — but "would fit where it came from": the container's CPU use (its highest
  second in the window) at most USE_LOW of the limit it had before the first raise (and throttled at most THROTTLE_LOW);
  where the use is not known, calm is throttled at most THROTTLE_LOW. A raise within twice the hold of a decay doubles the hold (up to
  MAX_HOLD_S): a load that comes back keeps its CPU longer each time, so the reaction cannot oscillate —
  two changes of one container are at least RATE_LIMIT_S apart, a decay needs `hold_s` of calm, and a
  raise-decay-raise cycle lasts longer each time.

OOM (VPA's own rule, recommender model/container.go RecordOOM): the memory a kill shows the container needed
is max(used + OOM_MIN_BUMP, used × OOM_BUMP_RATIO), `used` the larger of its memory request and the peak the
node saw; that becomes the floor of its memory target, capped like CPU. A kill within SAME_KILL_S of the
last counted one is the same kill (the kernel and the pod status both tell of it); a kill under the old
values (the bump not in the spec yet) gives the same floor again, not a higher one: repeated kills back off
by themselves, one bump per restart that actually ran with the bump, up to the cap — then said once.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

THROTTLE_HIGH: Final = 0.2  # throttled periods / periods: starved at or above this
THROTTLE_LOW: Final = 0.05  # calm at or below this
USE_LOW: Final = 0.8  # calm: the CPU use at most this share of the limit before the first raise
WINDOW_S: Final = 3.0
MIN_PERIODS: Final = 10  # 1 s of CFS periods at the default 100 ms period
RAISE_FACTOR: Final = 2
RATE_LIMIT_S: Final = 15.0
HOLD_S: Final = 120.0
MAX_HOLD_S: Final = 3600.0
OOM_BUMP_RATIO: Final = 1.2  # VPA model/container.go OOMBumpUpRatio
OOM_MIN_BUMP: Final = 100 * 1024 * 1024  # OOMMinBumpUp
SAME_KILL_S: Final = 30.0


class Kind(enum.StrEnum):
    """What a reaction did: the metric's label and, capitalised, the Event's reason."""

    CPU_RAISED = "cpu_raised"
    CPU_RESTORED = "cpu_restored"
    CPU_AT_CAP = "cpu_at_cap"
    OOM_BUMPED = "oom_bumped"
    OOM_AT_CAP = "oom_at_cap"


EVENT_REASONS: Final = {
    Kind.CPU_RAISED: "VPACPUStarvationRaised",
    Kind.CPU_RESTORED: "VPACPUStarvationRestored",
    Kind.CPU_AT_CAP: "VPACPUStarvationAtMax",
    Kind.OOM_BUMPED: "VPAOOMBumped",
    Kind.OOM_AT_CAP: "VPAOOMAtMax",
}


@dataclass(frozen=True, slots=True)
class Reaction:
    """One change of a container's floor (or a cap reached), with the numbers that explain it."""

    kind: Kind
    container: str
    floor: int | None  # the new floor (millicores or bytes); None: back to the recommendation
    why: str
    limit_before: int | None = None  # CPU raised: the limit (millicores) before the first raise


@dataclass(frozen=True, slots=True)
class Reading:
    """A container's cumulative CFS counters at `at` (seconds)."""

    at: float
    periods: int
    throttled: int
    usage_ns: int | None = None  # the CPU time used (cpuacct.usage; cpu.stat usage_usec × 1000 on v2)


@dataclass(frozen=True, slots=True)
class CpuState:
    window: tuple[Reading, ...] = ()
    floor: int | None = None  # millicores the CPU request stays at or above
    limit_before: int | None = None  # the CPU limit (millicores) before the first raise: what calm is measured by
    changed_at: float = -math.inf
    calm_since: float | None = None
    hold_s: float = HOLD_S
    decayed_at: float = -math.inf
    at_cap_said: bool = False


def throttled_fraction(window: tuple[Reading, ...]) -> float | None:
    """The throttled share of the window's CFS periods; 0 for an idle window, None when too short."""
    if len(window) < 2 or window[-1].at - window[0].at < WINDOW_S * 2 / 3:
        return None
    periods = window[-1].periods - window[0].periods
    if periods < MIN_PERIODS:
        return 0.0
    return (window[-1].throttled - window[0].throttled) / periods


def use_milli(window: tuple[Reading, ...]) -> float | None:
    """The highest CPU use between two readings of the window, in millicores (a burst shorter than the
    window is not averaged away), or None when not known."""
    rates = [
        (b.usage_ns - a.usage_ns) / 1e6 / (b.at - a.at)
        for a, b in itertools.pairwise(window)
        if a.usage_ns is not None and b.usage_ns is not None and b.at > a.at
    ]
    return max(rates) if rates else None


def _calm(window: tuple[Reading, ...], limit_before: int | None, fraction: float) -> bool:
    if fraction > THROTTLE_LOW:
        return False
    use = use_milli(window)
    return use is None or limit_before is None or use <= USE_LOW * limit_before


def _window(state: CpuState, r: Reading) -> tuple[Reading, ...]:
    last = state.window[-1] if state.window else None
    if last is not None and (
        r.periods < last.periods
        or r.throttled < last.throttled
        or r.at <= last.at
        or (r.usage_ns is not None and last.usage_ns is not None and r.usage_ns < last.usage_ns)
    ):
        return (r,)  # a restarted container (new counters) or a clock that did not move: start afresh
    # the oldest reading kept is the last one at least WINDOW_S old: the window spans WINDOW_S once it can
    old = [x for x in state.window if x.at <= r.at - WINDOW_S]
    keep = [x for x in state.window if x.at > r.at - WINDOW_S]
    return (*old[-1:], *keep, r)


def step_cpu(
    state: CpuState,
    reading: Reading,
    request: int | None,
    limit: int | None,
    cap: Callable[[], int | None],
    container: str,
) -> tuple[CpuState, Reaction | None]:
    """One reading of one container: its new state, and the reaction when its floor changed.
    `request`, `limit`: its CPU request and limit now (millicores); `cap`: the highest request allowed
    (None: none), asked only when a raise is due."""
    now = reading.at
    window = _window(state, reading)
    fraction = throttled_fraction(window)
    if fraction is None:
        return replace(state, window=window), None
    if _calm(window, state.limit_before, fraction):
        calm_since = now if state.calm_since is None else state.calm_since
        if state.floor is not None and now - calm_since >= state.hold_s and now - state.changed_at >= RATE_LIMIT_S:
            why = f"calm for {now - calm_since:.0f}s (≤ {THROTTLE_LOW:.0%} of periods throttled" + (
                f", using ≤ {USE_LOW:.0%} of the {state.limit_before}m limit it had)" if state.limit_before else ")")
            state = replace(state, window=window, calm_since=calm_since, floor=None, limit_before=None, changed_at=now,
                            decayed_at=now, at_cap_said=False)
            return state, Reaction(Kind.CPU_RESTORED, container, None, why)
        return replace(state, window=window, calm_since=calm_since), None
    state = replace(state, window=window, calm_since=None)
    if fraction < THROTTLE_HIGH or now - state.changed_at < RATE_LIMIT_S:
        return state, None
    base = max(request or 0, state.floor or 0)
    if base <= 0:
        return state, None  # no CPU request to scale (BestEffort-like): nothing VPA would raise
    wanted = base * RAISE_FACTOR
    most = cap()
    new = wanted if most is None else min(wanted, most)
    if new <= base:
        if state.at_cap_said:
            return state, None
        why = f"{fraction:.0%} of CFS periods throttled over {WINDOW_S:g}s, the request {base}m is at its maximum {most}m"
        return replace(state, at_cap_said=True), Reaction(Kind.CPU_AT_CAP, container, state.floor, why)
    hold = min(state.hold_s * 2, MAX_HOLD_S) if now - state.decayed_at < 2 * state.hold_s else state.hold_s
    why = f"{fraction:.0%} of CFS periods throttled over {WINDOW_S:g}s: request {base}m → {new}m"
    before = state.limit_before if state.floor is not None else limit
    state = replace(state, window=(reading,), floor=new, limit_before=before, changed_at=now, hold_s=hold)
    return state, Reaction(Kind.CPU_RAISED, container, new, why, before)


@dataclass(frozen=True, slots=True)
class OomState:
    floor: int | None = None  # bytes the memory request stays at or above
    last_kill: float = -math.inf
    at_cap_said: bool = False


def oom_needed(used: int) -> int:
    """VPA's memory after an OOM with `used` bytes: max(used + 100 MiB, used × 1.2)."""
    return max(used + OOM_MIN_BUMP, math.ceil(used * OOM_BUMP_RATIO))


def step_oom(
    state: OomState, at: float, request: int | None, peak: int | None, cap: int | None, container: str
) -> tuple[OomState, Reaction | None]:
    """An OOM kill of one container at `at`: its new state, and the reaction when its floor changed or the
    cap stopped it. `request`: the memory request it has now; `peak`: the most it was seen using."""
    if at - state.last_kill < SAME_KILL_S:
        return state, None
    state = replace(state, last_kill=at)
    used = max(request or 0, peak or 0)
    needed = oom_needed(used)
    new = needed if cap is None else min(needed, cap)
    held = max(state.floor or 0, request or 0)
    if new <= held:
        if state.at_cap_said or cap is None or needed <= held:
            return state, None  # killed again before the bump reached the spec: the same bump stands
        why = f"OOM-killed with {used} bytes in use; {needed} would be needed, the maximum is {cap}"
        return replace(state, at_cap_said=True), Reaction(Kind.OOM_AT_CAP, container, state.floor, why)
    why = f"OOM-killed with {used} bytes in use: memory request → {new} (VPA's OOM bump{', capped' if new < needed else ''})"
    return replace(state, floor=new), Reaction(Kind.OOM_BUMPED, container, new, why)
