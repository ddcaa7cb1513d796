"""kube-cgroup-agent: owns a Kubernetes node's pod resource tiers."""

__all__ = ["__version__"]

# The one source of the version: setuptools reads it into the distribution's metadata
# (`[tool.setuptools.dynamic]` in pyproject.toml), and `version` prints it without reading that metadata back
# (importlib.metadata and the email parser it imports cost a command ~25 ms).
__version__ = "0.2.0.dev0"
