"""The shell of the history from Prometheus (`agent.recommender.prometheus` has the pure parts): a worker
thread asks, the recommender's own thread applies.

When the recommender first sees a container it has no history of (the agent's first start, a pod moved in,
a state file lost), `HistoryLoader.feed` hands the container to the worker and holds its samples back; the
worker runs VPA's two range queries for the batch (each bounded by `queryTimeout`, `maxSeries` and
`maxBytes`; a pod level, keyed POD, adds its pod cgroup's series to the same two) and builds the histories;
at a later tick `feed` puts each history into the state, then the samples held back, in their order, so the
container's first recommendation already has its history — or, when Prometheus was slow, down, wrong or
huge, logs one line and lets the held samples through: the node's own history, as without Prometheus. A
batch not answered within its deadline (two query timeouts from when it was asked, and a grace) is given up
the same way, whatever the worker is doing; nothing here ever waits on the network in the recommender's
thread, and the worker never touches the state.

`http_fetch` is the thin HTTP client (`Fetch`): a POST of the query's form to `/api/v1/query_range`, a
socket timeout of the time left before each read, the body read to at most `maxBytes`; the bearer token and
the CA read from their files for each query (a projected token is rotated in place), so that a file missing
or bad fails that load only, with its one line."""

from __future__ import annotations

import http.client
import json
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlencode, urlsplit

from agent.infra.errors import one_line
from agent.infra.logging import get_logger
from agent.recommender.config import PrometheusSettings, RecommenderSettings
from agent.recommender.model import ContainerHistory
from agent.recommender.prometheus import (
    HistoryError,
    RangeQuery,
    found,
    history_queries,
    observe,
    parse_matrix,
    samples_by_key,
)
from agent.recommender.state import Key, RecommenderState
from agent.recommender.trace import Sample

log = get_logger("agent.recommender")

PODS_PER_QUERY: Final = 16  # a batch's pods, what a pair of queries asks about: about 300 KB an answer
GRACE_S: Final = 5.0  # beyond a batch's deadline, before the recommender gives it up itself
READ_CHUNK: Final = 64 * 1024

Fetch = Callable[[RangeQuery, float], bytes]
"""(query, seconds left) -> the response's body; HistoryError (one line) when there is none to use."""


def _left(deadline: float, timeout_s: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise HistoryError(f"no answer within {timeout_s:g}s")
    return left


def _error_text(body: bytes) -> str:
    """Prometheus's own words from an error response (`errorType: error`), else the body's start."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return f"{doc.get('errorType', 'error')}: {doc['error'][:200]}"
    return body[:120].decode("utf-8", "replace").strip() or "no body"


def bearer_token(path: str) -> str:
    """The token in `path` (surrounding whitespace dropped, as a projected token's file may end in a newline);
    HistoryError naming the file, never quoting it, when it cannot be read or is no header value."""
    try:
        with Path(path).open("rb") as f:
            raw = f.read(64 * 1024 + 1)
    except OSError as err:
        raise HistoryError(f"cannot read bearerTokenFile {path}: {err.strerror or type(err).__name__}") from None
    token = raw.strip()
    if not token or len(raw) > 64 * 1024 or any(c < 0x21 or c > 0x7E for c in token):
        raise HistoryError(f"bearerTokenFile {path} holds no token (empty, over 64 KiB, or not printable ASCII)")
    return token.decode("ascii")


def tls_context(ca_file: str, insecure: bool) -> ssl.SSLContext:
    """The verification of an https:// address: the system's CAs or `ca_file`'s, or none with `insecure`."""
    if insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=ca_file or None)
    except (OSError, ssl.SSLError) as err:
        raise HistoryError(f"cannot load caFile {ca_file}: {type(err).__name__}: {err}") from None


def http_fetch(address: str, max_bytes: int, *, token_file: str = "", ca_file: str = "",
               insecure: bool = False) -> Fetch:
    """The HTTP client of `address` (http:// or https://, a path prefix kept), with the bearer token of
    `token_file` and, for https://, the CAs of `ca_file` (empty: the system's) or no verification (`insecure`)."""
    url = urlsplit(address)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"{address!r} is not an http:// or https:// URL")
    path = url.path.rstrip("/") + "/api/v1/query_range"
    host, port, secure = url.hostname, url.port, url.scheme == "https"

    def fetch(q: RangeQuery, timeout_s: float) -> bytes:
        deadline = time.monotonic() + timeout_s
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json",
                   "User-Agent": "kube-cgroup-agent"}
        if token_file:
            headers["Authorization"] = "Bearer " + bearer_token(token_file)
        conn: http.client.HTTPConnection = (
            http.client.HTTPSConnection(host, port, timeout=timeout_s, context=tls_context(ca_file, insecure))
            if secure else http.client.HTTPConnection(host, port, timeout=timeout_s))
        try:
            conn.request("POST", path, body=urlencode(q.form(timeout_s)).encode(), headers=headers)
            sock = conn.sock  # the response reads it, even once the connection hands it over
            if sock is None:
                raise HistoryError("no connection")
            sock.settimeout(_left(deadline, timeout_s))
            resp = conn.getresponse()
            if resp.status != 200:
                raise HistoryError(f"HTTP {resp.status}: {_error_text(_read(sock, resp, 4096, deadline, timeout_s, cut=True))}")
            length = resp.getheader("Content-Length")
            if length is not None and length.isdigit() and int(length) > max_bytes:
                raise HistoryError(f"a response of {length} bytes, more than maxBytes ({max_bytes})")
            return _read(sock, resp, max_bytes, deadline, timeout_s)
        except HistoryError:
            raise
        except TimeoutError:
            raise HistoryError(f"no answer within {timeout_s:g}s") from None
        except (OSError, http.client.HTTPException) as err:
            raise HistoryError(f"cannot reach {host}:{port or (443 if secure else 80)}: "
                               f"{type(err).__name__}: {err}") from None
        finally:
            conn.close()

    return fetch


