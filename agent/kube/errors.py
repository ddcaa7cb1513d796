"""The agent's own errors for the Kubernetes API, classified by what the caller should do.

Why not the client's ApiException: the client can be swapped, and callers decide by meaning (relist on
Gone, back off on Unavailable, give up on Forbidden), never by parsing messages. The client's error is
kept as `__cause__` (kopf's `_cogs/clients/errors.py`).
"""

from __future__ import annotations

import json
from typing import Any

from agent.infra.errors import AgentError


class APIError(AgentError):
    def __init__(self, what: str, status: int | None, reason: str) -> None:
        super().__init__(f"{what}: {status or 'no answer'} {reason}".strip())
        self.what = what
        self.status = status
        self.reason = reason


class APIGone(APIError):
    """410: the resourceVersion is too old (compacted): relist."""

    retryable = True


class APINotFound(APIError):
    """404: the object is gone."""


class APIConflict(APIError):
    """409, or a patch whose precondition (the pod's UID) failed."""

    retryable = True


class APIForbidden(APIError):
    """401/403: the ServiceAccount lacks a permission; retrying will not help until RBAC changes."""


class APIUnavailable(APIError):
    """No answer, a closed connection, 429 or 5xx: back off and try again."""

    retryable = True


_BY_STATUS: dict[int, type[APIError]] = {
    401: APIForbidden,
    403: APIForbidden,
    404: APINotFound,
    409: APIConflict,
    410: APIGone,
}


def from_status(what: str, status: int | None, reason: str) -> APIError:
    cls = _BY_STATUS.get(status or 0)
    if cls is None:
        cls = APIUnavailable if status is None or status == 429 or status >= 500 else APIError
    return cls(what, status, reason)


def _reason(body: Any, fallback: str) -> str:
    try:
        data = json.loads(body) if isinstance(body, str | bytes) else None
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return fallback


def wrap(what: str, err: BaseException) -> APIError:
    """Any error of the client or the transport as an APIError (to be raised `from err`)."""
    if isinstance(err, APIError):
        return err
    from kubernetes.client.exceptions import ApiException

    if isinstance(err, ApiException):
        return from_status(what, err.status, _reason(err.body, str(err.reason or "")))
    return APIUnavailable(what, None, f"{type(err).__name__}: {err}")
