"""structlog, configured once: JSON lines in the daemon, a readable console on a terminal.

Why here and only here: every long-lived component logs through structlog with context bound at the
worker boundary (`pod`, `namespace`, `pod_uid`), so one pod's lines can be followed through a busy
node. Pure functions never log; they return data the shell logs. Libraries that log through the
standard library (the kubernetes client, urllib3) go through the same renderer at WARNING and above.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Final, TextIO

import structlog

LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def use_json(fmt: str, stream: TextIO) -> bool:
    """`auto` means JSON unless a person is watching (a TTY)."""
    if fmt == "json":
        return True
    if fmt == "console":
        return False
    isatty = getattr(stream, "isatty", None)
    return not (callable(isatty) and isatty())


def configure(fmt: str = "auto", level: str = "info", stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    json_lines = use_json(fmt, out)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info if json_lines else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(processor=renderer, foreign_pre_chain=shared))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
