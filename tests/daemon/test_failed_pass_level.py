"""A pass that failed (a write the agent could not make: no D-Bus on a systemd node, a refused CRI call)
is logged as a warning, so an operator filtering on level sees it; converged passes stay at debug."""

from __future__ import annotations

from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from agent.daemon.core import Daemon
from agent.daemon.reconciler import Outcome, Report
from agent.infra.metrics import Metrics


@pytest.mark.parametrize(
    ("report", "level"),
    [
        (Report("tiers", Outcome.FAILED, errors=(("BusUnavailable", "no /run/dbus/system_bus_socket"),)), "warning"),
        (Report("tiers", Outcome.APPLIED, 1, ("cpu/kubepods/burstable/cpu.shares",)), "info"),
        (Report("tiers", Outcome.CONVERGED), "debug"),
    ],
    ids=["failed", "applied", "converged"],
)
def test_the_level_of_a_pass(report: Report, level: str) -> None:
    d = Daemon(cast(Any, None), cast(Any, None), cast(Any, None), Metrics(), node=None, resync_period_s=60)
    with capture_logs() as logs:
        d._finish("tiers", None, report, d.clock())
    line = next(e for e in logs if e["event"] == "reconcile")
    assert line["log_level"] == level and line["outcome"] == report.outcome.value
