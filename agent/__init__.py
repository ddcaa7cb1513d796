"""kube-cgroup-agent: owns a Kubernetes node's pod resource tiers."""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """`agent.__version__` on demand, so that importing the package reads no distribution metadata."""
    if name == "__version__":
        from agent.infra.version import version

        return version()
    raise AttributeError(f"module 'agent' has no attribute {name!r}")
