"""What SIGHUP decides from the settings it reads again (agent.daemon.reload_verdict): refused, unchanged
or new, and never an exception that would end the daemon."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from agent.config.settings import ConfigError, Settings, from_mapping
from agent.daemon import reload_verdict


def _current(tmp_path: Path) -> Settings:
    pods = tmp_path / "pods"
    pods.mkdir(exist_ok=True)
    return from_mapping({"pods": str(pods), "cgroupfs": str(tmp_path), "stateDir": str(tmp_path / "state")})


def _raise(err: Exception) -> Settings:
    raise err


@pytest.mark.parametrize(
    ("load", "problems", "changed"),
    [
        (lambda cur: cur, (), ()),  # the same settings: nothing to do
        (lambda cur: replace(cur, cpu_cfs_quota=False), (), ("cpu_cfs_quota",)),
        (lambda cur: replace(cur, resync_period_s=30.0, log_level="debug"), (), ("resync_period_s", "log_level")),
        (lambda cur: _raise(ConfigError(["unknown setting 'cgroupDrvier'", "workers: not an integer"])),
         ("unknown setting 'cgroupDrvier'", "workers: not an integer"), ()),
        (lambda cur: _raise(PermissionError(13, "Permission denied", "/etc/kube-cgroup-agent/config.yaml")),
         ("Permission denied (/etc/kube-cgroup-agent/config.yaml)",), ()),
        (lambda cur: replace(cur, pods="/nonexistent/kcg-manifests"),
         ("pods '/nonexistent/kcg-manifests': the daemon watches a directory of manifests",), ()),
    ],
    ids=["unchanged", "one-change", "two-changes", "invalid", "unreadable", "cannot-start"],
)  # fmt: skip
def test_the_verdict(
    tmp_path: Path, load: Callable[[Settings], Settings], problems: tuple[str, ...], changed: tuple[str, ...]
) -> None:
    current = _current(tmp_path)
    verdict = reload_verdict(current, lambda: load(current))
    assert verdict.problems == problems
    assert verdict.changed == changed
    assert (verdict.settings is not None) == bool(changed)
    if changed:
        assert verdict.settings is not None and verdict.settings != current
