"""Infrastructure every layer may use and that knows nothing of pods or cgroups: typed errors, structured
logs, metrics, the work queue, Leases, atomic files, durations, the version, the config-section frame.
The bottom layer: imports nothing else from the agent."""
