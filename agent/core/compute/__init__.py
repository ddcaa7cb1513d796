"""The pure core: pods in, kubelet-exact cgroup and container values out. No I/O here."""

from agent.core.compute.config import ComputeConfig
from agent.core.compute.node import NodeComputation, compute_node
from agent.core.compute.pod import PodComputation, PodComputeError, compute_pod

__all__ = [
    "ComputeConfig",
    "NodeComputation",
    "PodComputation",
    "PodComputeError",
    "compute_node",
    "compute_pod",
]
