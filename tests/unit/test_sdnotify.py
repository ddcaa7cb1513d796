"""systemd's notify protocol (agent.infra.sdnotify) against a real AF_UNIX datagram socket, and the main
loop's messages (agent.daemon.supervisor): READY once ready, STATUS, the watchdog's cadence, STOPPING,
RELOADING."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.daemon.supervisor import Supervisor
from agent.infra.metrics import Probe
from agent.infra.sdnotify import Notifier, message, socket_address, watchdog_interval_s


class Listener:
    """systemd's side: a datagram socket that collects what arrives, one dict per datagram."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address  # as $NOTIFY_SOCKET names it

    def receive(self, timeout: float = 1.0) -> dict[str, str] | None:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return None
        lines = data.decode().split("\n")
        assert lines[-1] == "", f"a datagram ends with a newline: {data!r}"
        return dict(line.split("=", 1) for line in lines[:-1])

    def drain(self) -> list[dict[str, str]]:
        out = []
        while (m := self.receive(timeout=0.05)) is not None:
            out.append(m)
        return out


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    sock.bind(str(path))
    try:
        yield Listener(sock, str(path))
    finally:
        sock.close()


@pytest.fixture
def abstract_listener() -> Iterator[Listener]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"kcg-test-{uuid.uuid4().hex}"
    sock.bind(b"\0" + name.encode())
    try:
        yield Listener(sock, "@" + name)
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("environ", "pid", "expected"),
    [
        ({}, 10, None),
        ({"WATCHDOG_USEC": "30000000"}, 10, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "10"}, 10, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "11"}, 10, None),  # another process's watchdog
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "x"}, 10, None),
        ({"WATCHDOG_USEC": "0"}, 10, None),
        ({"WATCHDOG_USEC": "soon"}, 10, None),
        ({"WATCHDOG_USEC": "400000"}, 10, 0.2),
    ],
)
def test_the_watchdog_interval_is_half_of_watchdog_usec_for_its_own_pid(
    environ: dict[str, str], pid: int, expected: float | None
) -> None:
    assert watchdog_interval_s(environ, pid) == expected


@pytest.mark.parametrize(
    ("name", "address"),
    [
        ("/run/systemd/notify", "/run/systemd/notify"),
        ("@kcg/notify", b"\0kcg/notify"),
        ("", None),
        ("@", None),
        ("vsock:2:1234", None),  # not spoken here: notifications off, never an error
        ("relative/path", None),
    ],
)
def test_notify_socket_addresses(name: str, address: str | bytes | None) -> None:
    assert socket_address(name) == address


def test_a_message_is_key_value_lines_and_a_value_never_breaks_a_line() -> None:
    assert message(("READY", "1"), ("STATUS", "ready: 3 pods")) == b"READY=1\nSTATUS=ready: 3 pods\n"
    assert message(("STATUS", "bad\nline\x00")) == b"STATUS=bad line \n"
    assert len(message(("STATUS", "x" * 1000))) < 220


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_notifications_reach_the_socket_named_by_notify_socket(
    kind: str, listener: Listener, abstract_listener: Listener
) -> None:
    target = listener if kind == "path" else abstract_listener
    n = Notifier.from_environ({"NOTIFY_SOCKET": target.address, "WATCHDOG_USEC": "2000000"}, pid=os.getpid())
    assert n.enabled and n.watchdog_s == 1.0
    assert n.ready("ready: 1 pod")
    assert n.watchdog()
    assert n.status("ready: 2 pods")
    assert n.reloading(123456789, "reloading the configuration")
    assert n.stopping()
    received = [target.receive() for _ in range(5)]
    assert received == [
        {"READY": "1", "STATUS": "ready: 1 pod"},
        {"WATCHDOG": "1"},
        {"STATUS": "ready: 2 pods"},
        {"RELOADING": "1", "MONOTONIC_USEC": "123456789", "STATUS": "reloading the configuration"},
        {"STOPPING": "1", "STATUS": "stopping"},
    ]
    n.close()


def test_without_notify_socket_nothing_is_sent_and_nothing_fails(listener: Listener) -> None:
    n = Notifier.from_environ({"WATCHDOG_USEC": "2000000"})
    assert not n.enabled and n.watchdog_s is None
    assert not n.ready("ready") and not n.watchdog() and not n.stopping()
    assert listener.drain() == []


