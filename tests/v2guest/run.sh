#!/bin/bash
# make e2e-v2: run the `v2guest` tests inside a Debian guest booted under qemu (TCG) with systemd as PID 1
# and only the unified cgroup hierarchy. See tests/v2guest/README.md.
#
# Steps: host packages -> wheel pins + image key -> image (cached by key, built on a miss) -> project copy
# into a temporary 9p share -> boot (snapshot=on, image stays pristine) -> guest runs pytest -> summary.
# Exit code: the guest's pytest exit code; 1 when the guest never reported (boot failure, timeout).
# Kept: only the cache directory ($KCA_V2GUEST_CACHE), which also holds the last run's logs (last-run/).
#
# Environment:
#   KCA_V2GUEST_CACHE        image cache (default /var/cache/kube-cgroup-agent/v2guest)
#   KCA_V2GUEST_REBUILD=1    rebuild the image even when the cache has it
#   KCA_V2GUEST_TIMEOUT      seconds for the whole guest run (default 900: the suite with the agent as a
#                            systemd unit takes about 10 minutes under TCG)
#   KCA_V2GUEST_BUILD_TIMEOUT seconds for an image build (default 900)
#   KCA_V2GUEST_MEM / _SMP   guest memory in MiB (2048) / vCPUs (2)
#   KCA_V2GUEST_PYTEST_ARGS  extra pytest arguments for the guest, shell-quoted (e.g. "-x -k 'memory or slice'")
#   KCA_V2GUEST_PYTHON       python of the project's venv (default .venv/bin/python)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${KCA_V2GUEST_CACHE:-/var/cache/kube-cgroup-agent/v2guest}
TIMEOUT=${KCA_V2GUEST_TIMEOUT:-900}
BUILD_TIMEOUT=${KCA_V2GUEST_BUILD_TIMEOUT:-900}
MEM=${KCA_V2GUEST_MEM:-2048}
SMP=${KCA_V2GUEST_SMP:-2}
PY=${KCA_V2GUEST_PYTHON:-$ROOT/.venv/bin/python}
TEST_EXTRAS=(pytest hypothesis)   # test-only packages for the guest venv, besides [project].dependencies

T0=$(date +%s)
STEP_T=$T0
log() { echo "[v2guest $(date +%T)] $*"; }
step() {
  local now; now=$(date +%s)
  log "--- $* (previous step $((now - STEP_T)) s)"
  STEP_T=$now
}
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------- cleanup
WORK=""           # temporary share + scratch, removed on exit
BUILD_DIR=""      # partial image directory in the cache, removed unless it was completed
BUILD_PID=""      # process group leader of an image build
TIMEOUT_PID=""    # `timeout` wrapping qemu
QEMU_PIDFILE=""
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM HUP
  if [ -n "$QEMU_PIDFILE" ] && [ -s "$QEMU_PIDFILE" ]; then
    pid=$(cat "$QEMU_PIDFILE")
    if kill -0 "$pid" 2>/dev/null; then
      log "cleanup: stopping qemu (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  if [ -n "$TIMEOUT_PID" ] && kill -0 "$TIMEOUT_PID" 2>/dev/null; then
    kill -TERM "$TIMEOUT_PID" 2>/dev/null || true
    wait "$TIMEOUT_PID" 2>/dev/null || true
  fi
  if [ -n "$BUILD_PID" ] && kill -0 "$BUILD_PID" 2>/dev/null; then
    log "cleanup: stopping the image build (process group $BUILD_PID)"
    kill -TERM -- "-$BUILD_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$BUILD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$BUILD_PID" 2>/dev/null || true
    wait "$BUILD_PID" 2>/dev/null || true
  fi
  # mmdebstrap unmounts what it mounted; if it was killed hard, do it here (deepest first).
  local dir m
  for dir in "$BUILD_DIR" "$WORK"; do
    [ -n "$dir" ] || continue
    while read -r m; do
      log "cleanup: unmounting $m"
      umount -l "$m" 2>/dev/null || true
    done < <(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
  done
  for dir in "$BUILD_DIR" "$WORK"; do
    if [ -z "$dir" ] || [ ! -d "$dir" ]; then continue; fi
    if awk -v d="$dir/" 'index($2, d) == 1 {found=1} END {exit !found}' /proc/mounts; then
      log "cleanup: mounts remain under $dir; NOT removing it"
      if [ "$rc" = 0 ]; then rc=1; fi
    else
      rm -rf --one-file-system "$dir"
    fi
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ------------------------------------------------------------------------------------------- preflight
step "preflight"
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap in root mode, chroot)"
[ -x "$PY" ] || die "no project venv python at $PY (run through 'make e2e-v2')"
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v mke2fs >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
  step "installing host packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$CACHE"
