"""An in-process fake CRI runtime, modelled on cri-api's FakeRuntimeService: its state and what the tests
do to it (`state`), the gRPC servicers answering the agent's calls over that state as containerd does
(`servicer`), and a real server on a unix socket to run them (`serving`)."""
