"""What the long-running processes (the daemon, the VPA admission keeper) leave unloaded."""

from __future__ import annotations

import sys
from typing import Final

# Optional imports of the agent's libraries that the shipped image does not install, and that the
# processes have no use for: structlog imports `rich` to pretty-print console tracebacks (4.4 MiB
# resident; the daemon logs JSON, and plain tracebacks on a terminal); the kubernetes package's dynamic
# client imports `kubernetes_validate` (2.7 MiB; the agent validates no manifest at run time). A
# development virtualenv has both (import-linter brings rich, the tests kubernetes-validate).
OPTIONAL: Final = ("rich", "kubernetes_validate")


def without_optional_imports() -> None:
    """Make those imports fail as where they are not installed, so that a process measured in a
    development virtualenv is the shipped one. Call before structlog and kubernetes are first imported;
    both libraries expect the ImportError."""
    for name in OPTIONAL:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
