"""The counter between each agent and the API server, one listening port per agent, counting the bytes
each way and the watch events the API server sent, by type and kind. Exact: everything the agent received
from the API server went through it.

An agent's port ends its TLS there (with the API server's own serving certificate, which the agent's
kubeconfig trusts) and opens its own to the API server: the agent authenticates with its bearer token in
the request, which passes through unchanged, and the proxy sees the HTTP it forwards, so it can count the
watch events (`{"type":"MODIFIED","object":{"kind":"ReplicaSet"...`) and tell a change from a bookmark.
A port named with `:raw` is a plain TCP pass-through (the reference watcher, whose client certificate
must reach the API server itself): bytes only.

A process of its own (`python -m bench.scale.proxy UPSTREAM_PORT CERTDIR NAME=PORT[:raw]...`), so that the
harness's work never delays an agent's traffic. Each line on stdin is answered with one JSON line on
stdout: {NAME: {"up": bytes, "down": bytes, "events": {"MODIFIED ReplicaSet": n, ...}}}; EOF stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

CHUNK = 1 << 16
EVENT = re.compile(rb'\{"type":"(ADDED|MODIFIED|DELETED|BOOKMARK|ERROR)","object":\{"kind":"([A-Za-z]*)"')
CARRY = 160  # bytes kept between reads, so that an event's head split over two reads is still seen


class Counter:
    def __init__(self) -> None:
        self.up = 0
        self.down = 0
        self.events: dict[str, int] = {}

    def snapshot(self) -> dict[str, Any]:
        return {"up": self.up, "down": self.down, "events": dict(self.events)}


class EventScanner:
    """Counts watch events' heads in a byte stream read in pieces (pure)."""

    def __init__(self, into: dict[str, int]) -> None:
        self.into = into
        self.carry = b""

    def feed(self, data: bytes) -> None:
        buf = self.carry + data
        end = 0
        for m in EVENT.finditer(buf):
            key = f"{m.group(1).decode()} {m.group(2).decode()}"
            self.into[key] = self.into.get(key, 0) + 1
            end = m.end()
        self.carry = buf[max(end, len(buf) - CARRY):]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, add: Callable[[bytes], None]) -> None:
    try:
        while data := await reader.read(CHUNK):
            add(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError, ssl.SSLError, RuntimeError):
            writer.close()


async def _connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: Counter, upstream: int,
                   client_tls: ssl.SSLContext | None) -> None:
    try:
        up_r, up_w = await asyncio.open_connection(
            "127.0.0.1", upstream, ssl=client_tls, server_hostname="127.0.0.1" if client_tls else None)
    except (OSError, ssl.SSLError):
        writer.close()
        return
    scanner = EventScanner(count.events)

    def up(data: bytes) -> None:
        count.up += len(data)

    def down(data: bytes) -> None:
        count.down += len(data)
        if client_tls is not None:
            scanner.feed(data)

    await asyncio.gather(_pipe(reader, up_w, up), _pipe(up_r, writer, down))


async def _serve(upstream: int, certs: Path, names: dict[str, tuple[int, bool]], counters: dict[str, Counter]) -> None:
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(str(certs / "apiserver.crt"), str(certs / "apiserver.key"))
    client_tls = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    servers = []
    for name, (port, raw) in names.items():
        def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, c: Counter = counters[name], raw: bool = raw) -> Any:
            return _connect(r, w, c, upstream, None if raw else client_tls)

        servers.append(await asyncio.start_server(handler, "127.0.0.1", port, reuse_address=True,
                                                  ssl=None if raw else server_tls))
    print(json.dumps({"listening": sorted(names)}), flush=True)
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def stdin() -> None:
        for _line in sys.stdin:
            sys.stdout.write(json.dumps({n: c.snapshot() for n, c in counters.items()}) + "\n")
            sys.stdout.flush()
        loop.call_soon_threadsafe(done.set_result, None)

    threading.Thread(target=stdin, daemon=True).start()
    await done
    for s in servers:
        s.close()


def parse_names(args: list[str]) -> dict[str, tuple[int, bool]]:
    out = {}
    for a in args:
        name, _, rest = a.partition("=")
        port, _, flag = rest.partition(":")
        out[name] = (int(port), flag == "raw")
    return out


def main(argv: list[str]) -> int:
    names = parse_names(argv[2:])
    asyncio.run(_serve(int(argv[0]), Path(argv[1]), names, {n: Counter() for n in names}))
    return 0


class Proxy:
    """The proxy process, seen from the harness."""

    def __init__(self, upstream: int, certs: Path, names: dict[str, int], raw: set[str], log: Path) -> None:
        self.names = names
        args = [f"{n}={p}" + (":raw" if n in raw else "") for n, p in names.items()]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.scale.proxy", str(upstream), str(certs), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("wb"), text=True,
            cwd=Path(__file__).resolve().parents[2], start_new_session=True)
        first = self._out.readline()
        if not first:
            raise RuntimeError(f"the counting proxy did not start; see {log}")
        self._lock = threading.Lock()

    @property
    def _out(self) -> IO[str]:
        assert self.proc.stdout is not None
        return self.proc.stdout

    def snapshot(self) -> dict[str, dict[str, Any]]:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            line = self._out.readline()
        out: dict[str, dict[str, Any]] = json.loads(line)
        return out

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