WORK=$(mktemp -d /tmp/kca-v2guest.XXXXXXXX)
mkdir -p "$WORK/ci/out" "$WORK/src"

# --------------------------------------------------------------------------------- image key and cache
step "image key"
"$PY" "$HERE/host/wheel_pins.py" "$ROOT/pyproject.toml" "${TEST_EXTRAS[@]}" > "$WORK/pins.txt"
python3 "$HERE/host/apt_sources.py" > "$WORK/sources.txt" || die "no Debian entries in the host's apt configuration"
KEY=$(cat "$HERE/host/build-image.sh" "$HERE/host/configure-rootfs.sh" "$HERE/guest/ci-runner" \
          "$HERE/guest/ci-runner.service" "$WORK/pins.txt" "$WORK/sources.txt" | sha256sum | cut -c1-16)
IMAGE=$CACHE/image-$KEY
log "key $KEY ($(wc -l < "$WORK/pins.txt") pinned wheels); cache $CACHE"

exec 9> "$CACHE/.lock"
if ! flock -n 9; then
  log "waiting for another run holding $CACHE/.lock"
  flock 9
fi

if [ "${KCA_V2GUEST_REBUILD:-0}" = 1 ] && [ -d "$IMAGE" ]; then
  log "KCA_V2GUEST_REBUILD=1: dropping the cached image"
  rm -rf "$IMAGE"
fi
if [ -f "$IMAGE/rootfs.img" ] && [ -f "$IMAGE/vmlinuz" ] && [ -f "$IMAGE/initrd.img" ]; then
  log "cache hit: $IMAGE ($(du -sh "$IMAGE" | cut -f1) on disk)"
  CACHE_STATE=warm
else
  CACHE_STATE=cold
  step "wheels for /opt/venv (pip download on the host)"
  mkdir -p "$WORK/wheels"
  # (the machine's pip configuration may name find-links directories that do not exist: not our noise)
  "$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: \
    -d "$WORK/wheels" -r "$WORK/pins.txt" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
  cp "$WORK/pins.txt" "$WORK/wheels/pins.txt"
  log "$(find "$WORK/wheels" -name '*.whl' | wc -l) wheels, $(du -sh "$WORK/wheels" | cut -f1)"

  step "building the guest image (mmdebstrap + configure + mke2fs), log: $CACHE/build.log"
  BUILD_DIR=$CACHE/.build-$KEY-$$
  rm -rf "$BUILD_DIR"; mkdir -p "$BUILD_DIR"
  setsid timeout -k 30 "$BUILD_TIMEOUT" bash "$HERE/host/build-image.sh" \
    "$BUILD_DIR" "$WORK/wheels" "$WORK/sources.txt" > "$CACHE/build.log" 2>&1 < /dev/null 9>&- &
  BUILD_PID=$!
  build_rc=0; wait "$BUILD_PID" || build_rc=$?
  BUILD_PID=""
  grep -E '^\[(build-image|configure-rootfs)' "$CACHE/build.log" || true
  if [ "$build_rc" != 0 ]; then
    tail -n 40 "$CACHE/build.log"
    die "image build failed (rc=$build_rc), full log: $CACHE/build.log"
  fi
  mv "$BUILD_DIR" "$IMAGE"
  BUILD_DIR=""
  # one image is kept: drop those of other keys
  for old in "$CACHE"/image-*; do
    [ "$old" = "$IMAGE" ] || { log "dropping old image $old"; rm -rf "$old"; }
  done
fi

# ---------------------------------------------------------------------------------------- share + boot
step "share: project copy (read-only in the guest) and the guest script"
tar -C "$ROOT" -cf - --exclude=./.venv --exclude=./.git --exclude=__pycache__ --exclude=.mypy_cache \
    --exclude=.ruff_cache --exclude=.pytest_cache --exclude=.hypothesis --exclude=./build . \
  | tar -C "$WORK/src" -xf -
