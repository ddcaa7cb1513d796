"""cgroup drivers: mode detection, naming (cgroupfs and systemd), file layouts, conversions, the one
module that opens cgroup files, and the systemd driver. Nothing here knows about pods."""
