"""structlog, configured once: JSON lines in the daemon, a readable console on a terminal, structured
journal entries under systemd.

Why here and only here: every long-lived component logs through structlog with context bound at the
worker boundary (`pod`, `namespace`, `pod_uid`), so one pod's lines can be followed through a busy
node. Pure functions never log; they return data the shell logs. Libraries that log through the
standard library (the kubernetes client, urllib3) go through the same renderer at WARNING and above.

Formats: `json`, `console`, `journal` (each event a journal entry of its own sent through the native
protocol, every key a field: agent.infra.journal; the JSON line on the stream when journald refuses
one), and `auto`: `journal` when the stream is the journal's (`$JOURNAL_STREAM`, as under a systemd
unit), else JSON unless a person is watching (a TTY).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Final, TextIO

import structlog

from agent.infra import journal

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


def choose_format(fmt: str, stream: TextIO, environ: Mapping[str, str] | None = None) -> str:
    """`json`, `console` or `journal`: `auto` is `journal` when `stream` is the journal's stream."""
    if fmt in ("journal", "json", "console"):
        return fmt
    fileno = getattr(stream, "fileno", None)
    try:
        fd = fileno() if callable(fileno) else -1
    except (OSError, ValueError):  # a StringIO, a closed stream
        fd = -1
    if fd >= 0 and journal.stream_is_journal(fd, environ):
        return "journal"
    return "json" if use_json(fmt, stream) else "console"


class JournalWriter:
    """Each event as a journal entry; the JSON line on `stream` when journald does not take it."""

    def __init__(self, sock: journal.JournalSocket, stream: TextIO, identifier: str = journal.IDENTIFIER) -> None:
        self.sock = sock
        self.stream = stream
        self.identifier = identifier
        self._json = structlog.processors.JSONRenderer(sort_keys=False)
        self._lock = threading.Lock()

    def write(self, event: MutableMapping[str, Any]) -> None:
        if self.sock.send(journal.encode(journal.entry(event, self.identifier))):
            return
        rendered = self._json(None, "", event)
        line = rendered.decode() if isinstance(rendered, bytes) else rendered
        with self._lock:
            self.stream.write(f"{line}\n")
            self.stream.flush()

    def render(self, logger: Any, method_name: str, event: MutableMapping[str, Any]) -> Any:
        """The last processor: the event goes to the logger whole (structlog calls `logger.info(event)`)."""
        return ((event,), {})


class JournalLogger:
    """structlog's logger for the journal: every level's method hands the event to the writer."""

    def __init__(self, writer: JournalWriter) -> None:
        self._writer = writer

    def msg(self, event: MutableMapping[str, Any]) -> None:
        self._writer.write(event)

    log = debug = info = warn = warning = error = err = critical = exception = fatal = failure = msg


class JournalHandler(logging.Handler):
    """The standard library's records (the kubernetes client, urllib3) as journal entries too."""

    def __init__(self, writer: JournalWriter, pre_chain: list[Any]) -> None:
        super().__init__()
        self.writer = writer
        self.pre_chain = pre_chain

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event: MutableMapping[str, Any] = {"event": record.getMessage(), "logger": record.name}
            for processor in self.pre_chain:
                event = processor(None, record.levelname.lower(), event)
            if record.exc_info:
                event["exception"] = logging.Formatter().formatException(record.exc_info)
            self.writer.write(event)
        except Exception:  # logging must never raise into the caller (logging.Handler's contract)
            self.handleError(record)


def configure(
    fmt: str = "auto",
    level: str = "info",
    stream: TextIO | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    journal_socket: str = journal.JOURNAL_SOCKET,
) -> str:
    """Configure structlog and the standard library's root logger; returns the format chosen."""
    out = stream or sys.stdout
    kind = choose_format(fmt, out, environ)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler: logging.Handler
    logger_factory: Callable[..., Any]
    if kind == "journal":
        writer = JournalWriter(journal.JournalSocket(journal_socket), out)
        renderer: Any = writer.render
        logger_factory = lambda *args: JournalLogger(writer)  # noqa: E731 - structlog calls it with the name
        handler = JournalHandler(writer, shared)
    else:
        renderer = (
            structlog.processors.JSONRenderer(sort_keys=False)
            if kind == "json"
            else structlog.dev.ConsoleRenderer(colors=False)
        )
        logger_factory = structlog.PrintLoggerFactory(out)
        handler = logging.StreamHandler(out)
        handler.setFormatter(structlog.stdlib.ProcessorFormatter(processor=renderer, foreign_pre_chain=shared))
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.dev.set_exc_info if kind == "console" else structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, logging.INFO)),
        logger_factory=logger_factory,
        cache_logger_on_first_use=True,
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    return kind


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