def test_a_socket_that_is_gone_is_a_false_never_an_exception(tmp_path: Path) -> None:
    n = Notifier.from_environ({"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    assert n.enabled
    assert not n.ready("ready")
    assert n.failures == 1


# ------------------------------------------------------------------------------------------ supervisor
@dataclass
class FakeDaemon:
    """What the probes answer, set by the test."""

    healthy: bool = True
    ready: bool = False
    why: str = "starting: waiting for node n1 from the API server"

    def probe(self) -> Probe:
        return Probe(
            lambda: (self.healthy, "ok" if self.healthy else "thread(s) worker-0 stopped"),
            lambda: (self.ready, "ok" if self.ready else self.why),
        )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _supervisor(listener: Listener, watchdog_usec: str | None = "2000000") -> tuple[Supervisor, FakeDaemon, Clock]:
    env = {"NOTIFY_SOCKET": listener.address}
    if watchdog_usec is not None:
        env["WATCHDOG_USEC"] = watchdog_usec
    daemon, clock = FakeDaemon(), Clock()
    return Supervisor(Notifier.from_environ(env, pid=1), daemon.probe(), pods=lambda: 3, clock=clock), daemon, clock


def test_ready_is_sent_once_after_the_first_full_pass_with_the_status_line(listener: Listener) -> None:
    sup, daemon, _ = _supervisor(listener, watchdog_usec=None)
    sup.tick()
    sup.tick()  # the same status: sent once
    assert listener.drain() == [{"STATUS": "starting: waiting for node n1 from the API server"}]
    daemon.why = "the QoS tiers have not been reconciled yet"
    sup.tick()
    assert listener.drain() == [{"STATUS": "starting: the QoS tiers have not been reconciled yet"}]
    daemon.ready = True
    sup.tick()
    sup.tick()
    assert listener.drain() == [{"READY": "1", "STATUS": "ready: 3 pods"}]
    daemon.healthy = False
    sup.tick()
    assert listener.drain() == [{"STATUS": "unhealthy: thread(s) worker-0 stopped"}]


@pytest.mark.parametrize(
    ("steps", "pings"),
    [
        # (seconds the clock moves before each tick) -> at which ticks WATCHDOG=1 goes out; interval 1 s
        ([0.0, 0.5, 0.5, 0.5, 0.5], [0, 2, 4]),
        ([0.0, 0.99, 0.02, 3.0], [0, 2, 3]),
        ([0.0, 0.25, 0.25, 0.25, 0.25, 0.25], [0, 4]),
    ],
)
def test_the_watchdog_is_pinged_at_half_of_watchdog_usec(
    listener: Listener, steps: list[float], pings: list[int]
) -> None:
    sup, daemon, clock = _supervisor(listener, watchdog_usec="2000000")
    daemon.ready = True
    sent = []
    for i, step in enumerate(steps):
        clock.now += step
        sup.tick()
        if any("WATCHDOG" in m for m in listener.drain()):
            sent.append(i)
    assert sent == pings


def test_no_ping_while_unhealthy_so_systemd_restarts_the_agent(listener: Listener) -> None:
    sup, daemon, clock = _supervisor(listener)
    daemon.ready = True
    sup.tick()
    assert {"WATCHDOG": "1"} in listener.drain()
    daemon.healthy = False  # a worker thread died: /healthz would answer 500
    for _ in range(5):
        clock.now += 1.0
        sup.tick()
    assert all("WATCHDOG" not in m for m in listener.drain())
    daemon.healthy = True
    clock.now += 1.0
    sup.tick()
    assert {"WATCHDOG": "1"} in listener.drain()


def test_stopping_then_nothing_more(listener: Listener) -> None:
    sup, daemon, clock = _supervisor(listener)
    daemon.ready = True
    sup.tick()
    listener.drain()
    sup.stopping()
    sup.stopping()
    clock.now += 5.0
    sup.tick()
    assert listener.drain() == [{"STOPPING": "1", "STATUS": "stopping"}]


def test_reloading_carries_the_monotonic_clock_and_clears_a_refusal_note(listener: Listener) -> None:
    sup, daemon, _ = _supervisor(listener, watchdog_usec=None)
    daemon.ready = True
    sup.tick()
    sup.note = "reload refused: unknown setting 'cgroupDrvier'"
    sup.tick()
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    sup.reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    got = listener.drain()
    assert got[:2] == [
        {"READY": "1", "STATUS": "ready: 3 pods"},
        {"STATUS": "ready: 3 pods; reload refused: unknown setting 'cgroupDrvier'"},
    ]
    assert got[2]["RELOADING"] == "1" and before <= int(got[2]["MONOTONIC_USEC"]) <= after
    assert sup.note is None


def test_wait_keeps_pinging_and_returns_when_stopped(listener: Listener) -> None:
    env = {"NOTIFY_SOCKET": listener.address, "WATCHDOG_USEC": "100000"}  # a ping every 50 ms
    daemon = FakeDaemon(ready=True)
    sup = Supervisor(Notifier.from_environ(env, pid=1), daemon.probe())
    stop = threading.Event()
    assert sup.wait(stop, 0.5) is False
    pings = [m for m in listener.drain() if "WATCHDOG" in m]
    assert 5 <= len(pings) <= 12, len(pings)
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    assert sup.wait(stop, 10.0) is True
    assert time.monotonic() - started < 2.0
