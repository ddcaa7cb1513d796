"""Log events to the systemd journal through its native protocol, as structured fields.

Why: under systemd the agent's stdout is a stream into the journal, where a JSON line is one opaque
MESSAGE. Sent natively (systemd's "Native Journal Protocol": one datagram to /run/systemd/journal/socket
of `KEY=value` lines, a value holding a newline in the binary-safe form `KEY\\n<u64 LE length><bytes>\\n`),
each structlog key becomes a field of its own (`KCG_POD=shop/api`, `KCG_EVENT=reconcile`), and
`journalctl KCG_POD=shop/api` or `-o json` finds them without parsing the message.

Pure: the field names, values, the entry of one event and its encoding. Imperative: `JournalSocket`, one
datagram per event (the caller falls back to the JSON line when it is refused) and `stream_is_journal`,
which tells from `$JOURNAL_STREAM` whether a file descriptor is the journal's stream (systemd.exec(5)).
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final

JOURNAL_SOCKET: Final = "/run/systemd/journal/socket"
JOURNAL_STREAM: Final = "JOURNAL_STREAM"
IDENTIFIER: Final = "kube-cgroup-agent"
PREFIX: Final = "KCG_"
NAME_MAX: Final = 64  # journald drops longer field names
# syslog priorities (sd-daemon.h): what `journalctl -p` filters on
PRIORITIES: Final = {
    "debug": 7,
    "info": 6,
    "notice": 5,
    "warn": 4,
    "warning": 4,
    "error": 3,
    "exception": 3,
    "critical": 2,
    "fatal": 2,
}
# keys with a field of their own: the event also as KCG_EVENT; the level is PRIORITY; the journal has its
# own timestamp; a traceback goes into MESSAGE (and its own field) rather than into the key=value pairs
TEXT_KEYS: Final = ("exception", "stack")
_NOT_NAME = re.compile(r"[^A-Z0-9_]")


def field_name(key: str) -> str:
    """A structlog key as a journal field name: KCG_ + the key in upper case, every character outside
    [A-Z0-9_] as "_", at most 64 characters (never starting with "_" or a digit: the prefix)."""
    return (PREFIX + _NOT_NAME.sub("_", key.upper()))[:NAME_MAX]


def text(value: Any) -> str:
    """A field value as text: strings as they are, anything else as JSON (numbers, booleans, lists)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return json.dumps(value, default=str, ensure_ascii=False)


def _pair(key: str, value: Any) -> str:
    shown = text(value)
    if shown == "" or any(c.isspace() or c in "\"=" for c in shown) or not shown.isprintable():
        shown = json.dumps(shown, ensure_ascii=False)
    return f"{key}={shown}"


def message_text(event: Mapping[str, Any]) -> str:
    """MESSAGE, what `journalctl` shows: the event and its keys as key=value (logfmt), any traceback
    after it on lines of its own."""
    words = [text(event.get("event", ""))]
    words += [_pair(k, v) for k, v in event.items() if k not in ("event", "level", "timestamp", *TEXT_KEYS)]
    extra = [text(event[k]) for k in TEXT_KEYS if event.get(k)]
    return "\n".join([" ".join(words), *extra])


def entry(event: Mapping[str, Any], identifier: str = IDENTIFIER) -> list[tuple[str, bytes]]:
    """The journal fields of one structlog event: MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, then every key as
    KCG_<KEY> (KCG_EVENT for the event) in the event's order."""
    level = str(event.get("level", "info")).lower()
    fields: list[tuple[str, bytes]] = [
        ("MESSAGE", message_text(event).encode()),
        ("PRIORITY", str(PRIORITIES.get(level, 6)).encode()),
        ("SYSLOG_IDENTIFIER", identifier.encode()),
    ]
    for key, value in event.items():
        if key in ("level", "timestamp"):
            continue
        fields.append((field_name(key), text(value).encode()))
    return fields


def encode(fields: Iterable[tuple[str, bytes]]) -> bytes:
    """One datagram of the native protocol: `NAME=value\\n`, or for a value with a newline
    `NAME\\n` + its length as a little-endian 64-bit integer + the value + `\\n`."""
    out = bytearray()
    for name, value in fields:
        if b"\n" in value:
            out += name.encode() + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"
        else:
            out += name.encode() + b"=" + value + b"\n"
    return bytes(out)


def decode(data: bytes) -> list[tuple[str, bytes]]:
    """The fields of a datagram (both forms): what journald reads. For the tests and for debugging."""
    fields: list[tuple[str, bytes]] = []
    i = 0
    while i < len(data):
        end = data.index(b"\n", i)
        line = data[i:end]
        if b"=" in line:
            name, _, value = line.partition(b"=")
            fields.append((name.decode(), value))
            i = end + 1
        else:
            (size,) = struct.unpack("<Q", data[end + 1 : end + 9])
            start = end + 9
            fields.append((line.decode(), data[start : start + size]))
            if data[start + size : start + size + 1] != b"\n":
                raise ValueError(f"field {line.decode()!r}: no newline after its {size} bytes")
            i = start + size + 1
    return fields


def stream_is_journal(fd: int, environ: Mapping[str, str] | None = None) -> bool:
    """Whether `fd` is the stream systemd connected to the journal: `$JOURNAL_STREAM` is its
    "device:inode" (systemd.exec(5): checking the variable alone would be wrong for a child whose
    output was redirected)."""
    env = os.environ if environ is None else environ
    want = env.get(JOURNAL_STREAM, "")
    if not want:
        return False
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return want == f"{st.st_dev}:{st.st_ino}"


class JournalSocket:
    """The journal's datagram socket; `send` says whether journald took the entry (False: no journald,
    an entry too large for one datagram; the caller writes it elsewhere). Safe from any thread."""

    def __init__(self, path: str = JOURNAL_SOCKET) -> None:
        self.path = path
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def send(self, payload: bytes) -> bool:
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.sendto(payload, self.path)
            except OSError:
                return False
        return True

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None
