"""systemd's service notification protocol (sd_notify(3)) for the daemon under a `Type=notify` unit.

The protocol is one datagram of newline-separated `KEY=VALUE` lines sent to the AF_UNIX socket named by
`$NOTIFY_SOCKET` (in the abstract namespace when the name starts with "@"). systemd documents it as a
stable interface and endorses reimplementing it in daemons not written in C, so this is a standalone
implementation rather than a dependency: `systemd-python` is a C extension built against libsystemd
(no wheels), `sdnotify` has had no release since 2017 and swallows every error; neither knows the
watchdog's `WATCHDOG_PID` rule. What is pure here (the datagram's bytes, the socket address, the watchdog
interval) is separate from the one socket call.

Without `$NOTIFY_SOCKET` (a terminal, a container, a `Type=simple` unit) every call is a no-op.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Mapping
from typing import Final

NOTIFY_SOCKET: Final = "NOTIFY_SOCKET"
WATCHDOG_USEC: Final = "WATCHDOG_USEC"
WATCHDOG_PID: Final = "WATCHDOG_PID"
STATUS_MAX: Final = 200  # `systemctl status` shows one line: longer text is cut


def flat_value(text: str, limit: int = STATUS_MAX) -> str:
    """A notification value: no newline (it would start a new field), no control character, bounded."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def message(*fields: tuple[str, str]) -> bytes:
    """The datagram for `fields` (in order): `KEY=VALUE` lines."""
    return "".join(f"{key}={flat_value(value)}\n" for key, value in fields).encode()


def socket_address(name: str) -> str | bytes | None:
    """`$NOTIFY_SOCKET` as an address for sendto(2): a path, or the abstract name for "@name"; None for
    what this implementation does not speak (empty, `vsock:`), which disables notifications."""
    if name.startswith("/"):
        return name
    if name.startswith("@") and len(name) > 1:
        return b"\0" + name[1:].encode()
    return None


def watchdog_interval_s(environ: Mapping[str, str], pid: int) -> float | None:
    """How often to send WATCHDOG=1: half of `$WATCHDOG_USEC` (sd_watchdog_enabled(3)), when it is set
    and `$WATCHDOG_PID` is unset or names this process; None otherwise (no watchdog, or it is another
    process's: a child that inherited the environment must not keep its parent alive)."""
    usec = environ.get(WATCHDOG_USEC, "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    owner = environ.get(WATCHDOG_PID, "")
    if owner and (not owner.isdigit() or int(owner) != pid):
        return None
    return int(usec) / 2 / 1e6


class Notifier:
    """Notifications to systemd; each method returns whether the datagram was sent (False when disabled
    or when the socket refused it: systemd gone or the unit not `Type=notify`; never raises)."""

    def __init__(self, address: str | bytes | None, watchdog_s: float | None = None) -> None:
        self.address = address
        self.watchdog_s = watchdog_s if address is not None else None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self.failures = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, pid: int | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        address = socket_address(env.get(NOTIFY_SOCKET, ""))
        return cls(address, watchdog_interval_s(env, os.getpid() if pid is None else pid))

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: tuple[str, str]) -> bool:
        if self.address is None or not fields:
            return False
        data = message(*fields)
        with self._lock:
            try:
                if self._sock is None:  # non-inheritable (PEP 446): a re-exec'd process opens its own
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.sendto(data, self.address)
            except OSError:
                self.failures += 1
                return False
        return True

    def ready(self, status: str) -> bool:
        return self.send(("READY", "1"), ("STATUS", status))

    def status(self, status: str) -> bool:
        return self.send(("STATUS", status))

    def watchdog(self) -> bool:
        return self.send(("WATCHDOG", "1")) if self.watchdog_s is not None else False

    def reloading(self, monotonic_usec: int, status: str) -> bool:
        """RELOADING=1 with the CLOCK_MONOTONIC time of the request (systemd 253+ requires it to match
        the reload it asked for; older versions ignore it); READY=1 follows from the reloaded process."""
        return self.send(("RELOADING", "1"), ("MONOTONIC_USEC", str(monotonic_usec)), ("STATUS", status))

    def stopping(self, status: str = "stopping") -> bool:
        return self.send(("STOPPING", "1"), ("STATUS", status))

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
