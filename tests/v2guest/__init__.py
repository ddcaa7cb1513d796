"""Tests that run inside the cgroup v2 + systemd guest (make e2e-v2); see README.md."""
