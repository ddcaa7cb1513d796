"""Typed CRI errors, classified by what the caller should do about them.

The gRPC status code says most of it (cri-api's `IsNotFound` classifies by code, never by text).
One exception forces text matching: containerd returns every runc/kernel refusal of
`UpdateContainerResources` as `UNKNOWN` with runc's message inside, and the agent must tell
"memory is below current usage" (retry later, or leave it) from "the parent's CPU quota is too small"
(an ordering bug) from anything else. The forms matched here were captured from containerd 1.6 +
runc 1.1 (research/containerd-e2e.md, "CRI error codes seen"). This module does not import grpc:
codes arrive as their names ("UNAVAILABLE"), so the classification is a pure, testable function.

After any `RuntimeFailure` the kernel may hold part of the update (runc writes memory before CPU and
containerd only rolls back its own spec), so callers re-read the cgroup files rather than trust
`ContainerStatus.resources`.
"""

from __future__ import annotations

import re
from typing import ClassVar, Final

from agent.infra.errors import AgentError


class CRIError(AgentError):
    """A CRI call failed. `code` is the gRPC status name; `message` the runtime's text."""

    temporary: ClassVar[bool] = False  # worth retrying later without any change

    def __init__(self, method: str, code: str, message: str, container_id: str | None = None) -> None:
        self.method = method
        self.code = code
        self.message = message
        self.container_id = container_id
        target = f" for container {container_id}" if container_id else ""
        super().__init__(f"CRI {method}{target} failed ({code}): {message}")


class Unavailable(CRIError):
    """The runtime did not answer: not running, socket missing, or restarting."""

    temporary = True
    retryable = True


class DeadlineExceeded(CRIError):
    """The runtime did not answer within the call's deadline (it may still apply the call)."""

    temporary = True
    retryable = True


class NotFound(CRIError):
    """The container or sandbox is gone: benign, the caller drops it."""


class Unimplemented(CRIError):
    """The runtime does not know this rpc (e.g. UpdatePodSandboxResources on containerd 1.6)."""


class InvalidArgument(CRIError):
    """The runtime rejected the request itself (a bug on our side, or an unsupported value)."""


class InvalidResponse(CRIError):
    """The runtime answered with something the agent refuses to use (e.g. an unsafe container ID)."""


class RuntimeFailure(CRIError):
    """The runtime (runc, the kernel) failed the call; `runtime_message` is the innermost text. Retried:
    the kernel's refusals (EBUSY below usage, a parent's quota) can pass once the state moved."""

    retryable = True

    def __init__(self, method: str, code: str, message: str, container_id: str | None = None) -> None:
        super().__init__(method, code, message, container_id)
        self.runtime_message = runtime_message(message)


class ResourceRefused(RuntimeFailure):
    """The kernel refused one cgroup value; `file` and `value` name it when the message does."""

    retryable = False  # an invalid value stays invalid; the two below can pass later

    def __init__(
        self,
        method: str,
        code: str,
        message: str,
        container_id: str | None = None,
        *,
        file: str | None = None,
        value: str | None = None,
    ) -> None:
        super().__init__(method, code, message, container_id)
        self.file = file
        self.value = value


class MemoryBelowUsage(ResourceRefused):
    """cgroup v1 refused a memory limit below the container's current (unreclaimable) usage (EBUSY).

    The kernel keeps the old limit. Retrying only helps once usage drops.
    """

    retryable = True  # usage may fall

    temporary = True
    retryable = True

    def __init__(
        self,
        method: str,
        code: str,
        message: str,
        container_id: str | None = None,
        *,
        limit: int,
        usage: int,
        peak: int,
    ) -> None:
        super().__init__(method, code, message, container_id, file="memory.limit_in_bytes", value=str(limit))
        self.limit = limit
        self.usage = usage
        self.peak = peak


class QuotaRefused(ResourceRefused):
    """The CFS quota was refused: below 1 ms, or above what the parent cgroup allows (ordering)."""

    retryable = True  # the parent's quota may grow first


class PeriodRefused(ResourceRefused):
    """The CFS period was refused (valid range 1000..1000000 µs)."""


class SharesRefused(ResourceRefused):
    """cpu.shares was refused (valid range 2..262144); note runc may already have written the clamp."""


# containerd wraps runc's message: "... runc did not terminate successfully: exit status 1: <msg>\n: unknown"
_RUNC_WRAP: Final = re.compile(
    r"runc did not terminate successfully: exit status \d+: (.*?)(?:\n: unknown)?$", re.S
)
_MEMORY: Final = re.compile(
    r"unable to set memory limit to (-?\d+) \(current usage: (\d+), peak usage: (\d+)\)"
)
_WRITE: Final = re.compile(r'failed to write "([^"]*)": write (\S+): ([^\n]+)')
_SHARES: Final = re.compile(r"the (?:minimum|maximum) allowed cpu-shares is (\d+)")

_BY_CODE: Final[dict[str, type[CRIError]]] = {
    "UNAVAILABLE": Unavailable,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "NOT_FOUND": NotFound,
    "UNIMPLEMENTED": Unimplemented,
    "INVALID_ARGUMENT": InvalidArgument,
}
_BY_FILE: Final[dict[str, type[ResourceRefused]]] = {
    "cpu.cfs_quota_us": QuotaRefused,
    "cpu.max": QuotaRefused,  # cgroup v2: quota and period in one file; the quota is what gets refused
    "cpu.cfs_period_us": PeriodRefused,
    "cpu.shares": SharesRefused,
    "cpu.weight": SharesRefused,
}


def runtime_message(message: str) -> str:
    """The innermost (runc) part of a containerd error text, or the text itself."""
    match = _RUNC_WRAP.search(message)
    return (match.group(1) if match else message).strip()


def classify(method: str, code: str, message: str, container_id: str | None = None) -> CRIError:
    """Turn a failed call (status name + details) into the most specific CRIError."""
    by_code = _BY_CODE.get(code)
    if by_code is not None:
        return by_code(method, code, message, container_id)
    inner = runtime_message(message)
    if match := _MEMORY.search(inner):
        limit, usage, peak = (int(g) for g in match.groups())
        return MemoryBelowUsage(method, code, message, container_id, limit=limit, usage=usage, peak=peak)
    if _SHARES.search(inner):
        return SharesRefused(method, code, message, container_id, file="cpu.shares")
    if match := _WRITE.search(inner):
        value, path, _reason = match.groups()
        name = path.rsplit("/", 1)[-1]
        refused = _BY_FILE.get(name)
        if refused is not None:
            return refused(method, code, message, container_id, file=name, value=value)
    return RuntimeFailure(method, code, message, container_id)
