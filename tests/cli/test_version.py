"""`version`: one source for the version, the checkout's or the image's commit."""

from __future__ import annotations

import subprocess

import pytest

from agent.commands.main import main
from tests.cli.test_cli import ROOT, run_cli


def test_version() -> None:
    assert main(["version"]) == 0


def test_the_version_command_prints_the_installed_distributions_version() -> None:
    """One source: what setuptools wrote into the distribution is what `version` prints."""
    r = run_cli("version")
    assert r.returncode == 0, r.stderr
    from importlib.metadata import version

    assert r.stdout.startswith(f"kube-cgroup-agent {version('kube-cgroup-agent')} (commit ")
    assert "0+unknown" not in r.stdout


def test_the_version_command_names_the_checkouts_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """From a git checkout (as `make` installs it) the commit is HEAD's; the image sets KCG_COMMIT instead."""
    from agent.infra.version import commit

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    monkeypatch.delenv("KCG_COMMIT", raising=False)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True)
    assert commit() == head.stdout.strip()
    monkeypatch.setenv("KCG_COMMIT", "0123abcd")
    assert commit() == "0123abcd"
