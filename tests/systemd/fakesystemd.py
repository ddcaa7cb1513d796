"""A real private dbus-daemon and an in-process stand-in for systemd's manager object on it.

The stand-in answers the Manager methods the driver uses the way systemd 252 does (SetUnitProperties on an
unknown unit -> NoSuchUnit, StartTransientUnit on a loaded unit -> UnitExists, a job object path and then a
JobRemoved signal), and records every call with its decoded arguments so tests can assert the exact bytes
the client put on the bus.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jeepney import DBusAddress, HeaderFields, MessageType, new_error, new_method_return, new_signal
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, Proxy, open_dbus_connection

BUS_NAME = "org.freedesktop.systemd1"
ROOT = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
UNIT_PREFIX = "/org/freedesktop/systemd1/unit/"

_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


class PrivateBus:
    """`dbus-daemon --nofork` on a unix socket in a fresh directory; stopped by its PID."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or Path(tempfile.mkdtemp(prefix="kca-dbus-", dir="/tmp"))
        self.socket = self.directory / "bus"
        self.address = f"unix:path={self.socket}"
        self.config = self.directory / "bus.conf"
        self.config.write_text(_CONFIG.format(socket=self.socket))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["dbus-daemon", f"--config-file={self.config}", "--nofork", "--print-address=1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        # The daemon prints its address once it listens; wait for that line (bounded, so a broken
        # daemon fails the fixture instead of hanging the run).
        ready, _, _ = select.select([self.process.stdout], [], [], 20.0)
        if not ready:
            self.stop()
            raise RuntimeError("dbus-daemon did not become ready")
        line = self.process.stdout.readline().decode().strip()
        if not line.startswith("unix:"):
            err = self.process.stderr.read().decode() if self.process.stderr else ""
            self.stop()
            raise RuntimeError(f"dbus-daemon failed to start: {line!r} {err}")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, 15)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, 9)
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        self.process = None
        self.socket.unlink(missing_ok=True)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass
class Call:
    """One method call as the fake received it: member, decoded body, and the sender's unique name."""

    member: str
    args: tuple[Any, ...]
    interface: str = ""
    path: str = ""


def unit_path(unit: str) -> str:
    """sd-bus's object path escaping: every byte outside [A-Za-z0-9] becomes _xx."""
    return UNIT_PREFIX + "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):02x}" for c in unit)


@dataclass
class FakeSystemd:
    """Owns org.freedesktop.systemd1 on a bus and serves the Manager subset the driver calls."""

    address: str
    version: str = "252.39-1~deb12u2"
    units: dict[str, dict[str, tuple[str, Any]]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    # (member, D-Bus error name, message) to answer the next matching calls with, in order
    errors: deque[tuple[str, str, str]] = field(default_factory=deque)
    job_result: str = "done"
    signal_before_reply: bool = False
    # called with the unit name after its properties changed, before the reply (tests/backends/systemd_trees.py writes
    # the cgroup files from them there, as systemd does)
    on_properties: Callable[[str], None] | None = None
    _conn: DBusConnection | None = None
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _jobs: int = 0

    def start(self) -> FakeSystemd:
        self._conn = open_dbus_connection(self.address)
        (result,) = Proxy(message_bus, self._conn, timeout=10).RequestName(BUS_NAME, 4)  # DO_NOT_QUEUE
        if result != 1:
            raise RuntimeError(f"could not own {BUS_NAME}: {result}")
        self._thread = threading.Thread(target=self._serve, name="fake-systemd", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def members(self) -> list[str]:
        return [c.member for c in self.calls]

    # -- serving ------------------------------------------------------------------------------------------

    def _serve(self) -> None:
        assert self._conn is not None
        while not self._stop.is_set():
            try:
                msg = self._conn.receive(timeout=0.05)
            except TimeoutError:
                continue
            except OSError:
                return
            if msg.header.message_type is MessageType.method_call:
                self._handle(msg)

    def _reply_error(self, msg: Any, name: str, text: str) -> None:
        assert self._conn is not None
        self._conn.send(new_error(msg, name, "s", (text,)))

    def _handle(self, msg: Any) -> None:
        assert self._conn is not None
        fields = msg.header.fields
        member = fields.get(HeaderFields.member, "")
        call = Call(
            member, tuple(msg.body), fields.get(HeaderFields.interface, ""), fields.get(HeaderFields.path, "")
        )
        self.calls.append(call)
        if self.errors and self.errors[0][0] == member:
            _, name, text = self.errors.popleft()
            self._reply_error(msg, name, text)
            return
        handler = getattr(self, f"_do_{member}", None)
        if handler is None:
            self._reply_error(msg, "org.freedesktop.DBus.Error.UnknownMethod", f"Unknown method {member}")
            return
        handler(msg)

    def _do_SetUnitProperties(self, msg: Any) -> None:
        unit, _runtime, props = msg.body
        if unit not in self.units:
            self._reply_error(msg, "org.freedesktop.systemd1.NoSuchUnit", f"Unit {unit} not found.")
            return
        self.units[unit].update({name: variant for name, variant in props})
        if self.on_properties is not None:
            self.on_properties(unit)
        assert self._conn is not None
        self._conn.send(new_method_return(msg))

    def _do_StartTransientUnit(self, msg: Any) -> None:
        unit, _mode, props, _aux = msg.body
        if unit in self.units:
            self._reply_error(
                msg,
                "org.freedesktop.systemd1.UnitExists",
                f"Unit {unit} was already loaded or has a fragment file.",
            )
            return
        self.units[unit] = {name: variant for name, variant in props}
        if self.on_properties is not None:
            self.on_properties(unit)
        self._jobs += 1
        job = f"{ROOT}/job/{self._jobs}"
        signal = new_signal(
            DBusAddress(ROOT, interface=MANAGER),
            "JobRemoved",
            "uoss",
            (self._jobs, job, unit, self.job_result),
        )
        assert self._conn is not None
        if self.signal_before_reply:
            self._conn.send(signal)
            self._conn.send(new_method_return(msg, "o", (job,)))
        else:
            self._conn.send(new_method_return(msg, "o", (job,)))
            self._conn.send(signal)
        if self.job_result != "done":
            del self.units[unit]

    def _do_ResetFailedUnit(self, msg: Any) -> None:
        assert self._conn is not None
        self._conn.send(new_method_return(msg))

    def _do_GetUnit(self, msg: Any) -> None:
        (unit,) = msg.body
        if unit not in self.units:
            self._reply_error(msg, "org.freedesktop.systemd1.NoSuchUnit", f"Unit {unit} not loaded.")
            return
        assert self._conn is not None
        self._conn.send(new_method_return(msg, "o", (unit_path(unit),)))

    def _do_Get(self, msg: Any) -> None:
        interface, name = msg.body
        path = msg.header.fields.get(HeaderFields.path, "")
        assert self._conn is not None
        if path == ROOT and interface == MANAGER and name == "Version":
            self._conn.send(new_method_return(msg, "v", (("s", self.version),)))
            return
        for unit, props in self.units.items():
            if unit_path(unit) == path and name in props:
                self._conn.send(new_method_return(msg, "v", (props[name],)))
                return
        self._reply_error(msg, "org.freedesktop.DBus.Error.UnknownProperty", f"Unknown property {name}")
