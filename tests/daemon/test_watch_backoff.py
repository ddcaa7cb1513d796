"""The watch loop's retry delays (seen in the soak: after a few dropped streams and failed lists spread over
a minute, each one a success apart, a drop left the daemon deaf for 30 s). A stream that delivered
something and a list that answered were successes: the next failure waits the base delay again. Only
failures in a row grow the delay. Driven with a fake client call; the waits are recorded, not slept."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent.infra.metrics import Metrics
from agent.kube import watch as watch_module
from agent.kube.watch import Watcher

BOOKMARK = json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}})


class _Stream:
    """A watch response: its lines, then the connection drops."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def release_conn(self) -> None:
        pass


class _List:
    data = json.dumps({"items": [], "metadata": {"resourceVersion": "5"}})


class _Waits(threading.Event):
    """The loop's `stop`: records every backoff wait and stops the loop after `limit` of them."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.delays: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.delays.append(float(timeout or 0))
        if len(self.delays) >= self.limit:
            self.set()
        return self.is_set()


class _Sink:
    def __init__(self) -> None:
        self.views: list[str | None] = []  # what the watcher said of the view, in order

    def snapshot(self, pods: list[Any]) -> None:
        pass

    def behind(self, reason: str | None) -> None:
        self.views.append(reason)

    def upsert(self, pod: Any) -> None:
        pass

    def removed(self, uid: str, key: str) -> None:
        pass


def _dropping(lines: list[str]) -> Iterator[str]:
    yield from lines
    raise ConnectionResetError(104, "Connection reset by peer")


@pytest.fixture(autouse=True)
def _lines_of_fake_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "_lines", lambda resp: _dropping(resp.lines))


def _run(call: Any, failures: int) -> list[float]:
    stop = _Waits(failures)
    Watcher(call, "pods of node n1", Metrics()).run(_Sink(), stop)
    return stop.delays


def test_streams_that_delivered_before_dropping_are_resumed_after_the_base_delay_every_time() -> None:
    def call(**kw: Any) -> Any:
        return _Stream([BOOKMARK]) if kw.get("watch") else _List()

    assert _run(call, 5) == [0.5] * 5


def test_a_list_that_answered_resets_the_delay_of_the_next_failure() -> None:
    watches = [0]

    def call(**kw: Any) -> Any:  # list, watch refused, watch 410 (relist): again and again
        if not kw.get("watch"):
            return _List()
        watches[0] += 1
        if watches[0] % 2:
            raise ConnectionRefusedError(111, "Connection refused")
        return _Stream([json.dumps({"type": "ERROR", "object": {"code": 410, "message": "too old"}})])

    assert _run(call, 4) == [0.5] * 4


def test_failures_in_a_row_grow_the_delay() -> None:
    def call(**kw: Any) -> Any:
        if kw.get("watch"):
            return _Stream([])  # dropped before it delivered anything
        return _List()

    assert _run(call, 5) == [0.5, 1.0, 2.0, 4.0, 8.0]


def test_the_view_is_behind_from_a_failed_watch_until_one_connects_again() -> None:
    """The daemon holds drift back while its view of the pods may be behind (agent.daemon.gate): the
    watcher says so at a failure that delivered nothing, and says it is current once a list answers or a
    watch connects from the last resourceVersion."""
    watches = [0]

    def call(**kw: Any) -> Any:  # list; watch refused twice; a watch that connects and drops
        if not kw.get("watch"):
            return _List()
        watches[0] += 1
        if watches[0] <= 2:
            raise ConnectionRefusedError(111, "Connection refused")
        return _Stream([BOOKMARK])

    sink, stop = _Sink(), _Waits(3)
    Watcher(call, "pods of node n1", Metrics()).run(sink, stop)
    behind = [v is not None for v in sink.views]
    assert behind == [False, True, True, False]  # listed, refused, refused, connected
    assert "Connection refused" in str(sink.views[1])
