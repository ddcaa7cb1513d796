"""The status reporter keeps a report the API server refuses for a while (429, 5xx, no answer) and sends
it again with backoff; a newer condition of the same pod replaces the waiting one; a permanent refusal
(404: the pod is gone) is dropped at once."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from agent.infra.metrics import Metrics
from agent.kube import status as status_mod
from agent.kube.status import APIStatusReporter, PodRef

POD = PodRef("default", "web", "uid-web")


class Core:
    """The API server's pods/status patch answers each of `codes` in turn (0: success), then succeeds."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = list(codes)
        self.attempts: list[str] = []
        self.sent: list[dict[str, Any]] = []
        self.done = threading.Event()

    def patch(self, resource_path: str, body: dict[str, Any], content_type: str, **_: Any) -> None:
        assert resource_path == "/api/v1/namespaces/default/pods/web/status"
        assert content_type == "application/strategic-merge-patch+json"
        reason = body["status"]["conditions"][0]["reason"]
        self.attempts.append(reason)
        code = self.codes.pop(0) if self.codes else 0
        if code:
            raise ApiException(status=code, reason="injected")
        self.sent.append(body)
        self.done.set()


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status_mod, "RETRY_BASE_S", 0.01)


def test_a_condition_refused_with_500_and_429_is_sent_again_until_it_lands() -> None:
    core = Core([500, 429, 503])
    reporter = APIStatusReporter(core, "node-1", Metrics())
    reporter.condition(POD, "Done", "Done", "resized")
    assert core.done.wait(10), core.attempts
    reporter.close()
    assert core.attempts == ["Done"] * 4
    assert [b["status"]["conditions"][0]["reason"] for b in core.sent] == ["Done"]


def test_a_newer_condition_replaces_the_one_waiting_for_its_retry() -> None:
    core = Core([500])
    reporter = APIStatusReporter(core, "node-1", Metrics())
    reporter.condition(POD, "InProgress", "InProgress", "resizing")
    reporter.condition(POD, "Done", "Done", "resized")  # before or after the failed attempt
    assert core.done.wait(10), core.attempts
    reporter.close()
    assert [b["status"]["conditions"][0]["reason"] for b in core.sent] == ["Done"]


def test_a_pod_that_is_gone_is_not_retried() -> None:
    core = Core([404])
    reporter = APIStatusReporter(core, "node-1", Metrics())
    reporter.condition(POD, "Done", "Done", "resized")
    reporter.close()
    assert core.attempts == ["Done"] and core.sent == []
