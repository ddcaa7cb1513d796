"""The VPA updater's defaults the agent adopts, where the `vpa:` settings and the policy both read them.

Why a module of its own: the settings need only these numbers, and the policy (with the VPA model) is more
than a command over manifests should load to parse its configuration.
"""

from __future__ import annotations

from typing import Final

MIN_CHANGE: Final = 0.1  # --pod-update-threshold / DefaultUpdateThreshold (updater config.go)
POD_LIFETIME_S: Final = 12 * 3600.0  # --in-recommendation-bounds-eviction-lifetime-threshold / PodLifetimeUpdateThreshold
