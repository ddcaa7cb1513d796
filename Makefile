# Every target makes its own virtualenv in .venv (re-made when pyproject.toml changes).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SAMPLE := agent/commands/samples/node

.PHONY: venv bytecode run test lint unit e2e e2e-v2 e2e-k8s scale reliability bench clean image

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m compileall -q agent cgroupfs
	touch $(STAMP)

venv: $(STAMP)

# The editable install runs our modules from the source tree, and with PYTHONDONTWRITEBYTECODE set (this
# project's environments and the image set it) nothing would ever write their bytecode: every command would
# compile every module it imports again, some 50 ms of every command. Python still checks each .pyc against
# its source, so a stale one only costs that compile again. The image is built from a wheel, without these.
bytecode: venv
	$(BIN)/python -m compileall -q agent cgroupfs

# The agent's main job on the embedded sample node: a dry-run diff (exit 1 = differences found, which is expected).
run: venv bytecode
	@$(BIN)/kube-cgroup-agent diff --config $(SAMPLE)/config.yaml; rc=$$?; [ $$rc -le 1 ] || exit $$rc

lint: venv
	$(BIN)/ruff check agent cgroupfs tests bench proto deploy
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m tests.tools.import_cycles

unit: venv
	$(BIN)/pytest -q

test: lint unit

# The agent's image as an OCI archive (dist/kube-cgroup-agent-image.tar), built without a registry or daemon.
image: venv
	bash deploy/image/build.sh

e2e: venv image
	bash tests/e2e/run.sh

e2e-v2: venv
	bash tests/v2guest/run.sh

# The agent beside a real v1.36 kubelet on this machine (outside CI; docs/development.md, "A real cluster").
e2e-k8s: venv image
	bash tests/e2e_k8s/run.sh

# What one agent costs the API server and itself when the cluster around its node is big and busy (outside
# CI; bench/scale/README.md): the kit's etcd and kube-apiserver on ports and in a state directory of their
# own, simulated nodes, real agents. About 16 minutes; SCALE_ARGS=--quick is a smoke run of 3-4 minutes.
scale: venv
	$(BIN)/python -m bench.scale $(SCALE_ARGS)

# Fault injection, SIGKILLs and soak on this host's real cgroup v1 files (root); RELIABILITY.md has the
# figures. CI runs the short form: RELIABILITY_ARGS=--short.
reliability: venv
	$(BIN)/python -m tests.reliability $(RELIABILITY_ARGS)

bench: venv bytecode
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build dist *.egg-info
