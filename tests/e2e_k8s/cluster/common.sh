# shellcheck shell=bash
# The run's log with each step's duration, the exit on error, processes by PID, kubectl on the cluster and the
# polls every part shares. Sourced by tests/e2e_k8s/cluster.sh, whose settings (RK, V, NODE1, ...) it uses.

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
log() { echo "[cluster $(secs "$T0" "$(now)")s] $*"; }
step() {  # close the previous step with its duration, open the next
  local t; t=$(now)
  [ -z "$STEP" ] || echo "[cluster $(secs "$T0" "$t")s] === $STEP: $(secs "$STEP_T" "$t") s"
  STEP=$1 STEP_T=$t
  [ -z "$STEP" ] || log "--- $STEP"
}
die() { echo "cluster.sh: $*" >&2; exit 1; }
alive() { [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] && ! awk '{exit !($3=="Z")}' "/proc/$1/stat" 2>/dev/null; }
pid_of() { if [ -s "$1" ]; then cat "$1"; fi; }
qemu_pid() { local p; p=$(pid_of "$V/qemu.pid"); if alive "$p"; then echo "$p"; fi; }
kc() { "$KUBECTL" "$@"; }

node_ready() {  # Ready condition of a node: True, False, Unknown or empty
  kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true
}

wait_for() {  # seconds what command...: poll until the command succeeds
  local limit=$1 what=$2 t0=$SECONDS; shift 2
  until "$@"; do
    (( SECONDS - t0 < limit )) || { log "gave up waiting for $what after $limit s"; return 1; }
    sleep 1
  done
}
