"""BENCHMARKS.md from bench/results/*.json.

The header names the one commit and machine the `make bench` figures were measured on. A partial run
(`--only`) or an older results file can leave figures at different commits: then the header says so,
lists which figure is from where, and each such figure's section carries the mark itself, so no figure
passes for a measurement of code it was not measured on. The figures measured by their own commands
(a real cluster, a registry) are named in the header with the commit each was measured at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import figures, provenance, sections

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "BENCHMARKS.md"


@dataclass(frozen=True)
class Origin:
    """Where a results file was measured: its code and machine (what must agree), when and how."""

    commit: str
    machine: str
    date: str
    command: str

    def agrees(self, other: Origin) -> bool:
        return (self.commit, self.machine) == (other.commit, other.machine)


def origin(data: dict[str, Any]) -> Origin | None:
    meta = data.get("_meta") or {}
    commit = meta.get("commit")
    if not commit:
        return None
    commit = str(commit)
    if " (" in commit:  # written before `dirty` was recorded: "<hash> (agent/ or cgroupfs/ had uncommitted changes)"
        commit = commit.split(" (", 1)[0] + " (dirty)"
    elif meta.get("dirty"):
        commit += " (dirty)"
    return Origin(commit, str(meta.get("machine", "?")), str(meta.get("date", "?")), str(meta.get("command", "?")))


def _load(results: Path) -> dict[str, dict[str, Any]]:
    names = [f.name for f in figures.FIGURES] + [e.name for e in figures.ELSEWHERE]
    return {n: json.loads((results / f"{n}.json").read_text()) for n in names if (results / f"{n}.json").exists()}


def reference(loaded: dict[str, dict[str, Any]]) -> Origin | None:
    """The newest `make bench` run among the results: the commit the header states."""
    origins = [o for f in figures.FIGURES if f.name in loaded and (o := origin(loaded[f.name])) is not None]
    return max(origins, key=lambda o: o.date, default=None)


def _numbers(ns: list[int]) -> str:
    return ("figure " if len(ns) == 1 else "figures ") + ", ".join(map(str, sorted(ns)))


def _code_lines(loaded: dict[str, dict[str, Any]], ref: Origin | None) -> list[str]:
    missing = [f for f in figures.FIGURES if f.name not in loaded]
    groups: dict[str, list[int]] = {}
    for f in figures.FIGURES:
        if f.name in loaded:
            o = origin(loaded[f.name])
            key = "commit not recorded" if o is None else f"commit {o.commit} on `{o.machine}`"
            groups.setdefault(key, []).append(f.number)
    lines: list[str] = []
    if ref is None:
        lines.append("Code: no `make bench` results record their commit yet.")
    elif len(groups) == 1:
        lines.append(f"Code: commit {ref.commit} on `{ref.machine}`: {_numbers(next(iter(groups.values())))}, "
                     "measured at this one commit.")
    else:
        mine = f"commit {ref.commit} on `{ref.machine}`"
        others = "; ".join(f"{_numbers(ns)} at {key}" for key, ns in groups.items() if key != mine)
        lines += [
            f"Code: **not one commit**. {_numbers(groups[mine]).capitalize()} at {mine} (the newest run, {ref.date});",
            f"{others}. Each of those says so in its section; `make bench` measures every figure at one commit.",
        ]
    if missing:
        lines.append("No results yet: " + ", ".join(f"figure {f.number} (`python -m bench --only {f.name}`)" for f in missing) + ".")
    return lines


def _elsewhere_commit(name: str, data: dict[str, Any] | None, results: Path) -> str:
    if data is None:
        return "(no results yet)"
    parts: dict[str, str] = data.get("commits") or ({"": data["commit"]} if data.get("commit") else {})
    if not parts:
        last = provenance.last_committed(results / f"{name}.json")
        return "at a commit not recorded" + (f" (the results were last committed with {last})" if last else "")
    if len(set(parts.values())) == 1:
        return f"at commit {next(iter(parts.values()))}"
    return "at commits " + ", ".join(f"{c} ({part})" for part, c in sorted(parts.items()))


def header(results: Path, loaded: dict[str, dict[str, Any]], ref: Origin | None) -> list[str]:
    ran = [f.number for f in figures.FIGURES]
    walls = [loaded[f.name].get("_meta", {}).get("wall_s") for f in figures.FIGURES if f.name in loaded]
    took = (
        f" (their own times add to {sum(walls) / 60:.0f} minutes here)"
        if walls and len(walls) == len(figures.FIGURES) and all(isinstance(w, int | float) for w in walls)
        else ""
    )
    elsewhere = "; ".join(
        f"{e.what} from `{e.command}` {_elsewhere_commit(e.name, loaded.get(e.name), results)}"
        for e in figures.ELSEWHERE
    )
    return [
        "# Benchmarks",
        "",
        "Regenerated by `make bench` (`python -m bench`; one figure: `python -m bench --only NAME`) from",
        "`bench/results/*.json`. Timings are medians over repeated runs with their spread; no test asserts a",
        "timing.",
        "",
        *sections.machine(),
        *_code_lines(loaded, ref),
        f"Not run by `make bench`, measured by their own commands: {elsewhere}.",
        "",
        f"Commands: `make bench` runs {_numbers(ran)}{took} and rewrites this file; one figure:",
        f"`.venv/bin/python -m bench --only NAME` (NAME: {', '.join(figures.names())}).",
        "A figure that fails or skips keeps its earlier results, is named with its error, and makes the run exit 1.",
        "Figures 3 and 4 need root on a cgroup v1 host; figure 4 starts `make e2e`'s private containerd through",
        "`KCG_BENCH_OUT=<file> PYTEST_ARGS='-k test_bench_resize' bash tests/e2e/run.sh` (`make e2e` skips that module).",
        "",
    ]


def mark(data: dict[str, Any], ref: Origin | None) -> list[str]:
    """The line a `make bench` figure carries when it was not measured at the header's commit."""
    o = origin(data)
    if ref is None or (o is not None and o.agrees(ref)):
        return []
    where = "at a commit not recorded" if o is None else f"at commit {o.commit} on `{o.machine}`, {o.date} (`{o.command}`)"
    return [f"**Not at this file's commit ({ref.commit}):** measured {where}.", ""]


def render(results: Path) -> str:
    loaded = _load(results)
    ref = reference(loaded)
    lines = header(results, loaded, ref)
    ran = set(figures.names())
    for name, section in sections.in_order(results):
        data = loaded.get(name)
        if data is None:
            continue
        body = section(data)
        if name in ran:
            body[2:2] = mark(data, ref)  # under the heading and its blank line
        lines += body
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(results: Path, out: Path | None = None) -> None:
    (out or OUT).write_text(render(results))
