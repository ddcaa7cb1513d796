"""`make scale`: what one agent costs the API server and itself when the cluster around its node is big and
busy (issue 41). bench/scale/README.md describes the harness; `python -m bench.scale --help` its knobs."""
