"""Shared fixtures. Add yours below; keep each one small and documented."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.cgroupfs_trees import FACTORIES, SKIP_REASONS, Backend
from tests.backends.systemd_trees import SYSTEMD_FACTORIES, SYSTEMD_SKIP_REASONS, SystemdBackend
from tests.support.cgroup_tree import FakeCgroupTree, Mode
from tests.support.fake_cri.serving import FakeCRI, running_fake_cri
from tests.support.kernel import KernelRoot, skip_reason


@pytest.fixture
def fake_cgroup_tree(tmp_path: Path) -> Callable[..., FakeCgroupTree]:
    """A factory of strict fake --cgroupfs trees: fake_cgroup_tree("v1" | "v2" | "hybrid", driver=...)."""
    counter = itertools.count()

    def make(mode: Mode = "hybrid", **kwargs: Any) -> FakeCgroupTree:
        return FakeCgroupTree(tmp_path / f"cgroupfs-{mode}-{next(counter)}", mode, **kwargs)

    return make


@pytest.fixture
def kernel_root() -> Iterator[KernelRoot]:
    """A private kcg-test-<random> cgroup in this host's v1 cpu and memory hierarchies (and the unified
    one), removed depth-first afterwards even when the test fails; skips unless root on a v1 host."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    root = KernelRoot.create()
    try:
        yield root
    finally:
        left = root.cleanup()
        assert not left, f"could not remove test cgroups {left}"


@pytest.fixture
def fake_cri(tmp_path: Path) -> Iterator[FakeCRI]:
    """An in-process fake CRI runtime (tests/support/fake_cri/) serving on unix:<tmp_path>/cri.sock:
    `fake_cri.service` holds sandboxes/containers, the call log and inject_error(); connect a
    CRIClient to `fake_cri.endpoint`."""
    with running_fake_cri(tmp_path) as fake:
        yield fake


def _hypothesis_profile() -> None:
    """No example database in the work tree: runs stay reproducible from a clean clone and work for a
    user who cannot write there."""
    from hypothesis import settings

    settings.register_profile("kcg", database=None, deadline=None)
    settings.load_profile("kcg")


_hypothesis_profile()


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A cgroup tree for the cgroupfs driver, by id (tests/backends/): parametrize with
    `@pytest.mark.parametrize("backend", BACKENDS, indirect=True)`. A real one skips where it cannot run
    and is removed afterwards; nothing may be left behind."""
    reason = SKIP_REASONS.get(request.param, lambda: None)()
    if reason is not None:
        pytest.skip(reason)
    made = FACTORIES[request.param](tmp_path)
    try:
        yield made
    finally:
        left = made.cleanup()
        assert not left, f"{request.param}: could not remove {left}"


@pytest.fixture
def systemd_backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SystemdBackend]:
    """A systemd-run cgroup v2 tree for the systemd driver (tests/backends/), fake or the guest's real
    systemd: parametrize with `@pytest.mark.parametrize("systemd_backend", SYSTEMD_BACKENDS, indirect=True)`."""
    reason = SYSTEMD_SKIP_REASONS.get(request.param, lambda: None)()
    if reason is not None:
        pytest.skip(reason)
    made = SYSTEMD_FACTORIES[request.param](tmp_path, monkeypatch)
    try:
        yield made
    finally:
        left = made.cleanup()
        assert not left, f"{request.param}: could not remove {left}"
