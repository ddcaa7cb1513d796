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


M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
ARENAS = 2


def fewer_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas before the daemon's threads start; False where the C library has no
    mallopt (musl) or refuses.

    Why: glibc gives each thread that allocates while another holds the main arena an arena of its own, up
    to eight per core; the daemon's threads (watches, workers, the HTTP endpoints, gRPC's) each leave pages
    in theirs that the others cannot reuse. Two arenas took 3.7 MiB off the daemon with the API source at
    1,000 pods (BENCHMARKS.md figure 9), 0.6 MiB on a bare node; figures 2 and 5 measure the latencies
    with it. The same as MALLOC_ARENA_MAX=2 in the environment, without depending on how the process is
    started. The symbol is looked up in the process itself (the C library it runs on), not by name on
    disk: the image has no ldconfig to find one."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
