"""Log events as journal entries (agent.infra.journal, agent.infra.logging): the native protocol's
encoding, field names, priorities, the choice of the format from $JOURNAL_STREAM, and the JSON line on
the stream when journald does not take an entry."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from agent.infra import journal
from agent.infra.logging import choose_format, configure, get_logger


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("pod", "KCG_POD"),
        ("pod_uid", "KCG_POD_UID"),
        ("retry_in_s", "KCG_RETRY_IN_S"),
        ("a-b.c d", "KCG_A_B_C_D"),
        ("_private", "KCG__PRIVATE"),  # never a leading "_" (journald's trusted fields)
        ("9lives", "KCG_9LIVES"),  # never a leading digit
        ("ünïcode", "KCG__N_CODE"),
        ("x" * 100, "KCG_" + "X" * 60),  # journald's 64-character limit
        ("", "KCG_"),
    ],
)
def test_field_names_are_prefixed_upper_case_and_sanitised(key: str, name: str) -> None:
    got = journal.field_name(key)
    assert got == name
    assert len(got) <= 64 and got[0].isalpha() and all(c.isupper() or c.isdigit() or c == "_" for c in got)


@pytest.mark.parametrize(
    ("fields", "wire"),
    [
        ([("MESSAGE", b"hello")], b"MESSAGE=hello\n"),
        ([("A", b""), ("B", b"x=y")], b"A=\nB=x=y\n"),  # "=" in a value needs nothing
        (
            [("MESSAGE", b"two\nlines"), ("PRIORITY", b"3")],
            b"MESSAGE\n" + struct.pack("<Q", 9) + b"two\nlines\nPRIORITY=3\n",
        ),
        ([("KCG_X", b"\n")], b"KCG_X\n\x01\x00\x00\x00\x00\x00\x00\x00\n\n"),
    ],
)
def test_the_native_encoding_and_its_binary_safe_form(fields: list[tuple[str, bytes]], wire: bytes) -> None:
    assert journal.encode(fields) == wire
    assert journal.decode(wire) == fields


def test_an_event_becomes_message_priority_identifier_and_a_field_per_key() -> None:
    event = {
        "pod": "shop/api",
        "namespace": "shop",
        "pod_uid": "u-1",
        "event": "reconcile",
        "outcome": "applied",
        "writes": 2,
        "changed": ["cpu.max", "memory.max"],
        "observe_only": False,
        "note": None,
        "level": "warning",
        "timestamp": "2026-01-01T00:00:00Z",
    }
    fields = dict(journal.entry(event))
    assert fields["MESSAGE"] == (
        b'reconcile pod=shop/api namespace=shop pod_uid=u-1 outcome=applied writes=2 '
        b'changed="[\\"cpu.max\\", \\"memory.max\\"]" observe_only=false note=null'
    )
    assert fields["PRIORITY"] == b"4"
    assert fields["SYSLOG_IDENTIFIER"] == b"kube-cgroup-agent"
    assert fields["KCG_EVENT"] == b"reconcile"
    assert fields["KCG_POD"] == b"shop/api" and fields["KCG_POD_UID"] == b"u-1"
    assert fields["KCG_WRITES"] == b"2" and fields["KCG_OBSERVE_ONLY"] == b"false"
    assert json.loads(fields["KCG_CHANGED"]) == ["cpu.max", "memory.max"]
    assert "KCG_LEVEL" not in fields and "KCG_TIMESTAMP" not in fields  # PRIORITY, the journal's own time


@pytest.mark.parametrize(
    ("level", "priority"),
    [("debug", 7), ("info", 6), ("warning", 4), ("error", 3), ("critical", 2), ("unheard-of", 6)],
)
def test_priority_from_the_level(level: str, priority: int) -> None:
    assert dict(journal.entry({"event": "x", "level": level}))["PRIORITY"] == str(priority).encode()


def test_a_traceback_is_a_multi_line_field_and_follows_the_message() -> None:
    event = {"event": "reconcile.crashed", "key": "TIERS", "exception": "Traceback:\n  boom\nValueError: x"}
    fields = journal.entry(event)
    as_dict = dict(fields)
    assert as_dict["MESSAGE"] == b"reconcile.crashed key=TIERS\nTraceback:\n  boom\nValueError: x"
    assert as_dict["KCG_EXCEPTION"] == b"Traceback:\n  boom\nValueError: x"
    assert journal.decode(journal.encode(fields)) == fields


def test_a_value_with_a_newline_or_space_is_quoted_in_the_message_only() -> None:
    fields = dict(journal.entry({"event": "pod.invalid", "error": "bad value\nsecond line", "empty": ""}))
    assert fields["MESSAGE"] == b'pod.invalid error="bad value\\nsecond line" empty=""'
    assert fields["KCG_ERROR"] == b"bad value\nsecond line"


# --------------------------------------------------------------------------------- JOURNAL_STREAM
def test_journal_stream_must_name_the_very_stream(tmp_path: Path) -> None:
    with (tmp_path / "out").open("w") as out, (tmp_path / "other").open("w") as other:
        st = os.fstat(out.fileno())
        env = {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        assert journal.stream_is_journal(out.fileno(), env)
        assert not journal.stream_is_journal(other.fileno(), env)  # redirected elsewhere: not the journal
        assert not journal.stream_is_journal(out.fileno(), {})
        assert choose_format("auto", out, env) == "journal"
        assert choose_format("auto", other, env) == "json"
        assert choose_format("json", out, env) == "json"  # an explicit format wins
        assert choose_format("journal", other, {}) == "journal"
    assert choose_format("auto", io.StringIO(), env) == "json"  # no file descriptor


# ------------------------------------------------------------------------------- through structlog
@pytest.fixture
def journald(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "journal.socket")
    sock.bind(path)
    sock.settimeout(2.0)
    try:
        yield sock, path
    finally:
        sock.close()
        configure("json", "info", io.StringIO())  # leave structlog as the other tests expect it


def test_structlog_events_and_library_records_arrive_as_entries(journald: tuple[socket.socket, str]) -> None:
    sock, path = journald
    out = io.StringIO()
    assert configure("journal", "info", out, journal_socket=path) == "journal"
    log = get_logger("agent.test")
    with structlog.contextvars.bound_contextvars(pod="shop/api", pod_uid="u-1"):
        log.info("reconcile", outcome="applied", writes=1)
    log.debug("not.shown")
    logging.getLogger("urllib3.connectionpool").warning("Retrying %s", "GET /api")
    first = dict(journal.decode(sock.recv(65536)))
    assert first["KCG_EVENT"] == b"reconcile" and first["KCG_POD"] == b"shop/api" and first["PRIORITY"] == b"6"
    assert first["MESSAGE"].startswith(b"reconcile ")
    second = dict(journal.decode(sock.recv(65536)))
    assert second["KCG_EVENT"] == b"Retrying GET /api" and second["PRIORITY"] == b"4"
    assert second["KCG_LOGGER"] == b"urllib3.connectionpool"
    assert out.getvalue() == ""  # nothing on the stream while journald takes the entries


def test_the_json_line_on_the_stream_when_journald_is_not_there(tmp_path: Path) -> None:
    out = io.StringIO()
    try:
        configure("journal", "info", out, journal_socket=str(tmp_path / "no-journald"))
        get_logger("agent.test").warning("manifests.invalid", problem="a.yaml: bad\nvalue")
        line = json.loads(out.getvalue())
    finally:
        configure("json", "info", io.StringIO())
    assert line["event"] == "manifests.invalid" and line["problem"] == "a.yaml: bad\nvalue"
    assert line["level"] == "warning"
