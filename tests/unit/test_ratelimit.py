"""The client-side limit of the daemon's API requests (agent.infra.ratelimit): a burst at once, then the
rate; a bucket never holds more than its burst; and the daemon's settings reach it."""

from __future__ import annotations

import pytest

from agent.infra.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_a_burst_goes_at_once_then_the_rate_holds() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=5, burst=3, clock=clock, sleep=clock.sleep)
    assert [bucket.wait() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.wait() == pytest.approx(0.2)  # the fourth waits for one token at 5 a second
    assert bucket.wait() == pytest.approx(0.2)
    assert clock.now == pytest.approx(0.4) and bucket.waited_s == pytest.approx(0.4)


def test_an_idle_bucket_refills_to_its_burst_and_no_more() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock, sleep=clock.sleep)
    bucket.wait(), bucket.wait()
    clock.now += 60.0  # a quiet minute: two tokens, not six hundred
    assert [bucket.wait() for _ in range(2)] == [0.0, 0.0]
    assert bucket.wait() == pytest.approx(0.1)


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_a_bucket_that_could_never_give_a_token_is_refused(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="token bucket"):
        TokenBucket(qps, burst)


def test_the_settings_parse_and_refuse_a_bad_rate() -> None:
    from agent.config.keys import KEYS
    from agent.config.values import parse_positive_float

    field, parse = KEYS["apiQPS"]
    assert field == "api_qps" and parse(7) == 7.0 and parse(0.5) == 0.5
    for bad in (0, -1, True, "5", float("nan"), float("inf")):
        with pytest.raises(ValueError):
            parse_positive_float(bad)
    assert KEYS["apiBurst"][0] == "api_burst"


def test_every_request_of_a_limited_client_takes_a_token() -> None:
    from agent.infra.apiserver import APIServer, limit

    class Client:
        pass

    taken: list[int] = []

    class Bucket:
        def wait(self) -> float:
            taken.append(1)
            raise RuntimeError("stop before any I/O")

    server = APIServer(limit(Client(), Bucket()))
    with pytest.raises(RuntimeError, match="stop before"):
        server.get("/api/v1/nodes/n1")
    assert taken == [1]
