"""The committed CRI stubs are exactly what proto/generate.py makes from proto/runtime/v1/api.proto."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "agent" / "cri" / "v1"
FILES = ("__init__.py", "api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stubs")
    subprocess.run(
        [sys.executable, str(REPO / "proto" / "generate.py"), "--out", str(out)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.mark.parametrize("name", FILES)
def test_committed_stub_matches_a_fresh_generation(regenerated: Path, name: str) -> None:
    fresh = (regenerated / name).read_bytes()
    committed = (COMMITTED / name).read_bytes()
    assert committed == fresh, f"agent/cri/v1/{name} is stale: run `.venv/bin/python proto/generate.py`"


def test_generated_stubs_import_only_from_their_own_package() -> None:
    foreign = re.compile(r"^\s*(from|import)\s+(runtime\.|api_pb2\b)", re.MULTILINE)
    for name in FILES:
        assert not foreign.search((COMMITTED / name).read_text()), name


def test_stub_speaks_the_cri_service_path() -> None:
    from agent.cri.v1 import api_pb2

    service = api_pb2.DESCRIPTOR.services_by_name["RuntimeService"]
    assert service.full_name == "runtime.v1.RuntimeService"
    assert api_pb2.ContainerStatus.DESCRIPTOR.fields_by_name["resources"].number == 16
    assert (
        api_pb2.LinuxContainerResources.DESCRIPTOR.fields_by_name["memory_swap_limit_in_bytes"].number == 10
    )
