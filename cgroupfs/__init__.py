"""cgroup drivers: mode detection, naming (cgroupfs and systemd), file layouts, conversions, where the agent
may touch the tree and what the kernel's refusals mean, the one module that opens cgroup files, and the
systemd driver. Nothing here knows about pods."""
