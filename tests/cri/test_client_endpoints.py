"""The runtime endpoint: a socket path or unix:// target from the configured endpoint, and autodetection
of the first runtime socket that exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cri.endpoint import NoRuntimeSocket, autodetect_endpoint, normalize_endpoint, socket_path
from tests.support.fake_cri.serving import FakeCRI


@pytest.mark.parametrize(
    ("endpoint", "path"),
    [
        ("unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock"),
        ("unix:/run/crio/crio.sock", "/run/crio/crio.sock"),
        ("/var/run/cri-dockerd.sock", "/var/run/cri-dockerd.sock"),
        ("localhost:1234", None),
    ],
)
def test_socket_path_of_an_endpoint(endpoint: str, path: str | None) -> None:
    assert socket_path(endpoint) == path


def test_a_bare_path_endpoint_becomes_a_unix_target() -> None:
    assert normalize_endpoint("/run/x.sock") == "unix:///run/x.sock"
    assert normalize_endpoint("unix:///run/x.sock") == "unix:///run/x.sock"


def test_autodetect_picks_the_first_existing_socket(fake_cri: FakeCRI, tmp_path: Path) -> None:
    missing = f"unix://{tmp_path}/none.sock"
    not_a_socket = tmp_path / "plain"
    not_a_socket.write_text("")
    assert autodetect_endpoint([missing, f"unix://{not_a_socket}", fake_cri.endpoint]) == fake_cri.endpoint


def test_autodetect_without_any_socket_lists_what_it_tried(tmp_path: Path) -> None:
    tried = [f"unix://{tmp_path}/a.sock", f"unix://{tmp_path}/b.sock"]
    with pytest.raises(NoRuntimeSocket) as info:
        autodetect_endpoint(tried)
    assert all(t in str(info.value) for t in tried)
