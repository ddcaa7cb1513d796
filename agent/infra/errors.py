"""The agent's error taxonomy and how each error reads to a user (one line, no traceback).

Every error the agent raises derives from `AgentError` (the drivers' from `cgroupfs.errors.DriverError`),
carries its context as attributes and reads as one line (`user_message`). `retryable` splits them as
kopf does: a `TemporaryError` (the runtime or the API unavailable, a cgroup not created yet, EBUSY) is
retried with backoff; a `PermanentError` (an invalid pod, a bad config, a refused value) is reported
and not retried until its input changes. This module imports nothing of the agent, so any layer may use it.
"""

from __future__ import annotations

import os
from typing import Any

from cgroupfs.errors import DriverError


class AgentError(Exception):
    """Root of the agent's own errors. `context` holds what the message names (pod, path, value)."""

    retryable: bool = False

    def __init__(self, message: str = "", **context: Any) -> None:
        super().__init__(message)
        self.context = context

    def user_message(self) -> str:
        return str(self)


class TemporaryError(AgentError):
    """Trying again later can succeed: retried with backoff."""

    retryable = True


class PermanentError(AgentError):
    """Trying again with the same input fails the same way: reported, not retried until the input changes."""

    retryable = False


def is_temporary(err: BaseException) -> bool:
    """Whether backing off and retrying is the right answer to `err` (unknown errors: no)."""
    return isinstance(err, AgentError | DriverError) and bool(err.retryable)


def user_message(err: BaseException) -> str | None:
    """One clear line for an error, or None to let a genuine bug raise (KCG_DEBUG=1 shows tracebacks)."""
    if isinstance(err, AgentError | DriverError):
        return one_line(err.user_message())
    if isinstance(err, OSError):
        where = f" ({err.filename})" if err.filename else ""
        return one_line(f"{err.strerror or err}{where}")
    if os.environ.get("KCG_DEBUG"):
        return None
    return one_line(f"internal error: {type(err).__name__}: {err} (set KCG_DEBUG=1 for a traceback)")


def one_line(text: str) -> str:
    """`text` with control characters escaped: a hostile value cannot forge a second log or terminal line."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
