"""The local recommender: VPA's recommendation model on the node, fed from the kernel's own counters.

`histogram` (VPA's decaying exponential histogram), `model` (one container's history: CPU samples, memory
peaks per interval, OOMs), `estimate` (percentiles, margin, confidence, minimums), `state` (the node's
histories), `trace` (recorded samples), `store` (atomic persistence), `render`, `counters` and `sampler`
(the kernel's counters, read-only), `publish` (cluster-wide). The commands are in `agent.commands.recommend`,
the daemon's part in `agent.daemon.recommender`.
"""
