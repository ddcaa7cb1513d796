"""The CRI client tests' fixtures: a client of the in-process fake runtime whose retries sleep on a
recorder, and a running container `app` with known resources to update and read back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.cri.client import CRIClient
from agent.cri.v1 import api_pb2 as pb
from tests.cri.client_support import UID, Sleeps
from tests.support.fake_cri.serving import FakeCRI
from tests.support.fake_cri.state import FakeContainer


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(fake_cri: FakeCRI, sleeps: Sleeps) -> Iterator[CRIClient]:
    with CRIClient(fake_cri.endpoint, timeout=5.0, sleep=sleeps) as c:
        yield c


@pytest.fixture
def app(fake_cri: FakeCRI) -> FakeContainer:
    sandbox = fake_cri.service.add_sandbox(UID, "web", "shop")
    return fake_cri.service.add_container(
        sandbox,
        "app",
        resources=pb.LinuxContainerResources(
            cpu_period=100000, cpu_quota=50000, cpu_shares=512, memory_limit_in_bytes=128 << 20
        ),
    )
