"""One section of the config file (`vpa:`, `rollout:`): the frame every section parser shares, and the
value checks they repeat. Every problem of a section is reported at once, each as `section.key: why`.

`doc` gives a settings field its one-line meaning (and how to show its type and default): the configuration
reference, docs/configuration.md (`python -m agent.config.reference`), is generated from these."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from agent.infra.durations import parse_duration_us

T = TypeVar("T")


def doc(text: str, *, default: str | None = None, kind: str | None = None, key: str | None = None) -> dict[str, str]:
    """A settings field's metadata (`field(default=..., metadata=doc(...))`): `text`, its meaning in one line;
    `default`, the default as the reference shows it when the value itself does not say it (unset, or a YAML
    form other than the field's); `kind`, its type where the field's Python type does not say it; `key`, the
    name the reference shows when several keys set the field."""
    extra = (("default", default), ("kind", kind), ("key", key))
    return {"doc": text} | {name: value for name, value in extra if value is not None}


KeyParser = Callable[[str, object], dict[str, Any]]
"""(key, value) -> the dataclass fields it sets; ValueError (the reason) for a bad value or unknown key."""


def parse_section(name: str, raw: object, default: T, parse_key: KeyParser) -> T:
    """`default` with the section's keys applied; ValueError listing every problem."""
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        raise ValueError(f"{name} must be a map of settings")
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        try:
            changes.update(parse_key(str(key), value))
        except ValueError as err:
            problems.append(f"{name}.{key}: {err}")
    if problems:
        raise ValueError("; ".join(problems))
    return replace(default, **changes)  # type: ignore[type-var]


def as_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{value!r} is not true or false")
    return value


def as_seconds(value: object, example: str, *, allow_zero: bool = True) -> float:
    """A duration ("12h", "5m") or a number of seconds; negative (or zero, unless allowed) refused."""
    seconds = parse_duration_us(str(value)) / 1e6 if isinstance(value, str) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{value!r} is not a duration like {example}")
    return float(seconds)
