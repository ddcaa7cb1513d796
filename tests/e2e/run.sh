#!/bin/bash
# make e2e: the CRI e2e tests against a real, private containerd 1.6 + runc (research/containerd-e2e.md).
#
# Needs root on a cgroup v1 host (Debian 12). Installs containerd, runc and busybox-static with apt-get when
# missing, starts containerd from a fresh temp dir with its own config, builds and imports an offline
# busybox image, runs `pytest -m e2e tests/e2e`, and ALWAYS tears everything down (trap EXIT): CRI
# cleanup, containerd and any leftover shim or container process killed by PID, mounts under the temp dir
# unmounted, the run's private cgroup root (/kcg-e2e-<random>) removed depth-first from every hierarchy,
# stale shim sockets removed. Exits with pytest's code.
#
# Environment: SNAPSHOTTER=overlayfs|native (default: overlayfs when an overlay mount works in the temp
# dir), KEEP_E2E_DIR=1 keeps the temp dir (logs) after teardown, PYTEST_ARGS adds pytest arguments.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
PY="$REPO/.venv/bin/python"
IMAGE=docker.io/library/kcg-e2e-busybox:1
T0=$(date +%s.%N)
step() { echo "[e2e $(awk "BEGIN{printf \"%6.2f\", $(date +%s.%N)-$T0}")s] $*"; }
# Alive and not a zombie: PID 1 on these machines reaps orphans lazily, and kill -0 is true for zombies.
alive() { [ -r "/proc/$1/stat" ] && ! awk '{exit !($3=="Z")}' "/proc/$1/stat" 2>/dev/null; }

[ "$(id -u)" = 0 ] || { echo "make e2e needs root (it runs containerd and writes cgroups)" >&2; exit 2; }
[ -x "$PY" ] || { echo "no virtualenv at $REPO/.venv: run through 'make e2e'" >&2; exit 2; }
if ! awk '$9 == "cgroup" && $NF ~ /(^|,)cpu(,|$)/ {found=1} END {exit !found}' /proc/self/mountinfo; then
  echo "make e2e needs a cgroup v1 cpu hierarchy (this host has none)" >&2; exit 2
fi

step "packages"
if ! command -v containerd >/dev/null || ! command -v runc >/dev/null || ! command -v ctr >/dev/null \
   || [ ! -x /bin/busybox ]; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q containerd runc busybox-static >/dev/null
fi
step "containerd $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}')"

D=$(mktemp -d /tmp/kcg-e2e.XXXXXX)
SUFFIX=$(tr -dc 'a-z0-9' </dev/urandom | head -c 8 || true)
CG_ROOT="kcg-e2e-$SUFFIX"       # the run's private cgroup root: pods live under /$CG_ROOT/kubepods/...
SOCK="$D/containerd.sock"
CONTAINERD_PID=""
RC=1

cri_cleanup() {
  # Stop and remove every container and sandbox through CRI (tolerating errors), so containerd and
  # runc remove their own mounts, shims and container cgroups.
  "$PY" "$REPO/tests/e2e/cri_cleanup.py" "unix://$SOCK" || echo "CRI cleanup failed (continuing)"
}

kill_pid() {  # kill_pid PID WHAT: SIGTERM, wait up to 10 s, then SIGKILL
  local pid=$1 what=$2 i
  alive "$pid" || return 0
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
  if alive "$pid"; then echo "$what $pid ignored SIGTERM: SIGKILL"; kill -9 "$pid" 2>/dev/null || true; fi
  for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
}

