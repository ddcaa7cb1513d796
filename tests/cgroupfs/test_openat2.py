"""openat2 beneath a directory: a plain file opens; a symlink anywhere on the way, an absolute path and a
path that climbs out are refused by the kernel, whatever the symlink points to."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cgroupfs.openat2 import Opener, opener

FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


@pytest.fixture
def beneath() -> Opener:
    found = opener(FLAGS)
    if found is None:
        pytest.skip("openat2 is not available here")
    return found


@pytest.fixture
def top(tmp_path: Path) -> Iterator[int]:
    inside = tmp_path / "top"
    (inside / "cpu" / "pod").mkdir(parents=True)
    (inside / "cpu" / "pod" / "cpu.shares").write_text("2\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "cpu.shares").write_text("1024\n")
    (inside / "cpu" / "evil").symlink_to(outside)
    (inside / "cpu" / "inner").symlink_to(inside / "cpu" / "pod")  # a symlink that stays inside
    (inside / "cpu" / "pod" / "evilfile").symlink_to(outside / "cpu.shares")
    fd = os.open(inside, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_a_plain_path_opens(beneath: Opener, top: int) -> None:
    fd = beneath(top, "cpu/pod/cpu.shares")
    try:
        assert os.read(fd, 100) == b"2\n"
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("cpu/evil/cpu.shares", errno.ELOOP),
        ("cpu/inner/cpu.shares", errno.ELOOP),
        ("cpu/pod/evilfile", errno.ELOOP),
        ("cpu/../../outside/cpu.shares", errno.EXDEV),
        ("/etc/hostname", errno.EXDEV),
        ("cpu/pod/missing", errno.ENOENT),
        ("cpu/pod/cpu.shares/x", errno.ENOTDIR),
    ],
)
def test_what_would_leave_or_follow_a_symlink_is_refused(beneath: Opener, top: int, path: str, code: int) -> None:
    with pytest.raises(OSError) as caught:
        os.close(beneath(top, path))
    assert caught.value.errno == code


def test_one_opener_per_flags() -> None:
    assert opener(FLAGS) is opener(FLAGS)
