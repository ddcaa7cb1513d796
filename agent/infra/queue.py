"""Per-pod work items with latest-wins coalescing (client-go's workqueue, kopf's per-object workers).

A key (a pod UID, or `TIERS`) is in the queue at most once, however many events arrive for it: the
worker reads the pod's *latest* state when it gets to it, so intermediate states are skipped. A key
is never handed to two workers at once; a key added while it is being processed is queued again when
the worker is done, so no update is lost and one pod's reconciles never overlap. Delayed adds serve
retries with backoff and drift re-application.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from agent.infra.errors import AgentError

TIERS: Final = "<qos-tiers>"


class ShutDown(AgentError):
    """The queue is shut down: the worker should exit."""


@dataclass(slots=True)
class WorkQueue:
    clock: Callable[[], float] = time.monotonic
    _queue: deque[str] = field(default_factory=deque)
    _dirty: set[str] = field(default_factory=set)
    _processing: set[str] = field(default_factory=set)
    _delayed: list[tuple[float, int, str]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _shutdown: bool = False

    def add(self, key: str) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: str) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            heapq.heappush(self._delayed, (self.clock() + delay, next(self._seq), key))
            self._cond.notify_all()

    def _promote_due(self) -> float | None:
        """Move due delayed keys into the queue; the seconds until the next one, or None."""
        now = self.clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            self._add_locked(key)
        return (self._delayed[0][0] - now) if self._delayed else None

    def get(self) -> str:
        """Block until a key is ready; raise ShutDown once the queue is shut down."""
        with self._cond:
            while True:
                if self._shutdown:
                    raise ShutDown
                wait = self._promote_due()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                self._cond.wait(timeout=wait)

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shutdown(self) -> None:
        """Workers finish the item they hold and then get ShutDown; pending items are dropped."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def pending(self) -> tuple[str, ...]:
        with self._cond:
            return tuple(self._queue)

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)


@dataclass(slots=True)
class Backoff:
    """Exponential per-key retry delays (base * 2^failures, capped); `forget` after a success."""

    base: float = 0.5
    cap: float = 60.0
    _failures: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, key: str) -> float:
        with self._lock:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        return float(min(self.cap, self.base * (2**n)))

    def forget(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        with self._lock:
            return self._failures.get(key, 0)
