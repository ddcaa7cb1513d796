"""The connection to the runtime: one gRPC channel, a deadline on every call, UNAVAILABLE retried.

UNAVAILABLE (runtime down or restarting) is retried with bounded exponential backoff, nothing else is
(a DEADLINE_EXCEEDED update may still be applied by the runtime, so it is the caller's decision).
Failures leave here as `agent.cri.errors` types, so no gRPC error reaches the rest of the agent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc
from google.protobuf.message import Message

from agent.cri.endpoint import normalize_endpoint, socket_path
from agent.cri.errors import classify
from agent.cri.v1 import api_pb2_grpc as pb_grpc

_MAX_MESSAGE: Final = 16 * 1024 * 1024  # the kubelet's maxMsgSize


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry UNAVAILABLE only: `attempts` calls in total, sleeping backoff, backoff*multiplier, ..."""

    attempts: int = 4
    initial_backoff: float = 0.05
    multiplier: float = 2.0
    max_backoff: float = 1.0

    def delays(self) -> list[float]:
        """The sleeps between attempts (one fewer than attempts)."""
        out, delay = [], self.initial_backoff
        for _ in range(max(self.attempts - 1, 0)):
            out.append(min(delay, self.max_backoff))
            delay *= self.multiplier
        return out


class RuntimeChannel:
    """The RuntimeService and ImageService of one endpoint over one channel. Thread-safe."""

    def __init__(self, endpoint: str, retry: RetryPolicy, sleep: Callable[[float], None]) -> None:
        self.endpoint = normalize_endpoint(endpoint)
        self._retry = retry
        self._sleep = sleep
        self._channel = grpc.insecure_channel(
            self.endpoint,
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE),
                ("grpc.max_send_message_length", _MAX_MESSAGE),
                # reconnect quickly after a runtime restart, so our own retries can succeed
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ],
        )
        self._runtime = pb_grpc.RuntimeServiceStub(self._channel)
        self._images = pb_grpc.ImageServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def call(
        self,
        rpc: str,
        request: Message,
        *,
        timeout: float,
        container_id: str | None = None,
        images: bool = False,
    ) -> Any:
        """The response of `rpc` (of the ImageService when `images`), or the CRIError it failed with."""
        method = getattr(self._images if images else self._runtime, rpc)
        delays = self._retry.delays()
        for attempt in range(len(delays) + 1):
            try:
                return method(request, timeout=timeout)
            except grpc.RpcError as rpc_err:
                code = _code_name(rpc_err)
                details = str(rpc_err.details() or "") if hasattr(rpc_err, "details") else str(rpc_err)
                if code == "UNAVAILABLE" and attempt < len(delays):
                    self._sleep(delays[attempt])
                    continue
                if code == "UNAVAILABLE":
                    details = self._unavailable_message(details)
                raise classify(rpc, code, details, container_id) from rpc_err
        raise AssertionError("unreachable")  # pragma: no cover

    def _unavailable_message(self, details: str) -> str:
        path = socket_path(self.endpoint)
        if path is None:
            return f"container runtime at {self.endpoint} is not answering: {details}"
        if not Path(path).exists():
            return f"container runtime socket {path} does not exist (is the runtime running?): {details}"
        return f"container runtime socket {path} is not answering (is the runtime running?): {details}"


def _code_name(err: Any) -> str:
    code = err.code() if hasattr(err, "code") else None
    return str(getattr(code, "name", "UNKNOWN"))
