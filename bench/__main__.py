"""Run the benchmarks, write bench/results/<figure>.json and regenerate BENCHMARKS.md.

Every figure of one run is stamped with the commit read before the first one starts. A figure that
cannot be imported, fails, or skips (no root, no containerd) keeps its earlier results, is named with
its error at the end, and makes the run exit 1; BENCHMARKS.md then marks what is not from this run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import figures, provenance, report

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Failure:
    figure: str
    error: str


def _measure(figure: figures.Figure, repeat: int) -> dict[str, Any]:
    data = figure.load()(repeat)
    if "skipped" in data:
        tail = str(data.get("output_tail", ""))[-1500:]
        raise RuntimeError(f"skipped: {data['skipped']}" + (f"\n{tail}" if tail else ""))
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--only", nargs="+", choices=figures.names(), metavar="NAME",
                   help=f"figures to run (default: all): {', '.join(figures.names())}")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    code = provenance.current()
    chosen = [figures.by_name(n) for n in args.only] if args.only else list(figures.FIGURES)
    RESULTS.mkdir(exist_ok=True)
    failures: list[Failure] = []
    for figure in chosen:
        print(f"bench: {figure.name} (figure {figure.number}) ...", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            data = _measure(figure, args.repeat)
        except Exception as err:
            traceback.print_exc(file=sys.stderr)
            failures.append(Failure(figure.name, f"{type(err).__name__}: {err}"))
            continue
        data["_meta"] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": provenance.machine(),
            "command": "make bench" + (f" (python -m bench --only {figure.name})" if args.only else ""),
            "commit": code.commit,
            "dirty": code.dirty,
            "wall_s": round(time.monotonic() - t0, 1),
        }
        (RESULTS / f"{figure.name}.json").write_text(json.dumps(data, indent=2) + "\n")
    report.write_markdown(RESULTS)
    for f in failures:
        print(f"bench: FAILED figure {figures.by_name(f.figure).number} ({f.figure}): {f.error}", file=sys.stderr)
    if failures:
        print(f"bench: {len(failures)} of {len(chosen)} figure(s) failed; their earlier results (if any) are "
              "kept and marked in BENCHMARKS.md as not from this run", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
