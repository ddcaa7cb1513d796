"""Fixtures of the cgroupfs tests."""

from __future__ import annotations

import pytest

import cgroupfs.files
from cgroupfs.openat2 import opener


@pytest.fixture(params=["openat2", "walk"])
def both_openers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test twice: `read_many` opening each file with one openat2 call (where the kernel has it), and
    walking every path component with O_NOFOLLOW (kernels and filters without openat2)."""
    if request.param == "walk":
        monkeypatch.setattr(cgroupfs.files, "_open_beneath", lambda: None)
    elif opener(cgroupfs.files._READ_FLAGS) is None:
        pytest.skip("openat2 is not available here")
    return str(request.param)
