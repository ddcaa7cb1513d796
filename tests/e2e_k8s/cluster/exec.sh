# shellcheck shell=bash
# `cluster.sh exec NODE -- CMD`: on the host node directly, in the guest through the 9p exec channel that
# tests/e2e_k8s/guest/exec-server.sh serves. Sourced by tests/e2e_k8s/cluster.sh, whose settings (RK, V,
# NODE1, ...) it uses.

guest_exec() {  # run argv in the guest as root through the 9p exec channel (tests/e2e_k8s/guest/exec-server.sh)
  local d=$V/share/exec id rc limit=${KCG_EXEC_TIMEOUT:-300} t0 qemu
  qemu=$(qemu_pid)
  [ -n "$qemu" ] || { echo "cluster.sh exec: no guest running" >&2; return 125; }
  [ -f "$V/share/out/exec-ready" ] || { echo "cluster.sh exec: the guest's exec channel is not up yet" >&2; return 125; }
  id=$(date +%s%N).$$.$RANDOM
  printf '%s\0' "$@" > "$d/$id.tmp" && mv "$d/$id.tmp" "$d/$id.req"
  t0=$SECONDS
  until [ -f "$d/$id.rc" ]; do
    if (( SECONDS - t0 >= limit )) || [ "$(qemu_pid)" != "$qemu" ]; then
      rm -f "$d/$id.req"
      echo "cluster.sh exec: no answer from the guest within ${limit} s" >&2; return 124
    fi
    sleep 0.05
  done
  cat "$d/$id.out"; cat "$d/$id.err" >&2
  rc=$(cat "$d/$id.rc"); rm -f "$d/$id".*
  return "$rc"
}

node_exec() {
  local node=${1:-}; shift || true
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || die "usage: cluster.sh exec $NODE1|$NODE2 -- CMD [ARG...]"
  case $node in
    "$NODE1") exec "$@" ;;                      # the host node is this machine
    "$NODE2") guest_exec "$@" ;;
    *) die "unknown node '$node' ($NODE1 or $NODE2)" ;;
  esac
}
