"""Huge page sizes from /sys/kernel/mm/hugepages (an injectable directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cgroupfs.hugepages import hugepage_sizes_from_names, node_hugepage_sizes


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param(["hugepages-1048576kB", "hugepages-2048kB"], (2 << 20, 1 << 30), id="x86-sorted"),
        pytest.param(["hugepages-64kB", "hugepages-2048kB", "hugepages-32768kB"], (64 << 10, 2 << 20, 32 << 20), id="arm64"),
        pytest.param([], (), id="none"),
        pytest.param(["hugepages-2048kB", "hugepages-xkB", "README", "hugepages-0kB"], (2 << 20,), id="junk-skipped"),
    ],
)
def test_sizes_come_from_the_directory_names(tmp_path: Path, entries: list[str], expected: tuple[int, ...]) -> None:
    for name in entries:
        (tmp_path / name).mkdir()
    assert node_hugepage_sizes(tmp_path) == expected


def test_files_are_not_sizes(tmp_path: Path) -> None:
    (tmp_path / "hugepages-2048kB").write_text("")
    assert node_hugepage_sizes(tmp_path) == ()


def test_a_kernel_without_huge_pages_has_no_sizes(tmp_path: Path) -> None:
    assert node_hugepage_sizes(tmp_path / "missing") == ()


def test_duplicates_collapse() -> None:
    assert hugepage_sizes_from_names(["hugepages-2048kB", "hugepages-2048kB"]) == (2 << 20,)


def test_this_host() -> None:
    real = Path("/sys/kernel/mm/hugepages")
    if not real.is_dir():
        pytest.skip("no /sys/kernel/mm/hugepages here")
    expected = tuple(sorted(int(p.name[len("hugepages-") : -2]) * 1024 for p in real.iterdir()))
    assert node_hugepage_sizes() == expected
    assert list(node_hugepage_sizes()) == sorted(node_hugepage_sizes())
