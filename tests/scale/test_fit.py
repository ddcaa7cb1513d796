"""The scale harness's fit and extrapolation (bench/scale/fit.py): least squares, the kubelet model."""

from __future__ import annotations

import pytest

from bench.scale import fit


def test_a_line_through_exact_points_is_found_with_r2_one() -> None:
    line = fit.linear([1, 4, 16], [3, 9, 33])
    assert line.slope == pytest.approx(2.0)
    assert line.intercept == pytest.approx(1.0)
    assert line.r2 == pytest.approx(1.0)
    assert line.at(100) == pytest.approx(201.0)


def test_noisy_points_give_the_least_squares_line() -> None:
    line = fit.linear([0, 1, 2, 3], [1, 3, 2, 4])
    assert line.slope == pytest.approx(0.8)
    assert line.intercept == pytest.approx(1.3)
    assert 0 < line.r2 < 1


def test_one_point_is_a_line_through_the_origin_and_none_is_zero() -> None:
    assert fit.linear([4], [8]).at(10) == pytest.approx(20.0)
    assert fit.linear([], []).at(10) == 0.0
    assert fit.linear([2, 2], [1, 3]).at(4) == pytest.approx(4.0)  # one x only: its mean, through the origin
    with pytest.raises(ValueError):
        fit.linear([1, 2], [1])


def test_the_kubelets_of_5000_nodes_write_their_leases_and_statuses() -> None:
    k = fit.kubelets(5000)
    assert k.writes_per_s == pytest.approx(5000 * 6.2 / 60)
    assert k.watch_events_per_s == k.writes_per_s
    assert k.total == pytest.approx(2 * 5000 * 6.2 / 60)


def test_agents_that_receive_every_change_cost_far_more_than_the_kubelets() -> None:
    every = fit.agents(events_per_change=0.9, writes_per_min=0.2)
    assert every.watch_events_per_s == pytest.approx(5000 * 0.9 * 10_000 / 60)
    assert fit.share_of_kubelets(every, fit.kubelets()) > 100
    filtered = fit.agents(events_per_change=0.0, writes_per_min=0.2)
    assert fit.share_of_kubelets(filtered, fit.kubelets()) == pytest.approx((5000 * 0.2 / 60) / (2 * 5000 * 6.2 / 60))


def test_objects_at_scale_follow_the_mix_per_vpa() -> None:
    assert fit.objects_at_scale(356, 60) == round(356 * 10_000 / 60)
    assert fit.objects_at_scale(10, 0) == 0
