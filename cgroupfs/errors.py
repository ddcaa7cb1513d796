"""The root of the cgroup drivers' errors, dependency-free so that the application can recognise them
without cgroupfs knowing the application. `retryable` says whether trying again later can succeed."""

from __future__ import annotations


class DriverError(Exception):
    """Root of cgroupfs' errors (cgroup files, mounts, systemd)."""

    retryable: bool = False

    def user_message(self) -> str:
        return str(self)
