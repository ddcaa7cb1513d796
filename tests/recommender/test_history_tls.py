"""The history from a Prometheus behind HTTPS and a bearer token, as production ones are: a local HTTPS server
with a certificate of a CA made here (the `openssl` command), answering only the token it holds.

The right token and the CA give the history, and a token rotated in its file is read again at the next load;
a wrong or missing token, a certificate nothing vouches for, a CA file gone: one log line, no history (the
node's own samples), no traceback; `insecure` accepts any certificate. Bad values are refused when the
configuration is read, one line naming the key."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator, MutableMapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from structlog.testing import capture_logs

from agent.config.settings import from_mapping
from agent.recommender.config import PrometheusSettings, RecommenderSettings
from agent.recommender.history import HistoryLoader, loader_for
from agent.recommender.state import Key, RecommenderState
from agent.recommender.trace import Sample
from tests.recommender.fake_prometheus import CPU, KEY, MEMORY, NOW, matrix, series

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
OTHER: Key = ("shop/api", "sidecar")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt, and server.crt/server.key for 127.0.0.1 signed by it."""
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=kcg-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=prometheus", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=d)
    return d


class SecurePrometheus:
    """`/api/v1/query_range` over HTTPS, for the bearer token `token` only (401 otherwise)."""

    def __init__(self, certs: Path) -> None:
        self.token = "s3cret-1"
        self.seen: list[str | None] = []  # each request's Authorization header
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                form = parse_qs(self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode())
                auth = self.headers.get("Authorization")
                fake.seen.append(auth)
                if auth != f"Bearer {fake.token}":
                    body, status = b'{"status":"error","errorType":"unauthorized","error":"Unauthorized"}', 401
                else:
                    cpu = form["query"][0].startswith("rate(")
                    body, status = matrix([series(KEY, CPU if cpu else MEMORY), series(OTHER, CPU)]), 200
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs / "server.crt", certs / "server.key")
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.address = f"https://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus(certs: Path) -> Iterator[SecurePrometheus]:
    server = SecurePrometheus(certs)
    try:
        yield server
    finally:
        server.close()


def _model(address: str, **tls: Any) -> RecommenderSettings:
    return RecommenderSettings(prometheus=PrometheusSettings(
        address=address, query_timeout_s=5.0, container_pod_name_label="pod", container_name_label="container",
        **tls))


def _load(model: RecommenderSettings, keys: Sequence[Key]) -> tuple[RecommenderState, list[MutableMapping[str, Any]]]:
    """One load of `keys` through the daemon's own loader, a local sample of each held back meanwhile."""
    loader = loader_for(model)
    assert isinstance(loader, HistoryLoader)
    state = RecommenderState(model)
    local = [Sample(NOW + 1, *key, cpu=0.4, memory=1.6e8) for key in keys]
    try:
        with capture_logs() as logs:
            loader.feed(state, keys, local, NOW)
            assert loader.wait(10)
            loader.feed(state, keys, [], NOW + 1)
    finally:
        loader.close()
    return state, [e for e in logs if str(e["event"]).startswith("recommender.prometheus")]


