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


def parse_timestamp(value: object) -> float | None:
    """An API server timestamp (RFC 3339, `Z` or an offset, MicroTime's fraction too) as UNIX seconds;
    None for anything else (a missing or unreadable time counts as unknown, never as an error)."""
    if not isinstance(value, str) or not value:
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
