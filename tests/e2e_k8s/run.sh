#!/usr/bin/env bash
# make e2e-k8s: the agent as its DaemonSet on a real two-node v1.36 cluster on this machine (outside CI: the
# kit's build and the TCG guest take minutes). tests/e2e_k8s/cluster.sh up starts the control plane, the
# cgroup v1 node realk8s-node (this host) and the cgroup v2 + systemd node realk8s-v2 (a qemu guest), imports
# `make image` on both and applies deploy/overlays/realk8s; then tests/e2e_k8s runs; cluster.sh down stops
# everything by PID, whatever the tests did. Needs the binaries of tests/e2e_k8s/build_kit.sh in $RK/bin
# (docs/development.md, "A real cluster"); exit 2 with the how-to when they are missing.
#   PYTEST_ARGS="-k oracle" make e2e-k8s      # a part; KCG_BESIDE_S=60 shortens the five-minute run
set -euo pipefail
cd "$(dirname "$0")/../.."
export RK=${RK:-/var/cache/realk8s}
TOOLS=${REALK8S_TOOLS:-$(cd .. && pwd)/shared/tools/realk8s}
[ -x "$TOOLS/start.sh" ] || { echo "e2e-k8s: no cluster kit at $TOOLS (REALK8S_TOOLS)" >&2; exit 2; }
for bin in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  if [ ! -x "$RK/bin/$bin" ]; then
    echo "e2e-k8s: no $RK/bin/$bin: build the kit with tests/e2e_k8s/build_kit.sh GIT_DIR (docs/development.md, \"A real cluster\")" >&2
    exit 2
  fi
done
trap 'bash tests/e2e_k8s/cluster.sh down >/dev/null 2>&1 || true' EXIT
t0=$(date +%s)
bash tests/e2e_k8s/cluster.sh up > "$RK/cluster-up.log" 2>&1 || { tail -n 40 "$RK/cluster-up.log"; exit 1; }
up=$(( $(date +%s) - t0 ))
grep -E '^\[cluster .*===' "$RK/cluster-up.log" || true
echo "e2e-k8s: two-node cluster up in $up s (log: $RK/cluster-up.log)"
rc=0
KUBECONFIG=$RK/kubeconfig KCG_REALK8S=$RK KCG_CLUSTER=1 KCG_CLUSTER_UP_S=$up \
  KCG_E2E_K8S_OUT=bench/results/e2e_k8s.json \
  .venv/bin/pytest -q -rA -p no:cacheprovider tests/e2e_k8s ${PYTEST_ARGS:-} "$@" || rc=$?
# Figure 11: the agent on a bare node (make e2e's private containerd) against this host's kubelet, same
# pods/resize calls, while the cluster is up. KCG_LATENCY=0 leaves it out.
if [ "${KCG_LATENCY:-1}" = 1 ]; then
  KUBECONFIG=$RK/kubeconfig KCG_REALK8S=$RK KCG_CLUSTER=1 KCG_LATENCY_OUT=bench/results/resize_latency.json \
    PYTEST_ARGS="-q -rA -p no:cacheprovider -k resize_latency_vs_kubelet" bash tests/e2e/run.sh || rc=$?
fi
.venv/bin/python -c 'from pathlib import Path; from bench.report import write_markdown; write_markdown(Path("bench/results"))'
echo "e2e-k8s: figure 8 of BENCHMARKS.md rewritten from bench/results/e2e_k8s.json"
.venv/bin/python -m tests.reliability.cluster_faults_doc
exit $rc
