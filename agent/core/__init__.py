"""The pure core: the model, the kubelet's semantics (`compute`), the diff of desired against observed,
the ordered plan and the ownership table. No I/O, no clock, no Kubernetes client, no gRPC (an import
contract in `make lint` keeps it so); imports only `agent.infra.errors`."""
