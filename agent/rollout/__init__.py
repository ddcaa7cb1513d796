"""Graceful in-place update of StatefulSet and DaemonSet pods (seed 004): the pure core.

`eligibility` says, from the pod's revision and the workload's update revision, whether a pod can be
updated in place (only container images differ) or must be recreated; `order` says which of this node's
pods may be updated now, keeping the StatefulSet order and the budget of unavailable pods.
"""
