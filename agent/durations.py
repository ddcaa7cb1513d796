"""Go-style durations ("100ms", "1s", "250us", "1.5h") as the kubelet's and VPA's configurations write them."""

from __future__ import annotations

import re
from typing import Final

_DURATION_RE: Final = re.compile(r"^(\d+(?:\.\d+)?)(us|µs|ms|s|m|h)$")
_DURATION_UNITS_US: Final = {"us": 1, "µs": 1, "ms": 1000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}


def parse_duration_us(text: str) -> int:
    """A Go-style duration ("100ms", "1s", "250us") in microseconds."""
    m = _DURATION_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a duration like 100ms")
    return int(float(m.group(1)) * _DURATION_UNITS_US[m.group(2)])
