"""The daemon's main loop as its service manager sees it: READY, STATUS, the watchdog, STOPPING, RELOADING.

Under a `Type=notify` unit (systemd/kube-cgroup-agent.service) systemd learns from these messages what
the probes tell a kubelet (agent.infra.metrics): READY=1 once `/readyz` would first answer 200 (the
node's pods delivered and the QoS tiers reconciled), a STATUS line `systemctl status` shows, and
WATCHDOG=1 every half `WatchdogSec`, sent from the main thread's loop and only while `/healthz` would
answer 200 (no worker thread has died): a loop that is wedged, stopped (SIGSTOP) or has lost a thread
stops pinging, and systemd kills and restarts the agent as a failed liveness probe would. Without
`$NOTIFY_SOCKET` nothing is sent and the loop is the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from agent.infra.metrics import Probe
from agent.infra.sdnotify import Notifier

TICK_S: Final = 0.5  # the main loop's period: signals, a reload, the status and the watchdog are looked at


class Supervisor:
    """What the main loop tells systemd. Single-threaded: only the main thread calls it."""

    def __init__(
        self,
        notifier: Notifier,
        probe: Probe,
        *,
        pods: Callable[[], int | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.notifier = notifier
        self.probe = probe
        self.pods = pods  # how many pods the node has, once the daemon knows (for the status line)
        self.clock = clock
        self.readied = False
        self.note: str | None = None  # kept on the status line (a refused reload) until the next reload
        self._status: str | None = None
        self._last_ping: float | None = None
        self._stopping = False

    @property
    def tick_s(self) -> float:
        """How long the loop may sleep: the watchdog's interval allows several looks per ping."""
        interval = self.notifier.watchdog_s
        return TICK_S if interval is None else max(0.01, min(TICK_S, interval / 4))

    def status_line(self) -> tuple[bool, str]:
        """(ready, the STATUS text) as the probes answer now."""
        healthy, why_not = self.probe.healthy()
        ready, reason = self.probe.ready()
        if not healthy:
            text = f"unhealthy: {why_not}"
        elif not ready:
            text = reason if reason.startswith("starting") else f"starting: {reason}"
        else:
            count = self.pods()
            text = "ready" if count is None else f"ready: {count} pod{'' if count == 1 else 's'}"
        if self.note:
            text = f"{text}; {self.note}"
        return ready, text

    def tick(self) -> None:
        """Look once: READY the first time the daemon is ready, STATUS when it changed, WATCHDOG=1 when due
        and healthy. Nothing after STOPPING."""
        if self._stopping:
            return
        ready, text = self.status_line()
        if ready and not self.readied:
            self.readied = True
            self.notifier.ready(text)
            self._status = text
        elif text != self._status:
            self.notifier.status(text)
            self._status = text
        self._watchdog()

    def _watchdog(self) -> None:
        interval = self.notifier.watchdog_s
        if interval is None or not self.probe.healthy()[0]:
            return
        now = self.clock()
        if self._last_ping is None or now - self._last_ping >= interval:
            self.ping()

    def ping(self) -> None:
        """WATCHDOG=1 now (also before a re-exec: the new process gets a whole interval to start)."""
        if self.notifier.watchdog():
            self._last_ping = self.clock()

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        """`stop.wait(timeout)` that keeps telling systemd meanwhile; True when `stop` is set."""
        deadline = self.clock() + timeout
        while True:
            self.tick()
            remaining = deadline - self.clock()
            if remaining <= 0:
                return stop.is_set()
            if stop.wait(min(remaining, self.tick_s)):
                return True

    def reloading(self, status: str = "reloading the configuration") -> None:
        """RELOADING=1: the process goes down and comes back as the same PID (agent.daemon.run); its READY=1
        ends the reload."""
        self.note = None
        self.notifier.reloading(time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000, status)

    def stopping(self) -> None:
        if not self._stopping:
            self._stopping = True
            self.notifier.stopping()