cp "$HERE/guest/run-tests.sh" "$WORK/ci/run.sh"
# The project's wheel, for the test that installs the agent as a bare node does (a venv + the shipped unit:
# test_agent_unit_guest.py); built from a scratch copy so that neither tree gets build/ or egg-info. The
# guest cannot build it: no index, and its setuptools is older than pyproject.toml's build requirement.
mkdir -p "$WORK/ci/wheel" "$WORK/wheel-src"
tar -C "$WORK/src" -cf - . | tar -C "$WORK/wheel-src" -xf -
if ! "$PY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation --no-index \
    -w "$WORK/ci/wheel" "$WORK/wheel-src" > "$WORK/wheel.log" 2>&1 \
  && ! "$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$WORK/ci/wheel" "$WORK/wheel-src" \
    >> "$WORK/wheel.log" 2>&1; then
  grep -v 'is ignored: it is neither a file nor a directory' "$WORK/wheel.log" | tail -n 20
  log "no wheel of the project: the bare-node unit test will fail saying so"
fi
rm -rf "$WORK/wheel-src"
if [ -n "${KCA_V2GUEST_PYTEST_ARGS:-}" ]; then
  # shell-style words (quotes allowed), one argument a line
  python3 -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' "$KCA_V2GUEST_PYTEST_ARGS" \
    > "$WORK/ci/pytest-args"
fi
log "project copy: $(du -sh "$WORK/src" | cut -f1); wheel: $(ls "$WORK/ci/wheel" 2>/dev/null || true)"

step "booting the guest (TCG, ${SMP} vCPU, ${MEM} MiB, timeout ${TIMEOUT} s)"
QEMU_PIDFILE=$WORK/qemu.pid
CONSOLE=$WORK/console.log
BOOT_T=$(date +%s)
timeout -k 15 "$TIMEOUT" qemu-system-x86_64 \
  -machine q35,accel=tcg -cpu max -m "$MEM" -smp "$SMP" \
  -nodefaults -no-user-config -display none -monitor none -serial "file:$CONSOLE" -no-reboot \
  -pidfile "$QEMU_PIDFILE" \
  -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 panic=-1 ci.run=1" \
  -drive "file=$IMAGE/rootfs.img,format=raw,if=virtio,cache=unsafe,snapshot=on" \
  -virtfs "local,path=$WORK/ci,mount_tag=ci,security_model=none,id=ci" \
  -virtfs "local,path=$WORK/src,mount_tag=src,security_model=none,id=src,readonly=on" \
  < /dev/null > "$WORK/qemu.log" 2>&1 9>&- &
TIMEOUT_PID=$!
qemu_rc=0; wait "$TIMEOUT_PID" || qemu_rc=$?
TIMEOUT_PID=""
GUEST_S=$(( $(date +%s) - BOOT_T ))

# --------------------------------------------------------------------------------------------- results
step "results"
OUT=$WORK/ci/out
ARTIFACTS=$CACHE/last-run
rm -rf "$ARTIFACTS"; mkdir -p "$ARTIFACTS"
cp -r "$OUT/." "$ARTIFACTS/" 2>/dev/null || true
cp "$CONSOLE" "$WORK/qemu.log" "$ARTIFACTS/" 2>/dev/null || true

if [ -f "$OUT/run.log" ]; then
  echo "----------------------------------------------------------------- guest output"
  cat "$OUT/run.log"
  echo "------------------------------------------------------------------------------"
fi
boot_up=$(sed -n 's/^runner_start_uptime=//p' "$OUT/boot.txt" 2>/dev/null || true)
if [ -s "$OUT/rc" ]; then
  rc=$(cat "$OUT/rc")
else
  if [ "$qemu_rc" = 124 ]; then why="qemu timed out after $TIMEOUT s"; else why="qemu exited with $qemu_rc"; fi
  log "the guest never reported ($why); last console lines:"
  tail -n 40 "$CONSOLE" 2>/dev/null || true
  cat "$WORK/qemu.log" 2>/dev/null || true
  rc=1
fi
report=$(python3 "$HERE/host/junit_summary.py" "$OUT/junit.xml" 2>/dev/null || true)
counts=$(tail -n 1 <<< "$report")
TOTAL_S=$(( $(date +%s) - T0 ))
echo "=============================================================== v2guest summary"
echo "image:        $IMAGE ($CACHE_STATE cache)"
echo "guest boot:   ${boot_up:-?} s to the CI runner (guest uptime); qemu run ${GUEST_S} s"
echo "tests:        ${counts:-no report}"
echo "exit code:    $rc (the guest's pytest exit code; 1 when it never reported)"
echo "wall time:    ${TOTAL_S} s"
echo "logs:         $ARTIFACTS"
head -n -1 <<< "$report" | sed 's/^/              /'
echo "==============================================================================="
[ -n "$counts" ] && echo "v2guest: $counts"
exit "$rc"
