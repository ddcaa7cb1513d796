"""Where the runtime listens: CRI endpoints as unix socket paths, and finding the node's runtime socket.

Apart from the gRPC channel so that naming and finding a socket (`check`, messages about a runtime that
does not answer) needs no gRPC.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from agent.infra.errors import AgentError

DEFAULT_ENDPOINTS: Final = (
    "unix:///run/containerd/containerd.sock",
    "unix:///run/crio/crio.sock",
    "unix:///var/run/cri-dockerd.sock",
)


class NoRuntimeSocket(AgentError):
    """No CRI socket was given and none of the usual ones exists."""

    retryable = True

    def __init__(self, candidates: Iterable[str]) -> None:
        self.candidates = tuple(candidates)
        super().__init__(
            "no container runtime socket found (tried "
            + ", ".join(self.candidates)
            + "): is the runtime running? Otherwise pass --cri-endpoint"
        )


def socket_path(endpoint: str) -> str | None:
    """The filesystem path of a unix endpoint ("unix:///run/x.sock", "unix:/x", "/x"), else None."""
    if endpoint.startswith("unix://"):
        return endpoint[len("unix://") :] or None
    if endpoint.startswith("unix:"):
        return endpoint[len("unix:") :] or None
    if endpoint.startswith("/"):
        return endpoint
    return None


def normalize_endpoint(endpoint: str) -> str:
    """A gRPC target: a bare absolute path becomes "unix://<path>"; anything else is kept."""
    return f"unix://{endpoint}" if endpoint.startswith("/") else endpoint


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(Path(path).stat().st_mode)
    except OSError:
        return False


def autodetect_endpoint(
    candidates: Iterable[str] = DEFAULT_ENDPOINTS, is_socket: Callable[[str], bool] = _is_socket
) -> str:
    """The first candidate whose unix socket exists (containerd, CRI-O, cri-dockerd, in that order)."""
    tried = tuple(candidates)
    for endpoint in tried:
        path = socket_path(endpoint)
        if path is not None and is_socket(path):
            return normalize_endpoint(endpoint)
    raise NoRuntimeSocket(tried)
