#!/usr/bin/env bash
# make e2e-k8s: the agent beside a real v1.36 kubelet on this machine (outside CI: the cluster's build takes
# minutes). Needs the binaries of ../shared/tools/realk8s/build.sh in $RK/bin (README: "A real cluster").
# Starts the cluster fresh (RK_FRESH=1), runs tests/e2e_k8s, stops the cluster by its PIDs (stop.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export RK=${RK:-/var/cache/realk8s}
TOOLS=${REALK8S_TOOLS:-$(cd .. && pwd)/shared/tools/realk8s}
[ -x "$TOOLS/start.sh" ] || { echo "e2e-k8s: no cluster kit at $TOOLS (REALK8S_TOOLS)" >&2; exit 2; }
for bin in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  if [ ! -x "$RK/bin/$bin" ]; then
    echo "e2e-k8s: no $RK/bin/$bin: build the kit with tests/e2e_k8s/build_kit.sh GIT_DIR (README, \"A real cluster\")" >&2
    exit 2
  fi
done
trap 'bash "$TOOLS/stop.sh" >/dev/null 2>&1 || true' EXIT
t0=$(date +%s)
RK_FRESH=1 bash "$TOOLS/start.sh" | tail -n 3
up=$(( $(date +%s) - t0 ))
echo "e2e-k8s: cluster up in $up s"
KUBECONFIG=$RK/kubeconfig KCG_REALK8S=$RK KCG_CLUSTER_UP_S=$up KCG_E2E_K8S_OUT=bench/results/e2e_k8s.json \
  .venv/bin/pytest -q -p no:cacheprovider tests/e2e_k8s ${PYTEST_ARGS:-} "$@"
.venv/bin/python -c 'from pathlib import Path; from bench.report import write_markdown; write_markdown(Path("bench/results"))'
echo "e2e-k8s: figure 8 of BENCHMARKS.md rewritten from bench/results/e2e_k8s.json"
