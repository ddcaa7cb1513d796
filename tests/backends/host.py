"""What this machine offers a real backend: the kernel's huge page sizes, and why the host-kernel and
guest backends cannot run here (None when they can). Shared by the cgroupfs and systemd backends."""

from __future__ import annotations

from pathlib import Path
from typing import Final

HUGEPAGES: Final = Path("/sys/kernel/mm/hugepages")


def node_hugepage_sizes(directory: Path = HUGEPAGES) -> tuple[int, ...]:
    """The huge page sizes of this kernel, from /sys/kernel/mm/hugepages/hugepages-<n>kB."""
    if not directory.is_dir():
        return ()
    sizes = [int(p.name.removeprefix("hugepages-").removesuffix("kB")) * 1024 for p in directory.iterdir()]
    return tuple(sorted(sizes))


def guest_skip_reason() -> str | None:
    from tests.v2guest.guestlib import guest_skip_reason as reason

    return reason()


def host_kernel_skip_reason() -> str | None:
    from tests.support.kernel import skip_reason

    return skip_reason()

