"""The `api` fixture of the publishing tests (tests/recommender/publish_env.serving)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.recommender.publish_env import serving
from tests.support.fakeapi.cluster import FakeCluster


@pytest.fixture
def api() -> Iterator[tuple[FakeCluster, client.ApiClient]]:
    yield from serving()
