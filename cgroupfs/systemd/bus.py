"""A small blocking client for systemd's manager on D-Bus (the only module that imports jeepney).

What it does, after runc's systemd/dbus.go and systemd/common.go: one lazily opened connection; a call that
fails because the connection broke (systemd or dbus-daemon restarted) reconnects and retries; connection
refusals and transient bus errors are retried with bounded exponential backoff and jitter; systemd's errors
come back typed (`NoSuchUnit` separately, so a pod slice that does not exist yet is "not yet", not a failure).
Calls are serialised by an internal lock; blocking I/O is fine for a node agent applying a handful of slices.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jeepney import (
    DBusAddress,
    DBusErrorResponse,
    HeaderFields,
    MatchRule,
    Message,
    MessageType,
    new_method_call,
)
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, Proxy, open_dbus_connection

from cgroupfs.errors import DriverError
from cgroupfs.systemd.properties import Property

SYSTEMD_BUS_NAME: Final = "org.freedesktop.systemd1"
SYSTEMD_OBJECT_PATH: Final = "/org/freedesktop/systemd1"
MANAGER_INTERFACE: Final = "org.freedesktop.systemd1.Manager"
PROPERTIES_INTERFACE: Final = "org.freedesktop.DBus.Properties"
DEFAULT_SYSTEM_BUS_ADDRESS: Final = "unix:path=/run/dbus/system_bus_socket"

ERROR_NO_SUCH_UNIT: Final = "org.freedesktop.systemd1.NoSuchUnit"
ERROR_UNIT_EXISTS: Final = "org.freedesktop.systemd1.UnitExists"
TRANSIENT_ERRORS: Final = frozenset(
    {
        # no answer in time, or the bus is overloaded / between owners of systemd's name (daemon-reexec)
        "org.freedesktop.DBus.Error.NoReply",
        "org.freedesktop.DBus.Error.Timeout",
        "org.freedesktop.DBus.Error.TimedOut",
        "org.freedesktop.DBus.Error.LimitsExceeded",
        "org.freedesktop.DBus.Error.ServiceUnknown",
        "org.freedesktop.DBus.Error.NameHasNoOwner",
        "org.freedesktop.DBus.Error.Disconnected",
    }
)

_JOB_SIGNAL = MatchRule(
    type="signal", interface=MANAGER_INTERFACE, member="JobRemoved", path=SYSTEMD_OBJECT_PATH
)
_MANAGER = DBusAddress(SYSTEMD_OBJECT_PATH, bus_name=SYSTEMD_BUS_NAME, interface=MANAGER_INTERFACE)


def system_bus_address() -> str:
    """`$DBUS_SYSTEM_BUS_ADDRESS`, else the well-known socket (as sd-bus and godbus resolve it)."""
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or DEFAULT_SYSTEM_BUS_ADDRESS


class SystemdError(DriverError):
    """A systemd call failed: which unit, which property if one can be named, and the D-Bus error name."""

    def __init__(
        self,
        message: str,
        *,
        unit: str | None = None,
        property_name: str | None = None,
        dbus_error: str | None = None,
    ) -> None:
        super().__init__(message)
        self.unit = unit
        self.property_name = property_name
        self.dbus_error = dbus_error

    def __str__(self) -> str:
        parts = [super().__str__()]
        if self.unit is not None:
            parts.append(f"unit={self.unit}")
        if self.property_name is not None:
            parts.append(f"property={self.property_name}")
        if self.dbus_error is not None:
            parts.append(f"error={self.dbus_error}")
        return " ".join(parts)


class NoSuchUnit(SystemdError):
    """The unit is not loaded (a pod slice nobody created yet)."""

    retryable = True


class UnitExists(SystemdError):
    """StartTransientUnit for a unit that is already loaded."""


class BusUnavailable(SystemdError):
    """No connection to the bus could be made, or it kept breaking, within the retry budget."""

    retryable = True


@dataclass(frozen=True, slots=True)
class Backoff:
    """runc's dbus.go backoff: 100 ms * 2^attempt + up to 12.5 % jitter, 7 attempts; here also capped."""

    attempts: int = 7
    initial: float = 0.1
    maximum: float = 5.0
    jitter: float = 0.125

    def delay(self, attempt: int) -> float:
        base = min(self.initial * float(1 << attempt), self.maximum)
        jitter: float = random.uniform(0.0, base * self.jitter)
        return base + jitter


def _variant_list(properties: Iterable[Property]) -> list[tuple[str, tuple[str, Any]]]:
    return [
        (p.name, (p.signature, list(p.value) if isinstance(p.value, tuple) else p.value)) for p in properties
    ]


