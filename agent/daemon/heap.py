"""The daemon's heap after start-up: collected once, then frozen out of the cyclic collector.

Why: after the first full pass the heap holds what the daemon keeps for its life (the pods' views, each
pod's computation and rendered files, the modules); the collector's full collections would walk all of
it again and again for nothing, each one a pause in whichever pass it lands on. `gc.freeze()` moves
what is there into a generation the collector never examines, so a full collection walks only what
was allocated since. Garbage is collected first so no cycle is kept alive by the freeze; what is
frozen and later dropped is freed by reference counting as usual (only its cycles would linger).
"""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect, then freeze the heap as it stands; returns how many objects are now frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
