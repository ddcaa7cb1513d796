#!/usr/bin/env python3
"""Stop and remove every container and sandbox of a (private, test) containerd through CRI.

    cri_cleanup.py unix:///tmp/kcg-e2e.XXXX/containerd.sock

Used by tests/e2e/run.sh before it stops containerd, so containerd and runc undo their own mounts,
shims and container cgroups. Errors are reported and tolerated; the exit code is 0 unless the
runtime could not be reached at all.
"""

from __future__ import annotations

import sys

import grpc

from agent.cri.v1 import api_pb2 as pb
from agent.cri.v1 import api_pb2_grpc as pb_grpc


def main() -> int:
    channel = grpc.insecure_channel(sys.argv[1])
    try:
        grpc.channel_ready_future(channel).result(timeout=5)
    except grpc.FutureTimeoutError:
        print(f"CRI cleanup: {sys.argv[1]} not answering")
        return 1
    rt = pb_grpc.RuntimeServiceStub(channel)

    def attempt(name: str, call: grpc.UnaryUnaryMultiCallable, request: object) -> None:
        try:
            call(request, timeout=30)
        except grpc.RpcError as err:
            print(f"CRI cleanup: {name}: {err.code().name} {str(err.details())[:200]}")

    for c in rt.ListContainers(pb.ListContainersRequest(), timeout=10).containers:
        attempt("StopContainer", rt.StopContainer, pb.StopContainerRequest(container_id=c.id, timeout=0))
        attempt("RemoveContainer", rt.RemoveContainer, pb.RemoveContainerRequest(container_id=c.id))
    for s in rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items:
        attempt("StopPodSandbox", rt.StopPodSandbox, pb.StopPodSandboxRequest(pod_sandbox_id=s.id))
        attempt("RemovePodSandbox", rt.RemovePodSandbox, pb.RemovePodSandboxRequest(pod_sandbox_id=s.id))
    left = len(rt.ListPodSandbox(pb.ListPodSandboxRequest(), timeout=10).items)
    left_c = len(rt.ListContainers(pb.ListContainersRequest(), timeout=10).containers)
    print(f"CRI cleanup: {left_c} containers and {left} sandboxes left")
    channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
