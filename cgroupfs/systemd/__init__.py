"""The systemd cgroup driver: unit properties (pure), a D-Bus client, and the driver tying them together.

Deliberately imports nothing, so that `cgroupfs.systemd.properties` stays importable by the pure core
without pulling in `jeepney` (only `cgroupfs.systemd.bus` imports it).
"""
