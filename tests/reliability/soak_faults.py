"""The faults a soak injects at a steady rate: API errors and throttling on lists, watches, status and
events, dropped watches and 410 Gone, CRI errors on UpdateContainerResources; and clearing the armed
ones that were never hit, so the convergence at the end runs without faults."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from tests.daemon.harness import Env
from tests.support.fake_cri.servicer import RUNC_WRAP
from tests.support.fake_cri.serving import FakeCRI
from tests.support.fakeapi.cluster import FakeCluster

UPDATE = "UpdateContainerResources"


Fault = Callable[[FakeCluster, FakeCRI], None]


def _api(method: str, fragment: str, code: int, then: Callable[[FakeCluster], Any] | None = None) -> Fault:
    def inject(cluster: FakeCluster, cri: FakeCRI) -> None:
        cluster.fail(method, fragment, code)
        if then is not None:
            then(cluster)

    return inject


def _cri(code: grpc.StatusCode, message: str) -> Fault:
    def inject(cluster: FakeCluster, cri: FakeCRI) -> None:
        cri.service.inject_error(UPDATE, code, message)

    return inject


def _gone(cluster: FakeCluster) -> None:
    cluster.compact()
    cluster.drop_watches()


def _drop(cluster: FakeCluster) -> None:
    cluster.drop_watches()


FAULTS: dict[str, Fault] = {
    # list faults are hit at the relist a 410 forces; watch faults at the reopen a drop forces
    "list_500": _api("GET", "limit=", 500, _gone),
    "list_429": _api("GET", "limit=", 429, _gone),
    "watch_500": _api("GET", "watch=true", 500, _drop),
    "watch_429": _api("GET", "watch=true", 429, _drop),
    "status_500": _api("PATCH", "/status", 500),
    "status_429": _api("PATCH", "/status", 429),
    "event_500": _api("POST", "/events", 500),
    "event_429": _api("POST", "/events", 429),
    "watch_dropped": lambda cluster, cri: _drop(cluster),
    "gone_410": lambda cluster, cri: _gone(cluster),
    "cri_unavailable": _cri(grpc.StatusCode.UNAVAILABLE, "connection error: connection refused"),
    "cri_deadline": _cri(grpc.StatusCode.DEADLINE_EXCEEDED, "context deadline exceeded"),
    "cri_runc": _cri(
        grpc.StatusCode.UNKNOWN, RUNC_WRAP.format("unable to freeze container: freezer.state: device or resource busy")
    ),
}


def disarm(env: Env) -> int:
    """Clear every armed fault; returns how many were never hit."""
    cluster = env.cluster
    with cluster.lock:
        left = sum(int(f[3]) for f in cluster.faults)
        cluster.faults.clear()
    service = env.cri.service
    with service.lock:
        left += sum(len(v) for v in service.errors.values())
        service.errors.clear()
    return left
