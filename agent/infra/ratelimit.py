"""A token bucket for the agent's requests to the API server: client-go's client-side limit (its `QPS` and
`Burst`; the kubelet's `kubeAPIQPS`/`kubeAPIBurst`).

Why: one agent runs on every node, so a loop gone wrong on all of them at once (a bug, a relist storm after
the API server came back) is multiplied by the cluster's size. The bucket holds `burst` tokens, refilled at
`qps` a second; a request takes one, waiting for it when none is left. A watch costs one token when it is
opened and none while it streams.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs qps > 0 and burst >= 1 (qps {qps}, burst {burst})")
        self.qps = qps
        self.burst = burst
        self.clock = clock
        self.sleep = sleep
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()
        self.waited_s = 0.0  # the time requests spent waiting for a token (a metric's source)

    def reserve(self) -> float:
        """Take a token; how long the caller must wait before it may use it (0: at once)."""
        with self._lock:
            now = self.clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
            self._at = now
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            self.waited_s += wait
            return wait

    def wait(self) -> float:
        """Take a token, sleeping until it is there; the time slept."""
        delay = self.reserve()
        if delay > 0:
            self.sleep(delay)
        return delay