def _blamed_property(text: str, properties: Sequence[Property]) -> str | None:
    """systemd names the offending property in its message ("Cannot set property X, or unknown property.")."""
    for prop in properties:
        if prop.name in text:
            return prop.name
    return None


class SystemdBus:
    """Calls on `org.freedesktop.systemd1` over one (re)connecting D-Bus connection.

    `address` is a D-Bus address ("unix:path=..."); None means the system bus (`system_bus_address`).
    `sleep` is injectable so tests never wait for the backoff.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        call_timeout: float = 25.0,
        job_timeout: float = 30.0,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._address = address
        self._call_timeout = call_timeout
        self._job_timeout = job_timeout
        self._backoff = backoff or Backoff()
        self._sleep = sleep
        self._conn: DBusConnection | None = None
        self._jobs: deque[Message] = deque(maxlen=1024)
        self._lock = threading.RLock()
        self.reconnects = 0

    @property
    def address(self) -> str:
        return self._address or system_bus_address()

    # -- connection ---------------------------------------------------------------------------------------

    def _connection(self) -> DBusConnection:
        if self._conn is None:
            conn = open_dbus_connection(self.address)
            try:
                # JobRemoved reaches us because systemd tracks the requester of each job; the match rule
                # makes dbus-daemon route it to this connection.
                Proxy(message_bus, conn, timeout=self._call_timeout).AddMatch(
                    MatchRule(
                        type="signal",
                        sender=SYSTEMD_BUS_NAME,
                        interface=MANAGER_INTERFACE,
                        member="JobRemoved",
                        path=SYSTEMD_OBJECT_PATH,
                    )
                )
            except BaseException:
                conn.close()
                raise
            # Signals that arrive while waiting for any reply land here (jeepney routes non-replies to
            # filters), so a JobRemoved sent before StartTransientUnit's reply is not lost.
            self._jobs = deque(maxlen=1024)
            conn.filter(_JOB_SIGNAL, queue=self._jobs)
            self._conn = conn
        return self._conn

    def _reset(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None
            self.reconnects += 1

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SystemdBus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls --------------------------------------------------------------------------------------------

    def _call(
        self,
        make: Callable[[], Message],
        *,
        unit: str | None,
        properties: Sequence[Property] = (),
        on_reply: Callable[[DBusConnection, Message], Any] | None = None,
    ) -> Any:
        """Send one method call, retrying on broken connections and transient errors; return the body."""
        last: str = "no attempt made"
        for attempt in range(max(1, self._backoff.attempts)):
            if attempt:
                self._sleep(self._backoff.delay(attempt - 1))
            try:
                conn = self._connection()
            except OSError as exc:  # no socket yet, refused, EAGAIN, auth timeout: try again later
                last = f"{type(exc).__name__}: {exc}"
                continue
            except (
                ValueError,
                RuntimeError,
                DBusErrorResponse,
            ) as exc:  # bad address, auth, AddMatch refused
                raise BusUnavailable(f"cannot use the bus at {self.address}: {exc}", unit=unit) from exc
            try:
                reply = conn.send_and_get_reply(make(), timeout=self._call_timeout)
            except OSError as exc:  # reset, broken pipe, reply timeout: reconnect and retry
                last = f"{type(exc).__name__}: {exc}"
                self._reset()
                continue
            if reply.header.message_type is MessageType.error:
                name = reply.header.fields.get(HeaderFields.error_name, "")
                text = str(reply.body[0]) if reply.body else name
                if name in TRANSIENT_ERRORS:
                    last = f"{name}: {text}"
                    continue
                raise self._error(name, text, unit, properties)
            if on_reply is not None:
                return on_reply(conn, reply)
            return reply.body
        raise BusUnavailable(
            f"systemd call failed after {self._backoff.attempts} attempts on {self.address}: {last}",
            unit=unit,
        )

    @staticmethod
    def _error(name: str, text: str, unit: str | None, properties: Sequence[Property]) -> SystemdError:
        kind: type[SystemdError] = SystemdError
        if name == ERROR_NO_SUCH_UNIT:
            kind = NoSuchUnit
        elif name == ERROR_UNIT_EXISTS:
            kind = UnitExists
        return kind(text, unit=unit, property_name=_blamed_property(text, properties), dbus_error=name)

    def set_unit_properties(self, unit: str, properties: Sequence[Property], runtime: bool = True) -> None:
        """Manager.SetUnitProperties(s unit, b runtime, a(sv) properties); runtime=True as runc does it.

        Runtime properties live in /run/systemd/system.control and survive daemon-reload but not a reboot.
        """
        body = (unit, runtime, _variant_list(properties))
        with self._lock:
            self._call(
                lambda: new_method_call(_MANAGER, "SetUnitProperties", "sba(sv)", body),
                unit=unit,
                properties=properties,
            )

    def start_transient_slice(
        self,
        unit: str,
        properties: Sequence[Property],
        *,
        description: str | None = None,
        parent: str | None = None,
    ) -> bool:
        """Create the slice as the kubelet does (runc `Apply(-1)`); True if created, False if it existed.

        Manager.StartTransientUnit(s unit, s "replace", a(sv) props, a(sa(sv)) aux=[]) with Description,
        Wants=<parent> (when given), DefaultDependencies=false, CPUAccounting/MemoryAccounting=true and
        `properties`, then waits for the job's JobRemoved signal ("done" or an error). If the unit already
        exists (`UnitExists`, runc's `ignoreExist` case for slices), `properties` are set on it instead.
        """
        props: list[Property] = [Property("Description", "s", description or f"kube-cgroup-agent {unit}")]
        if parent:
            props.append(Property("Wants", "as", (parent,)))
        props += [
            Property("DefaultDependencies", "b", False),
            Property("CPUAccounting", "b", True),
            Property("MemoryAccounting", "b", True),
            *properties,
        ]
        body: tuple[object, ...] = (unit, "replace", _variant_list(props), [])
        with self._lock:
            self._jobs.clear()
            try:
                job = self._call(
                    lambda: new_method_call(_MANAGER, "StartTransientUnit", "ssa(sv)a(sa(sv))", body),
                    unit=unit,
                    properties=props,
                    on_reply=self._job_of,
                )
            except UnitExists:
                self.set_unit_properties(unit, properties)
                return False
            result = self._wait_job(job, unit)
            if result is None:
                # The connection broke while waiting: the job was queued, so the unit is loaded; make sure
                # it holds the properties (NoSuchUnit here means the job failed before we saw it).
                self.set_unit_properties(unit, properties)
                return True
            if result != "done":
                self._reset_failed(unit)
                raise SystemdError(f"job for {unit} finished with result {result!r}", unit=unit)
            return True

    def _job_of(self, conn: DBusConnection, reply: Message) -> tuple[str, DBusConnection]:
        return str(reply.body[0]), conn

    def _wait_job(self, job: tuple[str, DBusConnection], unit: str) -> str | None:
        """The result of JobRemoved for the job; None if the connection broke while waiting."""
        job_path, conn = job
        queue = self._jobs
        deadline = time.monotonic() + self._job_timeout
        while True:
            while queue:
                signal = queue.popleft()
                if len(signal.body) >= 4 and signal.body[1] == job_path:
                    return str(signal.body[3])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SystemdError(f"timed out waiting for job {job_path}", unit=unit)
            try:
                # recv_until_filtered pops the matching message it returns: put it back for the loop above
                queue.appendleft(conn.recv_until_filtered(queue, timeout=remaining))
            except TimeoutError:
                continue
            except OSError:
                self._reset()
                return None

    def _reset_failed(self, unit: str) -> None:
        with contextlib.suppress(SystemdError):
            self._call(lambda: new_method_call(_MANAGER, "ResetFailedUnit", "s", (unit,)), unit=unit)

    def get_unit_property(self, unit: str, interface: str, name: str) -> tuple[str, Any]:
        """(signature, value) of one property of a loaded unit; `NoSuchUnit` if it is not loaded."""
        with self._lock:
            (path,) = self._call(lambda: new_method_call(_MANAGER, "GetUnit", "s", (unit,)), unit=unit)
            obj = DBusAddress(str(path), bus_name=SYSTEMD_BUS_NAME, interface=PROPERTIES_INTERFACE)
            (variant,) = self._call(lambda: new_method_call(obj, "Get", "ss", (interface, name)), unit=unit)
            signature, value = variant
            return str(signature), value

    def manager_version(self) -> str:
        """systemd's version string ("252.39-1~deb12u2"); runc gates CPUQuotaPeriodUSec on >= 242."""
        with self._lock:
            obj = DBusAddress(SYSTEMD_OBJECT_PATH, bus_name=SYSTEMD_BUS_NAME, interface=PROPERTIES_INTERFACE)
            (variant,) = self._call(
                lambda: new_method_call(obj, "Get", "ss", (MANAGER_INTERFACE, "Version")), unit=None
            )
            return str(variant[1])
