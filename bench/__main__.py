"""Run the benchmarks, write bench/results/<figure>.json and regenerate BENCHMARKS.md."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench import report

RESULTS = Path(__file__).resolve().parent / "results"


def _commit() -> str | None:
    """The code a figure is measured at (git HEAD, marked when agent/ or cgroupfs/ differ from it)."""
    try:
        from bench.more import commit
    except ImportError:
        return None
    return commit()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench")
    p.add_argument("--only", nargs="*", help="figures to run (default: all available)")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    figures = report.available()
    chosen = args.only or list(figures)
    RESULTS.mkdir(exist_ok=True)
    for name in chosen:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        data = figures[name](args.repeat)
        data["_meta"] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.node()} {platform.machine()} {platform.python_implementation()} {platform.python_version()}",
            "command": "make bench" + (f" (python -m bench --only {name})" if args.only else ""),
            "commit": _commit(),
        }
        (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    report.write_markdown(RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
