"""kube-cgroup-agent: owns a Kubernetes node's pod resource tiers."""

__version__ = "0.1.0"
