"""A tier limit the kernel would not lower (set at usage): the daemon's gauge and its one warning."""

from __future__ import annotations

from typing import Any, cast

from structlog.testing import capture_logs

from agent.daemon.core import Daemon
from agent.daemon.reconciler import Outcome, Report
from agent.infra.metrics import Metrics
from agent.pipeline.execute import Shortfall

PATH = "memory/kubepods/besteffort/memory.limit_in_bytes"


def _gauge(m: Metrics) -> float | None:
    return m.registry.get_sample_value("kube_cgroup_agent_tier_memory_shortfall_bytes", {"cgroup": PATH})


def test_a_shortfall_sets_the_gauge_warns_once_and_clears_when_lowered() -> None:
    m = Metrics()
    d = Daemon(cast(Any, None), cast(Any, None), cast(Any, None), m, node=None, resync_period_s=60)
    short = Report(
        "tiers", Outcome.APPLIED, 1, (PATH,), shortfalls=(Shortfall(PATH, 1000 << 20, 1100 << 20),)
    )
    with capture_logs() as logs:
        d.reporting.shortfalls(short)
        d.reporting.shortfalls(short)  # the next pass, still short of the same target: no second warning
        assert _gauge(m) == 100 << 20
        d.reporting.shortfalls(Report("tiers", Outcome.APPLIED, 1, (PATH,)))  # lowered to the target
    assert _gauge(m) == 0
    events = [e["event"] for e in logs]
    assert events == ["tier.memory_shortfall", "tier.memory_converged"]
    assert logs[0]["log_level"] == "warning" and logs[0]["set_to"] == 1100 << 20
