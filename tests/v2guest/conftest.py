"""Fixtures for the `v2guest` tests: they run only inside the cgroup v2 + systemd guest (make e2e-v2).

Anywhere else (the host's `make test`) every test marked `v2guest` is skipped with the reason, before
any fixture runs. Add a test module here, mark its tests `pytestmark = pytest.mark.v2guest`, and
`make e2e-v2` runs it in the guest.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.v2guest import guestlib


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = guestlib.guest_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("v2guest") is not None:
            item.add_marker(skip)


@pytest.fixture
def unique() -> str:
    """A short hex id for names that must not collide with other tests (no "-" or "_" in it)."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def cgroup_tree(unique: str) -> Iterator[guestlib.CgroupTree]:
    """A private cgroup v2 tree /sys/fs/cgroup/kca-v2test-<hex> with +cpu +memory +hugetlb +pids enabled
    along the path; its processes are killed and the tree removed afterwards."""
    tree = guestlib.CgroupTree(f"kca-v2test-{unique}")
    tree.create()
    try:
        yield tree
    finally:
        tree.destroy()


@pytest.fixture
def transient_slice() -> Iterator[guestlib.SliceFactory]:
    """`transient_slice("kubepods-burstable-pod<x>.slice", [("MemoryMax", "t", 1 << 27)])` starts a
    kubelet-style transient slice through systemd (D-Bus StartTransientUnit) and returns its cgroup
    directory; every slice started is stopped afterwards."""
    factory = guestlib.SliceFactory()
    try:
        yield factory
    finally:
        factory.stop_all()
