"""The command line: every command (`diff`, `plan`, `explain`, `apply`, `check`, `recommend`, `rollout`,
`run`) with its rendering, and the sample node `make run` reads. The top layer: may import anything below,
but a command imports only what it uses (`diff --pods` loads no daemon, Kubernetes client nor gRPC)."""
