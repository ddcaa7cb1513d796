"""The figure of "At scale" as a hand-written SVG (no plotting library): small charts of measured points,
the fitted line through them and the goal where there is one (pure: data in, SVG text out)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from bench.scale.fit import linear

W, H = 420, 260  # one chart
PAD_L, PAD_R, PAD_T, PAD_B = 62, 16, 34, 44


@dataclass(frozen=True)
class Chart:
    title: str
    xlabel: str
    ylabel: str
    points: Sequence[tuple[float, float]]
    goal: float | None = None
    goal_label: str = "goal"


def nice_max(v: float) -> float:
    """The axis' top: 1, 2 or 5 times a power of ten, at or above v."""
    if v <= 0:
        return 1.0
    mag = 10.0 ** len(str(int(v))) / 10 if v >= 1 else 1.0
    while mag > v:
        mag /= 10
    for m in (1, 2, 5, 10):
        if m * mag >= v:
            return m * mag
    return 10 * mag


def fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}" if abs(v) >= 0.01 else f"{v:.0e}"


def chart(c: Chart, ox: float, oy: float) -> list[str]:
    xs = [p[0] for p in c.points] or [1.0]
    ys = [p[1] for p in c.points] or [1.0]
    xmax = nice_max(max(xs))
    ymax = nice_max(max([*ys, c.goal or 0.0]) * 1.1)
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def px(x: float) -> float:
        return ox + PAD_L + pw * x / xmax

    def py(y: float) -> float:
        return oy + PAD_T + ph * (1 - min(max(y, 0.0), ymax) / ymax)

    out = [f'<text x="{ox + W / 2:.0f}" y="{oy + 18:.0f}" text-anchor="middle" font-weight="bold">{escape(c.title)}</text>',
           f'<rect x="{ox + PAD_L}" y="{oy + PAD_T}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for i in range(5):
        y = ymax * i / 4
        out.append(f'<line x1="{ox + PAD_L}" x2="{ox + PAD_L + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{ox + PAD_L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{fmt(y)}</text>')
        x = xmax * i / 4
        out.append(f'<text x="{px(x):.1f}" y="{oy + PAD_T + ph + 16}" text-anchor="middle">{fmt(x)}</text>')
    out.append(f'<text x="{ox + PAD_L + pw / 2:.0f}" y="{oy + H - 8}" text-anchor="middle">{escape(c.xlabel)}</text>')
    out.append(f'<text transform="translate({ox + 14},{oy + PAD_T + ph / 2:.0f}) rotate(-90)" text-anchor="middle">{escape(c.ylabel)}</text>')
    if c.goal is not None:
        out.append(f'<line x1="{ox + PAD_L}" x2="{ox + PAD_L + pw}" y1="{py(c.goal):.1f}" y2="{py(c.goal):.1f}" '
                   'stroke="#2a7" stroke-dasharray="6 4"/>')
        out.append(f'<text x="{ox + PAD_L + pw - 4}" y="{py(c.goal) - 4:.1f}" text-anchor="end" fill="#2a7">{escape(c.goal_label)}</text>')
    if len(c.points) >= 2:
        line = linear(xs, ys)
        out.append(f'<line x1="{px(0):.1f}" y1="{py(line.at(0)):.1f}" x2="{px(xmax):.1f}" y2="{py(line.at(xmax)):.1f}" '
                   'stroke="#c33" stroke-width="1.5"/>')
    for x, y in c.points:
        out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="#36c"/>')
    return out


def figure(charts: Sequence[Chart], title: str, note: str) -> str:
    cols = 2
    rows = -(-len(charts) // cols)
    width, height = cols * W, rows * H + 50
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            'font-family="sans-serif" font-size="11">',
            f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="{width / 2:.0f}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{escape(title)}</text>']
    for i, c in enumerate(charts):
        body += chart(c, (i % cols) * W, 30 + (i // cols) * H)
    body.append(f'<text x="8" y="{height - 8}" fill="#555">{escape(note)}</text>')
    body.append("</svg>")
    return "\n".join(body) + "\n"
