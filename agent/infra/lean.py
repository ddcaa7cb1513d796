"""What the long-running processes (the daemon, the VPA admission keeper) leave unloaded."""

from __future__ import annotations

import sys


def without_rich() -> None:
    """structlog imports `rich`, when it is installed, to pretty-print exceptions in its console renderer:
    4.4 MiB resident in the daemon, which logs JSON (and plain tracebacks on a terminal). The shipped image
    does not install rich; where it is installed beside the agent (a development virtualenv: import-linter
    brings it), the daemon does not load it either, so a measured daemon is the shipped one. Call before
    structlog is first imported; an import of rich then raises ImportError, which structlog expects."""
    sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