def _read(sock: socket.socket, resp: http.client.HTTPResponse, limit: int, deadline: float,
          timeout_s: float, *, cut: bool = False) -> bytes:
    """The body, at most `limit` bytes (more: HistoryError, or cut there with `cut`), by the deadline: each
    read waits at most the time left, and returns what has come (a byte at a time meets the deadline too)."""
    parts: list[bytes] = []
    size = 0
    while True:
        sock.settimeout(_left(deadline, timeout_s))
        chunk = resp.read1(min(READ_CHUNK, limit + 1 - size))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            if cut:
                return b"".join(parts)[:limit]
            raise HistoryError(f"a response larger than maxBytes ({limit})")


@dataclass(frozen=True, slots=True)
class Loaded:
    histories: dict[Key, ContainerHistory]
    series: int
    bytes: int


def load(prom: PrometheusSettings, model: RecommenderSettings, keys: Collection[Key], now: float, fetch: Fetch,
         deadline: float, monotonic: Callable[[], float] = time.monotonic) -> Loaded:
    """The histories of `keys` (those Prometheus has samples of) from VPA's two range queries ending at `now`,
    each given the query timeout or the time left before `deadline` (monotonic), whichever is shorter."""
    state = RecommenderState(model)
    series = size = 0
    for q in history_queries(prom, keys, now):
        left = min(prom.query_timeout_s, deadline - monotonic())
        if left <= 0:
            raise HistoryError("its deadline passed before the " + q.resource + " query")
        try:
            body = fetch(q, left)
            if len(body) > prom.max_bytes:
                raise HistoryError(f"a response larger than maxBytes ({prom.max_bytes})")
            matrix = parse_matrix(body, prom.max_series)
        except HistoryError as err:
            raise HistoryError(f"the {q.resource} query: {err}") from None
        series, size = series + len(matrix), size + len(body)
        del body  # one answer at a time in memory: its samples go into the histories before the next is asked
        observe(state, samples_by_key(prom, matrix, (), keys) if q.resource == "cpu" else
                samples_by_key(prom, (), matrix, keys))
        del matrix
    return Loaded(found(state), series, size)


@dataclass(eq=False, slots=True)
class _Batch:
    keys: frozenset[Key]
    now: float  # the queries' end
    deadline: float  # monotonic
    loaded: Loaded | None = None
    error: str | None = None
    abandoned: bool = False  # given up by the recommender's thread: what the worker brings is dropped


