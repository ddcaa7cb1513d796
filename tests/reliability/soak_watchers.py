"""Watching a soak from outside the daemon, each on a thread of its own: the prober times resizes from
their apply to the node's files, the sampler reads the daemon process (psutil) and its /healthz. Both
stay cheap per poll: a watcher that starves the harness would show up as the daemon's latency."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psutil

from tests.daemon.harness import Daemon
from tests.reliability.soak_figures import Sample
from tests.resize.harness import ResizeNode
from tests.resize.kubelet import kubelet_files


class Prober:
    """Times resizes from their apply to the node's files showing the new spec (polled every 2 ms)."""

    def __init__(self, node: ResizeNode, on_applied: Callable[[str, float], None] | None = None) -> None:
        self.node = node
        self.on_applied = on_applied  # (pod, ms), on the prober's thread
        # pod -> (seconds into the phase, monotonic start, the files it waits for: path -> text)
        self.pending: dict[str, tuple[float, float, dict[str, str]]] = {}
        self.timed: list[tuple[float, float]] = []  # (seconds into the phase, ms)
        self.count = 0
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="soak-prober", daemon=True)
        self._thread.start()

    def busy(self, pod: str) -> bool:
        with self._cond:
            return pod in self.pending

    @contextmanager
    def timing(self, pod: str, t_s: float) -> Iterator[None]:
        """Start the clock right before the block (the apply), then poll for the change on the thread.
        The wanted files are computed once, here, and a poll stops at the first file not there yet: a
        poll that computes, or reads everything, starves this process (the fake API and CRI servers with
        it) once a few dozen probes are pending, and the daemon's latency grows with it."""
        wanted = kubelet_files(self.node, pod)
        started = time.monotonic()
        yield
        with self._cond:
            self.pending[pod] = (t_s, started, wanted)
            self.count += 1
            self._cond.notify()

    def _applied(self, wanted: dict[str, str]) -> bool:
        """Read up to the first file not there yet (usually one read per pending probe and poll)."""
        try:
            return all(self.node.read(path) == text for path, text in wanted.items())
        except OSError:
            return False

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self.pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                items = list(self.pending.items())
            for pod, (t_s, started, wanted) in items:
                if self._applied(wanted):
                    elapsed_ms = (time.monotonic() - started) * 1000
                    with self._cond:
                        del self.pending[pod]
                        self.timed.append((t_s, elapsed_ms))
                    if self.on_applied is not None:
                        self.on_applied(pod, elapsed_ms)
            time.sleep(0.002)

    def __enter__(self) -> Prober:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> int:
        """Stop polling (again: a no-op); returns how many probes never saw their change."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=10)
        return len(self.pending)


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


class Sampler:
    """The daemon's RSS, descriptors, threads, children and CPU time, and /healthz, every `every_s`."""

    def __init__(self, daemon: Daemon, every_s: float) -> None:
        assert daemon.proc is not None
        self.daemon = daemon
        self.proc = psutil.Process(daemon.proc.pid)
        self.every_s = every_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)
        self._thread.start()

    def sample(self) -> Sample:
        with self.proc.oneshot():
            s = Sample(
                t_s=time.monotonic(),  # made relative to the event phase by `close`
                rss_bytes=self.proc.memory_info().rss,
                fds=self.proc.num_fds(),
                threads=self.proc.num_threads(),
                children=len(self.proc.children(recursive=True)),
                cpu_s=cpu_seconds(self.proc),
                healthy=self._healthy(),
            )
        self.samples.append(s)
        return s

    def _healthy(self) -> bool:
        try:
            return self.daemon.get("/healthz")[0] == 200
        except OSError:
            return False

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.sample()
            except psutil.Error:
                return  # the daemon is gone: the end of the run says why

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, origin: float = 0.0) -> list[Sample]:
        """Stop sampling; the samples with times in seconds from `origin` (monotonic)."""
        self._stop.set()
        self._thread.join(timeout=10)
        return [dataclasses.replace(s, t_s=round(s.t_s - origin, 3)) for s in self.samples]
