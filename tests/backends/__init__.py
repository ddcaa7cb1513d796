"""One suite, several backends: the same `apply` tests run on the strict fake tree and on real kernels.

A backend is a cgroup tree the agent is pointed at (`cgroupfs`, `cgroup_root`), which a test fills the
way the kubelet would and reads back. `cgroupfs_trees` holds those of the cgroupfs driver — the fake tree
(v1 / v2 / hybrid, everywhere), this host's real v1 hierarchies (root only), the `make e2e-v2` guest's
cgroup v2 (only inside the guest); `systemd_trees` those of the systemd driver — slices made as the
kubelet makes them and unit properties read back, from a fake systemd on a private bus or the guest's
real systemd; `host` what decides where a real one can run.

Tests take the `backend` / `systemd_backend` fixtures (tests/conftest.py) parametrized with `BACKENDS` /
`SYSTEMD_BACKENDS`; a real backend skips with the reason where it cannot run. Paths are resolved here
independently of cgroupfs.layout (the code under test), from each backend's own knowledge of its mounts.
"""
