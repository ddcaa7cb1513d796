#!/usr/bin/env bash
# The cluster kit of make e2e-k8s and cluster.sh: ../shared/tools/realk8s/build.sh, with kube-proxy (Services:
# in-cluster clients reach the API server at 10.96.0.1) and kubectl among its components.
#
#   bash tests/e2e_k8s/build_kit.sh GIT_DIR_OF_openshift/microshift     # binaries into $RK/bin
#
# build.sh extracts the vendored Kubernetes tree with `git ls-files` on a bare GIT_DIR, which git 2.39
# (Debian 12) refuses ("this operation must be run in a work tree"). The same extraction runs here first,
# with an empty work tree; build.sh skips its own when $RK/src/go.mod exists.
set -euo pipefail
MIRROR=${1:?usage: build_kit.sh GIT_DIR_OF_openshift/microshift}
MIRROR=$(cd "$MIRROR" && pwd)
export RK=${RK:-/var/cache/realk8s}
TOOLS=${REALK8S_TOOLS:-$(cd "$(dirname "$0")/../../.." && pwd)/shared/tools/realk8s}
SUB=deps/github.com/openshift/kubernetes
if [ ! -f "$RK/src/go.mod" ]; then
  mkdir -p "$RK/src"
  tmp=$(mktemp -d); wt=$(mktemp -d)
  trap 'rm -rf "$tmp" "$wt"' EXIT
  git init -q --bare "$tmp/git"
  echo "$MIRROR/objects" > "$tmp/git/objects/info/alternates"
  g() { GIT_DIR="$tmp/git" GIT_INDEX_FILE="$tmp/index" GIT_WORK_TREE="$wt" git "$@"; }
  g read-tree "$(git --git-dir="$MIRROR" rev-parse "HEAD:$SUB")"
  # blobs a partial mirror lacks (two OpenAPI test fixtures nothing built needs) leave the index
  g ls-files -s | awk '{print $2}' | g cat-file --batch-check | awk '$2 == "missing" {print $1}' > "$tmp/missing"
  g ls-files -s | awk 'NR == FNR {m[$1]; next} $2 in m {print $4}' "$tmp/missing" - | xargs -r env \
    GIT_DIR="$tmp/git" GIT_INDEX_FILE="$tmp/index" GIT_WORK_TREE="$wt" git update-index --force-remove --
  g archive "$(g write-tree)" | tar -x -C "$RK/src"
fi
COMPONENTS=${COMPONENTS:-kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl} bash "$TOOLS/build.sh" "$MIRROR"
