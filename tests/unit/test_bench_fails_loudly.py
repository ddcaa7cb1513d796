"""`python -m bench` names every figure it could not import, run or measure and exits 1 (their earlier
results kept, BENCHMARKS.md still regenerated); an unknown `--only` name exits 2 listing the names.
The figures here are stand-ins: no real figure runs."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import bench.__main__ as cli
from bench import figures, provenance, report


def _module(name: str, run: Any) -> str:
    mod = types.ModuleType(name)
    mod.run = run  # type: ignore[attr-defined]
    sys.modules[name] = mod
    return name


@pytest.fixture
def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    def broken(repeat: int) -> dict[str, Any]:
        raise OSError("no such cgroup")

    fake = (
        figures.Figure("good", 1, _module("kcg_bench_good", lambda repeat: {"value": repeat})),
        figures.Figure("unimportable", 2, "kcg_bench_no_such_module"),
        figures.Figure("raising", 3, _module("kcg_bench_raising", broken)),
        figures.Figure("skipping", 4, _module("kcg_bench_skipping", lambda repeat: {"skipped": "needs root"})),
    )
    monkeypatch.setattr(figures, "FIGURES", fake)
    results = tmp_path / "results"
    results.mkdir()
    (results / "raising.json").write_text(json.dumps({"earlier": True}))
    monkeypatch.setattr(cli, "RESULTS", results)
    monkeypatch.setattr(report, "OUT", tmp_path / "BENCHMARKS.md")
    monkeypatch.setattr(provenance, "current", lambda root=provenance.ROOT: provenance.Code("1234567", False))
    yield results
    for name in ("kcg_bench_good", "kcg_bench_raising", "kcg_bench_skipping"):
        sys.modules.pop(name, None)


def test_every_failing_figure_is_named_and_the_run_exits_1(stand_ins: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--repeat", "3"]) == 1
    err = capsys.readouterr().err
    assert "FAILED figure 2 (unimportable): ModuleNotFoundError" in err
    assert "FAILED figure 3 (raising): OSError: no such cgroup" in err
    assert "FAILED figure 4 (skipping): RuntimeError: skipped: needs root" in err
    assert "(good)" not in err.split("FAILED", 1)[1]
    good = json.loads((stand_ins / "good.json").read_text())
    assert good["value"] == 3 and good["_meta"]["commit"] == "1234567" and good["_meta"]["dirty"] is False
    assert json.loads((stand_ins / "raising.json").read_text()) == {"earlier": True}  # kept, not overwritten
    assert not (stand_ins / "skipping.json").exists()
    assert (stand_ins.parent / "BENCHMARKS.md").exists()


def test_a_run_whose_figures_all_work_exits_0(stand_ins: Path) -> None:
    assert cli.main(["--only", "good"]) == 0
    assert json.loads((stand_ins / "good.json").read_text())["_meta"]["command"] == "make bench (python -m bench --only good)"


def test_an_unknown_figure_exits_2_listing_the_names(stand_ins: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--only", "incremental2"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "incremental2" in err
    for name in ("good", "unimportable", "raising", "skipping"):
        assert name in err


def test_the_real_registry_lists_each_figure_once() -> None:
    numbers = [f.number for f in figures.FIGURES] + [e.number for e in figures.ELSEWHERE]
    assert len(set(figures.names())) == len(figures.FIGURES)
    assert set(numbers) == set(range(1, 15))
