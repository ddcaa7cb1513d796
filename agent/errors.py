"""The agent's error taxonomy and how each error reads to a user (one line, no traceback)."""

from __future__ import annotations

import os


class AgentError(Exception):
    """Root of the agent's own errors."""


def user_message(err: BaseException) -> str | None:
    """One clear line for an error, or None to let a genuine bug raise (KCG_DEBUG=1 shows tracebacks)."""
    from agent.cli import UsageError
    from agent.pipeline import PipelineError
    from agent.pods.load import SourceError
    from agent.settings import ConfigError

    if isinstance(err, ConfigError):
        return "invalid configuration: " + "; ".join(err.problems)
    if isinstance(err, UsageError | PipelineError | SourceError | AgentError):
        return str(err)
    if isinstance(err, OSError):
        where = f" ({err.filename})" if err.filename else ""
        return f"{err.strerror or err}{where}"
    if os.environ.get("KCG_DEBUG"):
        return None
    return f"internal error: {type(err).__name__}: {err} (set KCG_DEBUG=1 for a traceback)"
