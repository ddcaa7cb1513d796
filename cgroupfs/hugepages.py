"""The node's huge page sizes, read as the runtime reads them: /sys/kernel/mm/hugepages/hugepages-<N>kB.

The kubelet limits every size the node offers (0 for sizes a pod did not ask for), so a missing size
would leave a limit unset; the directory is injectable for tests and for a DaemonSet's /host/sys.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from cgroupfs.convert import hugepage_size_from_kb_dir

HUGEPAGES_DIR: Final = Path("/sys/kernel/mm/hugepages")


def hugepage_sizes_from_names(names: Iterable[str]) -> tuple[int, ...]:
    """Sizes in bytes, sorted, from directory names; names that are not "hugepages-<N>kB" are skipped."""
    sizes: set[int] = set()
    for name in names:
        try:
            size = hugepage_size_from_kb_dir(name)
        except ValueError:
            continue
        if size > 0:
            sizes.add(size)
    return tuple(sorted(sizes))


def node_hugepage_sizes(directory: Path = HUGEPAGES_DIR) -> tuple[int, ...]:
    """The huge page sizes in bytes, smallest first; () on a kernel without huge pages."""
    try:
        names = [e.name for e in os.scandir(directory) if e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return ()
    return hugepage_sizes_from_names(names)