def test_the_right_token_and_the_ca_give_the_history_and_a_rotated_token_is_read_again(
        prometheus: SecurePrometheus, certs: Path, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(prometheus.token + "\n")  # a projected token's file may end in a newline
    model = _model(prometheus.address, bearer_token_file=str(token), ca_file=str(certs / "ca.crt"))
    state, [line] = _load(model, [KEY])
    assert (line["event"], line["found"]) == ("recommender.prometheus_history", 1)
    assert state.histories[KEY].samples == len(CPU) + 1  # Prometheus's, then the held sample
    assert prometheus.seen == ["Bearer s3cret-1"] * 2

    prometheus.token = "s3cret-2"  # the kubelet rotates the projected token in place
    token.write_text("s3cret-2")
    state, [line] = _load(model, [OTHER])
    assert (line["event"], line["found"]) == ("recommender.prometheus_history", 1)
    assert prometheus.seen[-2:] == ["Bearer s3cret-2"] * 2


@pytest.mark.parametrize(("case", "reason"), [
    ("wrong token", "the cpu query: HTTP 401: unauthorized: Unauthorized"),
    ("no token", "the cpu query: HTTP 401: unauthorized: Unauthorized"),
    ("token file missing", "the cpu query: cannot read bearerTokenFile {tmp}/gone: No such file or directory"),
    ("token file empty", "the cpu query: bearerTokenFile {tmp}/token holds no token"),
    ("no CA", "the cpu query: cannot reach 127.0.0.1:{port}: SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED]"),
    ("CA file missing", "the cpu query: cannot load caFile {tmp}/gone.crt: FileNotFoundError"),
    ("CA file not PEM", "the cpu query: cannot load caFile {tmp}/token: SSLError"),
])
def test_a_token_or_a_certificate_refused_gives_one_line_and_the_nodes_own_history(
        prometheus: SecurePrometheus, certs: Path, tmp_path: Path, case: str, reason: str) -> None:
    token = tmp_path / "token"
    token.write_text("" if case == "token file empty" else "wrong" if case == "wrong token" else prometheus.token)
    tls: dict[str, Any] = {"bearer_token_file": str(token), "ca_file": str(certs / "ca.crt")}
    if case == "no token":
        tls["bearer_token_file"] = ""
    elif case == "token file missing":
        tls["bearer_token_file"] = str(tmp_path / "gone")
    elif case == "no CA":
        tls["ca_file"] = ""  # the system's CAs know nothing of this one
    elif case == "CA file missing":
        tls["ca_file"] = str(tmp_path / "gone.crt")
    elif case == "CA file not PEM":
        tls["ca_file"] = str(token)
    state, [line] = _load(_model(prometheus.address, **tls), [KEY])
    assert line["event"] == "recommender.prometheus_history_failed"
    port = prometheus.address.rsplit(":", 1)[1]
    assert str(line["error"]).startswith(reason.format(tmp=tmp_path, port=port)), line
    assert "\n" not in str(line["error"]) and "exc_info" not in line and prometheus.token not in str(line)
    assert state.histories[KEY].samples == 1  # the node's own sample, as without Prometheus
    asked = {"wrong token": 1, "no token": 1}.get(case, 0)
    assert len(prometheus.seen) == asked  # a token or CA that cannot be read: nothing is sent


def test_insecure_accepts_a_certificate_nothing_vouches_for(prometheus: SecurePrometheus, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(prometheus.token)
    state, [line] = _load(_model(prometheus.address, bearer_token_file=str(token), insecure=True), [KEY])
    assert (line["event"], line["found"]) == ("recommender.prometheus_history", 1)
    assert len(prometheus.seen) == 2 and state.histories[KEY].samples == len(CPU) + 1


def _prometheus_config(**raw: object) -> PrometheusSettings:
    return from_mapping({"recommender": {"prometheus": raw}}).recommender.prometheus


def test_the_settings_take_a_token_file_a_ca_and_insecure() -> None:
    got = _prometheus_config(address="https://prometheus.monitoring.svc:9091", bearerTokenFile="/var/run/secrets/t",
                             caFile="/etc/prometheus/ca.crt")
    assert (got.bearer_token_file, got.ca_file, got.insecure) == ("/var/run/secrets/t", "/etc/prometheus/ca.crt", False)
    assert _prometheus_config(address="https://p:9090", insecure=True).insecure
    assert _prometheus_config(address="http://p:9090", bearerTokenFile="/t").bearer_token_file == "/t"  # as VPA allows
    assert _prometheus_config(caFile="/ca.crt", insecure=False).ca_file == "/ca.crt"  # off while address is empty
    assert PrometheusSettings() == _prometheus_config(bearerTokenFile="", caFile="", insecure=False)


@pytest.mark.parametrize(("raw", "message"), [
    ({"bearerTokenFile": "token"}, "recommender.prometheus.bearerTokenFile: 'token' is not an absolute path"),
    ({"bearerTokenFile": 3}, "recommender.prometheus.bearerTokenFile: 3 is not an absolute path"),
    ({"caFile": "ca.crt"}, "recommender.prometheus.caFile: 'ca.crt' is not an absolute path"),
    ({"insecure": "yes"}, "recommender.prometheus.insecure: 'yes' is not true or false"),
    ({"address": "http://p:9090", "caFile": "/ca.crt"},
     "recommender.prometheus.caFile: only for an https:// address (http://p:9090 is http://)"),
    ({"address": "http://p:9090", "insecure": True},
     "recommender.prometheus.insecure: only for an https:// address (http://p:9090 is http://)"),
    ({"address": "https://p:9090", "insecure": True, "caFile": "/ca.crt"},
     "recommender.prometheus.insecure: true verifies nothing, not even with caFile: set one of them"),
])
def test_bad_values_are_refused_in_one_line_naming_the_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as err:
        _prometheus_config(**raw)
    assert message in str(err.value) and "\n" not in str(err.value)
