"""The CRI driver: the one package that speaks gRPC (to containerd, CRI-O or cri-dockerd).

The rest of the agent sees plain dataclasses (`agent.cri.types`) and typed errors
(`agent.cri.errors`), never protobuf messages or `grpc.RpcError`.
"""
