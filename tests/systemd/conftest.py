"""Fixtures: a private dbus-daemon per test, the fake systemd on it, and a client whose backoff never sleeps."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from cgroupfs.systemd.bus import Backoff, SystemdBus
from tests.systemd.fakesystemd import FakeSystemd, PrivateBus


@pytest.fixture
def private_bus() -> Iterator[PrivateBus]:
    if shutil.which("dbus-daemon") is None:
        pytest.skip(
            "dbus-daemon is not installed (Debian package dbus-daemon): the bus tests need a real bus"
        )
    bus = PrivateBus()
    try:
        bus.start()
        yield bus
    finally:
        bus.cleanup()


@pytest.fixture
def fake_systemd(private_bus: PrivateBus) -> Iterator[FakeSystemd]:
    fake = FakeSystemd(private_bus.address).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def client(private_bus: PrivateBus, fake_systemd: FakeSystemd, sleeps: list[float]) -> Iterator[SystemdBus]:
    bus = SystemdBus(
        private_bus.address,
        call_timeout=20.0,
        job_timeout=20.0,
        backoff=Backoff(attempts=4),
        sleep=sleeps.append,
    )
    try:
        yield bus
    finally:
        bus.close()
