"""After start-up the daemon's heap is collected and frozen: later full collections skip it."""

from __future__ import annotations

import gc

from agent.daemon import heap


def test_settle_collects_cycles_then_freezes_what_is_left() -> None:
    class Node:
        ref: object = None

    garbage = Node()
    garbage.ref = garbage  # a cycle only the collector frees
    collected: list[int] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            collected.append(info["collected"])

    kept = [object() for _ in range(10)]
    del garbage
    gc.callbacks.append(on_gc)
    try:
        frozen = heap.settle()
        assert sum(collected) >= 1  # the cycle was collected, not frozen
        assert frozen > len(kept) and gc.get_freeze_count() > 0  # (other threads may allocate meanwhile)
    finally:
        gc.callbacks.remove(on_gc)
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
