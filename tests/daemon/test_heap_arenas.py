"""The daemon caps glibc's malloc arenas before its threads start (agent.daemon.heap.fewer_arenas)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_threads_allocating_at_once_share_the_capped_arenas() -> None:
    """In a fresh interpreter: eight threads allocating together map at most the capped number of arenas
    besides the main one (each arena is its own 64 MiB-aligned heap mapping, visible in /proc/self/maps),
    and without the cap they map more."""
    code = textwrap.dedent(
        """
        import sys, threading
        from agent.daemon.heap import fewer_arenas
        if sys.argv[1] == "capped":
            assert fewer_arenas(2)
        def arenas():
            # a thread arena's heap: an anonymous mapping reserved 64 MiB at a time (HEAP_MAX_SIZE)
            n = 0
            for line in open("/proc/self/maps"):
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                if start % (64 << 20) == 0 and len(line.split()) == 5 and end - start <= 64 << 20:
                    n += 1
            return n
        before = arenas()
        go = threading.Barrier(8)
        keep = []
        def work():
            go.wait()
            keep.append([bytearray(2048) for _ in range(2000)])
        ts = [threading.Thread(target=work) for _ in range(8)]
        for t in ts: t.start()
        for t in ts: t.join()
        print(arenas() - before)
        """
    )
    counts = {}
    for mode in ("capped", "default"):
        r = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True)
        counts[mode] = int(r.stdout.strip())
    assert counts["capped"] <= 2, counts  # the main arena is not a mapped heap: at most one more
    assert counts["default"] > counts["capped"], counts