teardown() {
  RC=${RC:-1}
  set +e
  step "teardown"
  if [ -n "$CONTAINERD_PID" ] && alive "$CONTAINERD_PID"; then
    cri_cleanup
    kill_pid "$CONTAINERD_PID" containerd
  fi
  # Fallbacks after a crash, all by PID: shims serving our socket, then processes still in our cgroups.
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -F -- "-address $SOCK " >/dev/null; then
      echo "killing leftover shim $pid"; kill -9 "$pid" 2>/dev/null
    fi
  done
  for f in $(find /sys/fs/cgroup/*/"$CG_ROOT" -name cgroup.procs 2>/dev/null); do
    for pid in $(cat "$f" 2>/dev/null); do
      echo "killing leftover container process $pid ($f)"; kill -9 "$pid" 2>/dev/null
    done
  done
  sleep 0.2
  # Unmount everything under the temp dir, deepest first (rootfs overlays, sandbox shm, netns).
  awk -v d="$D/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "could not unmount $m"
  done
  # The private cgroup root, depth-first, in every hierarchy (runc removes only container leaves).
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h$CG_ROOT" ] || continue
    find "$h$CG_ROOT" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -d "$h$CG_ROOT" ] && echo "LEFTOVER cgroup $h$CG_ROOT"
  done
  # containerd 1.6 shims put sockets at /run/containerd/s/sha256(<grpc address>/<namespace>/<task id>);
  # a killed shim leaves its socket behind.
  for t in "$D"/state/io.containerd.runtime.v2.task/*/*; do
    [ -d "$t" ] || continue
    h=$(printf '%s' "$SOCK/$(basename "$(dirname "$t")")/$(basename "$t")" | sha256sum | cut -d' ' -f1)
    [ -e "/run/containerd/s/$h" ] && rm -f "/run/containerd/s/$h" && echo "removed stale shim socket $h"
  done
  rmdir /run/containerd/s /run/containerd 2>/dev/null  # only when empty: never touch a system containerd's
  if [ "$RC" != 0 ] && [ -f "$D/containerd.log" ]; then
    echo "---- containerd.log (last 30 lines) ----"; tail -n 30 "$D/containerd.log"
  fi
  if awk -v d="$D/" 'index($2, d) == 1 {found=1} END {exit !found}' /proc/mounts; then
    echo "mounts remain under $D: not removing it"
  elif [ "${KEEP_E2E_DIR:-0}" = 1 ]; then
    echo "kept $D"
  else
    rm -rf "$D"
  fi
  step "done (exit $RC)"
  exit "$RC"
}
trap teardown EXIT
trap 'RC=130; exit 130' INT TERM

mkdir -p "$D"/{root,state,opt,runc,cni/bin,cni/net.d,logs}

SNAP=${SNAPSHOTTER:-}
if [ -z "$SNAP" ]; then
  mkdir -p "$D/probe"/{lower,upper,work,merged}
  if mount -t overlay overlay -o "lowerdir=$D/probe/lower,upperdir=$D/probe/upper,workdir=$D/probe/work" \
       "$D/probe/merged" 2>/dev/null; then
    umount "$D/probe/merged"; SNAP=overlayfs
  else
    SNAP=native
  fi
  rm -rf "$D/probe"
fi

step "image"
"$PY" "$REPO/tests/e2e/build_image.py" "$D/image.tar" "$IMAGE"

step "containerd ($SNAP) in $D, pods under /$CG_ROOT"
REGISTRY="127.0.0.1:$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
sed -e "s#@D@#$D#g" -e "s#@SNAP@#$SNAP#g" -e "s#@IMAGE@#$IMAGE#g" -e "s#@REGISTRY@#$REGISTRY#g" \
  "$REPO/tests/e2e/containerd.toml.in" >"$D/config.toml"
containerd --config "$D/config.toml" >"$D/containerd.log" 2>&1 &
CONTAINERD_PID=$!
echo "$CONTAINERD_PID" >"$D/containerd.pid"
for _ in $(seq 1 200); do
  ctr -a "$SOCK" version >/dev/null 2>&1 && break
  alive "$CONTAINERD_PID" || { echo "containerd exited during startup"; exit 1; }
  sleep 0.05
done
ctr -a "$SOCK" version >/dev/null
ctr -a "$SOCK" -n k8s.io images import --snapshotter "$SNAP" "$D/image.tar" >/dev/null
ctr -a "$SOCK" -n k8s.io images ls -q | grep -x "$IMAGE" >/dev/null  # grep -x, not -q: SIGPIPE + pipefail

AGENT_TAR=${KCG_IMAGE_TAR:-$REPO/dist/kube-cgroup-agent-image.tar}
AGENT_IMAGE=""
if [ -f "$AGENT_TAR" ]; then  # the agent's own image (make image), run through CRI by test_image_e2e.py
  step "agent image $(basename "$AGENT_TAR")"
  ctr -a "$SOCK" -n k8s.io images import --snapshotter "$SNAP" "$AGENT_TAR" >/dev/null
  AGENT_IMAGE=$(ctr -a "$SOCK" -n k8s.io images ls -q | grep -m1 'kube-cgroup-agent:' || true)
fi

step "pytest -m e2e tests/e2e"
set +e
KCG_AGENT_IMAGE="$AGENT_IMAGE" CRI_E2E_REGISTRY="$REGISTRY" CRI_E2E_ENDPOINT="unix://$SOCK" CRI_E2E_DIR="$D" CRI_E2E_CGROUP_ROOT="/$CG_ROOT" CRI_E2E_IMAGE="$IMAGE" \
  "$REPO/.venv/bin/pytest" -m e2e "$REPO/tests/e2e" ${PYTEST_ARGS:-}
RC=$?
set -e
exit "$RC"
