"""The byte counter between each agent and the API server: a TCP pass-through (the TLS session is the
agent's own with the API server, so nothing is decrypted or changed), one listening port per agent,
counting the bytes each way. Exact: every byte the agent received from the API server went through it.

A process of its own (`python -m bench.scale.proxy UPSTREAM_PORT NAME=PORT...`), so that the harness's
own work never delays an agent's traffic. Each line on stdin is answered with one JSON line on stdout:
{NAME: [bytes to the API server, bytes from it], ...}; EOF stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

CHUNK = 1 << 16


class Counter:
    def __init__(self) -> None:
        self.up = 0
        self.down = 0


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: Counter, up: bool) -> None:
    try:
        while data := await reader.read(CHUNK):
            if up:
                count.up += len(data)
            else:
                count.down += len(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


async def _serve(upstream: int, names: dict[str, int], counters: dict[str, Counter]) -> None:
    servers = []
    for name, port in names.items():
        def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, c: Counter = counters[name]) -> Any:
            return _connect(r, w, c, upstream)

        servers.append(await asyncio.start_server(handler, "127.0.0.1", port, reuse_address=True))
    print(json.dumps({"listening": sorted(names)}), flush=True)
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def stdin() -> None:
        for _line in sys.stdin:
            snap = {n: [c.up, c.down] for n, c in counters.items()}
            sys.stdout.write(json.dumps(snap) + "\n")
            sys.stdout.flush()
        loop.call_soon_threadsafe(done.set_result, None)

    threading.Thread(target=stdin, daemon=True).start()
    await done
    for s in servers:
        s.close()


async def _connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: Counter, upstream: int) -> None:
    try:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream)
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_w, count, True), _pipe(up_r, writer, count, False))


def main(argv: list[str]) -> int:
    upstream = int(argv[0])
    names = {a.split("=", 1)[0]: int(a.split("=", 1)[1]) for a in argv[1:]}
    asyncio.run(_serve(upstream, names, {n: Counter() for n in names}))
    return 0


class Proxy:
    """The proxy process, seen from the harness."""

    def __init__(self, upstream: int, names: dict[str, int], log: Path) -> None:
        self.names = names
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.scale.proxy", str(upstream), *(f"{n}={p}" for n, p in names.items())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("wb"), text=True,
            cwd=Path(__file__).resolve().parents[2], start_new_session=True)
        first = self._out.readline()
        if not first:
            raise RuntimeError(f"the byte-counting proxy did not start; see {log}")
        self._lock = threading.Lock()

    @property
    def _out(self) -> IO[str]:
        assert self.proc.stdout is not None
        return self.proc.stdout

    def snapshot(self) -> dict[str, tuple[int, int]]:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            line = self._out.readline()
        return {n: (v[0], v[1]) for n, v in json.loads(line).items()}

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
