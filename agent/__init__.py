"""kube-cgroup-agent: owns a Kubernetes node's pod resource tiers."""

from agent.version import VERSION as __version__

__all__ = ["__version__"]
