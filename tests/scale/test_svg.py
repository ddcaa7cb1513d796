"""The hand-written SVG of "At scale" (bench/scale/svg.py): well-formed, one circle per point, the fitted
line and the goal drawn."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from bench.scale import svg

NS = "{http://www.w3.org/2000/svg}"


def test_a_figure_of_two_charts_is_well_formed_with_its_points_fit_and_goal() -> None:
    charts = [svg.Chart("share", "objects", "share", [(356, 0.9), (1424, 0.9), (5696, 0.91)], 0.01, "goal 1 %"),
              svg.Chart("events <&>", "agents", "events/s", [(4, 100.0)])]
    root = ET.fromstring(svg.figure(charts, "title", "note"))
    assert root.tag == f"{NS}svg"
    assert len(root.findall(f"{NS}circle")) == 4
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert "goal 1 %" in texts and "events <&>" in texts
    dashed = [el for el in root.iter(f"{NS}line") if el.get("stroke-dasharray")]
    assert len(dashed) == 1  # the one goal
    fitted = [el for el in root.iter(f"{NS}line") if el.get("stroke") == "#c33"]
    assert len(fitted) == 1  # a line only where there are two points or more


def test_axes_end_at_a_round_number() -> None:
    assert [svg.nice_max(v) for v in (0, 0.009, 0.9, 3, 17, 5696, 1000)] == [1.0, 0.01, 1.0, 5, 20, 10000, 1000]
    assert svg.fmt(5000) == "5k" and svg.fmt(0.5) == "0.5" and svg.fmt(0) == "0"
