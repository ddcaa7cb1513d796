"""The pure core: pods in, kubelet-exact cgroup and container values out. No I/O here."""

from agent.compute.config import ComputeConfig
from agent.compute.node import NodeComputation, compute_node
from agent.compute.pod import PodComputation, PodComputeError, compute_pod

__all__ = [
    "ComputeConfig",
    "NodeComputation",
    "PodComputation",
    "PodComputeError",
    "compute_node",
    "compute_pod",
]
