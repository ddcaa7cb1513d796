"""The soak harness itself, on a tiny node: the same code path as the full soak, with every fault kind
armed at least once. Only correctness is asserted; the timing figures are reported, never asserted."""

from __future__ import annotations

from pathlib import Path

from tests.reliability.soak import run_soak
from tests.reliability.soak_faults import FAULTS


def test_a_tiny_soak_loses_nothing_and_reports_every_figure(tmp_path: Path) -> None:
    result = run_soak(tmp_path / "soak", pods=20, events=60, duration_s=10.0, fault_every_s=0.5)
    assert (result.resizes_lost, result.lost_samples) == (0, ())
    assert (result.violations, result.violation_samples) == (0, ())
    assert (result.crashes, result.raw_lines, result.probes_unresolved) == (0, 0, 0)
    assert result.healthz_end == 200 and result.exit_code == 0
    assert result.events_sent == 60 and result.events_by_kind["resize"] > 0
    assert set(result.faults_by_kind) == set(FAULTS)
    assert result.pods_checked > 0 and result.resizes_checked > 0 and result.probes > 0
    assert result.samples and result.rss_first_mib > 0 and result.fds_last > 0 and result.threads_last > 0
    assert result.apply_latency.first.n > 0 and result.reconcile_pod.first.n > 0
    assert set(result.to_json()) >= {"rss_growth_pct", "apply_latency", "reconcile_tiers", "samples"}
