"""A client that hangs up mid-request (a probe whose timeout expired) costs the endpoints nothing: no
traceback on stderr among the daemon's JSON lines, and the next request is answered."""

from __future__ import annotations

import socket
import struct
import urllib.request

import pytest

from agent.infra.metrics import Endpoints, Metrics, Probe


def _reset_mid_request(address: str) -> None:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a RST


def test_a_client_resetting_mid_request_leaves_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    endpoints = Endpoints(Metrics(), Probe(lambda: (True, "ok"), lambda: (True, "ok")), "127.0.0.1:0", "127.0.0.1:0")
    try:
        (address,) = endpoints.addresses
        for _ in range(5):
            _reset_mid_request(address)
        with urllib.request.urlopen(f"http://{address}/healthz", timeout=5) as r:
            assert r.status == 200
    finally:
        endpoints.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err