@dataclass(slots=True)
class HistoryLoader:
    """Containers (and pod levels, keyed POD) with no history get theirs from Prometheus before their own
    samples count (see above). `feed` runs in the recommender's thread; the worker thread starts with the
    first batch."""

    prom: PrometheusSettings
    model: RecommenderSettings
    fetch: Fetch
    monotonic: Callable[[], float] = time.monotonic
    # (batch outcome "loaded" or "failed", containers found with a history, containers asked): the metrics
    on_load: Callable[[str, int, int], None] | None = None
    _pending: dict[Key, _Batch] = field(default_factory=dict)
    _held: dict[Key, list[Sample]] = field(default_factory=dict)
    _tried: set[Key] = field(default_factory=set)
    _batches: list[_Batch] = field(default_factory=list)
    _todo: queue.Queue[_Batch | None] = field(default_factory=queue.Queue)
    _done: queue.Queue[_Batch] = field(default_factory=queue.Queue)
    _busy: threading.Condition = field(default_factory=threading.Condition)
    _outstanding: int = 0
    _thread: threading.Thread | None = None
    _closed: bool = False

    def feed(self, state: RecommenderState, keys: Collection[Key], samples: Iterable[Sample], now: float) -> int:
        """One tick: settle the batches answered or overdue, ask about the containers of `keys` never seen,
        observe `samples` (held back while their container's history is on its way). Returns the samples
        observed now (the held ones released included)."""
        observed = self._settle(state) if self._batches else 0
        histories, pending, tried = state.histories, self._pending, self._tried
        new = [k for k in keys if k not in histories and k not in pending and k not in tried]
        if new and not self._closed:
            self._ask(new, now)
        if not pending:
            for s in samples:
                state.observe(s)
                observed += 1
        else:
            for s in samples:
                key = (s.pod, s.container)
                if key in pending:
                    self._held.setdefault(key, []).append(s)
                else:
                    state.observe(s)
                    observed += 1
        if len(tried) > 2 * len(keys) + 1024:  # the containers gone long ago need not be remembered
            tried.intersection_update(keys)
        return observed

    @property
    def pending(self) -> int:
        """Containers whose history is on its way."""
        return len(self._pending)

    def _ask(self, new: list[Key], now: float) -> None:
        by_pod: dict[str, list[Key]] = {}
        for key in sorted(new):
            by_pod.setdefault(key[0], []).append(key)
        pods = list(by_pod)
        deadline = self.monotonic() + 2 * self.prom.query_timeout_s
        for i in range(0, len(pods), PODS_PER_QUERY):
            batch = _Batch(frozenset(k for pod in pods[i:i + PODS_PER_QUERY] for k in by_pod[pod]), now, deadline)
            self._batches.append(batch)
            for key in batch.keys:
                self._pending[key] = batch
            with self._busy:
                self._outstanding += 1
            self._todo.put(batch)
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="recommender-history", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while (batch := self._todo.get()) is not None:
            try:
                if batch.abandoned or self.monotonic() >= batch.deadline:
                    batch.error = "waited past its deadline behind other loads"
                else:
                    batch.loaded = load(self.prom, self.model, batch.keys, batch.now, self.fetch, batch.deadline,
                                        self.monotonic)
            except HistoryError as err:
                batch.error = str(err)
            except Exception as err:  # whatever a bad answer does, the worker goes on to the next batch
                batch.error = f"{type(err).__name__}: {err}"
            self._done.put(batch)
            with self._busy:
                self._outstanding -= 1
                self._busy.notify_all()

    def _settle(self, state: RecommenderState) -> int:
        observed = 0
        while True:
            try:
                batch = self._done.get_nowait()
            except queue.Empty:
                break
            if not batch.abandoned:
                observed += self._apply(state, batch)
        now = self.monotonic()
        for batch in [b for b in self._batches if now > b.deadline + GRACE_S]:
            batch.abandoned = True
            batch.error = f"no answer within {2 * self.prom.query_timeout_s:g}s"
            observed += self._apply(state, batch)
        return observed

    def _apply(self, state: RecommenderState, batch: _Batch) -> int:
        """The batch's histories into the state, then the samples held back."""
        self._batches.remove(batch)
        found = batch.loaded.histories if batch.loaded is not None else {}
        observed = 0
        for key in sorted(batch.keys):
            history = found.get(key)
            if history is not None and key not in state.histories:
                state.histories[key] = history
            for s in self._held.pop(key, ()):
                state.observe(s)
                observed += 1
            self._pending.pop(key, None)
            self._tried.add(key)
        if self.on_load is not None:
            self.on_load("loaded" if batch.loaded is not None else "failed", len(found), len(batch.keys))
        if batch.loaded is not None:
            log.info("recommender.prometheus_history", containers=len(batch.keys), found=len(found),
                     series=batch.loaded.series, bytes=batch.loaded.bytes)
        else:
            log.warning("recommender.prometheus_history_failed", address=self.prom.address,
                        containers=len(batch.keys), error=one_line(batch.error or "unknown"),
                        then="these containers' history is the node's own samples")
        return observed

    def wait(self, timeout_s: float) -> bool:
        """Whether the worker finished every batch asked for within `timeout_s` (tests, shutdown)."""
        with self._busy:
            return self._busy.wait_for(lambda: self._outstanding == 0, timeout_s)

    def close(self) -> None:
        """Stop the worker after its current batch (it is a daemon thread: a query in flight ends with its
        timeout or with the process)."""
        self._closed = True
        self._todo.put(None)


def loader_for(model: RecommenderSettings) -> HistoryLoader | None:
    """The loader of the settings' Prometheus; None when `recommender.prometheus.address` is empty."""
    prom = model.prometheus
    if not prom.enabled:
        return None
    return HistoryLoader(prom, model, http_fetch(prom.address, prom.max_bytes, token_file=prom.bearer_token_file,
                                                 ca_file=prom.ca_file, insecure=prom.insecure))
