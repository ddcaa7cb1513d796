"""BENCHMARKS.md states the one commit and machine its `make bench` figures were measured on, and marks
every figure measured elsewhere (a partial `--only` run, an older results file) in its own section; the
figures of their own commands carry their commits too. Rendered from a copy of bench/results."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import figures, provenance, report

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def _stamp(results: Path, name: str, commit: str, date: str, machine: str = "m x86_64") -> None:
    path = results / f"{name}.json"
    data: dict[str, Any] = json.loads(path.read_text())
    data["_meta"] = {"date": date, "machine": machine, "command": "make bench", "commit": commit, "dirty": False}
    path.write_text(json.dumps(data))


@pytest.fixture
def results(tmp_path: Path) -> Path:
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    for f in figures.FIGURES:
        if (copy / f"{f.name}.json").exists():
            _stamp(copy, f.name, "1111111", "2026-01-02 10:00 UTC")
    return copy


def test_one_run_at_one_commit_is_stated_once_and_marks_nothing(results: Path) -> None:
    text = report.render(results)
    assert "Code: commit 1111111 on `m x86_64`:" in text and "measured at this one commit" in text
    assert "Not at this file's commit" not in text


def test_a_figure_from_another_commit_or_machine_is_marked_in_its_section(results: Path) -> None:
    _stamp(results, "daemon", "2222222", "2026-01-01 10:00 UTC")
    _stamp(results, "vpa", "1111111", "2026-01-01 11:00 UTC", machine="other x86_64")
    text = report.render(results)
    assert "**not one commit**" in text
    assert "figure 5 at commit 2222222 on `m x86_64`" in text and "figure 9 at commit 1111111 on `other x86_64`" in text
    sections = text.split("\n## ")
    daemon = next(s for s in sections if s.startswith("5. "))
    vpa = next(s for s in sections if s.startswith("9. "))
    assert "**Not at this file's commit (1111111):** measured at commit 2222222 on `m x86_64`" in daemon
    assert "on `other x86_64`" in vpa and "Not at this file's commit" in vpa
    others = [s for s in sections if not s.startswith(("5. ", "9. "))]
    assert not any("Not at this file's commit" in s for s in others)


def test_the_header_states_the_newest_run_and_own_command_figures_their_commits(results: Path) -> None:
    _stamp(results, "incremental", "3333333", "2026-02-01 10:00 UTC")
    e2e: dict[str, Any] = json.loads((results / "e2e_k8s.json").read_text())
    e2e["commits"] = {"oracle realk8s-node": "4444444", "beside": "4444444"}
    (results / "e2e_k8s.json").write_text(json.dumps(e2e))
    text = report.render(results)
    assert "Figure 2 at commit 3333333 on `m x86_64` (the newest run, 2026-02-01 10:00 UTC)" in text
    assert "figure 8 from `make e2e-k8s` at commit 4444444" in text


def test_no_figure_describes_the_removed_pipeline_reconciler(results: Path) -> None:
    text = report.render(results)
    assert not [line for line in text.splitlines() if line.startswith("|") and "pipeline" in line]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_the_commit_is_dirty_for_code_changes_not_for_the_benchmarks_own_outputs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "agent").mkdir(parents=True)
    (repo / "bench" / "results").mkdir(parents=True)
    (repo / "agent" / "x.py").write_text("x = 1\n")
    (repo / "bench" / "results" / "f.json").write_text("{}\n")
    (repo / "BENCHMARKS.md").write_text("# Benchmarks\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = _git(repo, "rev-parse", "--short=7", "HEAD").strip()
    (repo / "bench" / "results" / "f.json").write_text('{"new": 1}\n')
    (repo / "BENCHMARKS.md").write_text("# Benchmarks, regenerated\n")
    assert provenance.current(repo) == provenance.Code(head, False)
    (repo / "agent" / "x.py").write_text("x = 2\n")
    assert provenance.current(repo).label == f"{head} (dirty)"
