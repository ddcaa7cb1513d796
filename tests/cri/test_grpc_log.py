"""gRPC's core logs a server's GOAWAY (the runtime stopping or restarting) at INFO on stderr by default:
a glog-style line in a log that is otherwise the daemon's JSON. Whether it is printed depends on which
the client notices first, the GOAWAY or the closed socket, so the test is on the setting that silences
it: the agent's entry point defaults GRPC_VERBOSITY to ERROR before grpc is imported, and a value in the
environment still wins."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent.commands.main import main


@pytest.mark.parametrize(("given", "expected"), [(None, "ERROR"), ("INFO", "INFO"), ("DEBUG", "DEBUG")])
def test_the_entry_point_quiets_grpcs_core_unless_told(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                       given: str | None, expected: str) -> None:
    monkeypatch.setenv("GRPC_VERBOSITY", "restored after the test")
    if given is None:
        monkeypatch.delenv("GRPC_VERBOSITY")
    else:
        monkeypatch.setenv("GRPC_VERBOSITY", given)
    assert main(["version"]) == 0
    assert "kube-cgroup-agent" in capsys.readouterr().out
    assert os.environ["GRPC_VERBOSITY"] == expected


def test_nothing_in_the_cli_module_imports_grpc_before_the_setting() -> None:
    """The setting is read when grpc's core starts: importing the CLI must not start it."""
    code = "import sys, agent.commands.main; print('grpc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
