"""The units and phrases every figure's section shares (milliseconds, a verdict against a target, the
line naming when and how a figure was measured), so the sections read alike and agree on rounding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.1 else f"{seconds * 1000:.0f} ms"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**MISSED**"


def load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def meta(data: dict[str, Any]) -> str:
    stamp = data.get("_meta", {})
    return f"Measured {stamp.get('date', '?')}; command: `{stamp.get('command', 'make bench')}`."


THE_RECONCILER = "engine"  # the key tests/e2e/test_bench_resize.py records the daemon's one reconciler under


def left_out(kinds: list[str], figure: str) -> list[str]:
    """Rows of reconcilers the daemon no longer has, in results measured before it had one: not shown as
    if they described the code."""
    if not kinds:
        return []
    return ["", f"Left out: rows of reconciler(s) {', '.join(kinds)} in these results, measured before the daemon had "
            f"one reconciler; `python -m bench --only {figure}` measures the one it has."]

