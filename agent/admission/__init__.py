"""The keeper of the VPA admission parameters (deploy/vpa-admission): the objects the API server's
MutatingAdmissionPolicy reads when a pod is created."""
