# shellcheck shell=bash
# Cluster faults the tests inject (tests/e2e_k8s/test_cluster_faults.py): a node's kubelet or containerd
# restarted, the API server stopped and started again, the guest node rebooted. Every process is stopped by
# the PID its starter recorded and started again with the command line and environment it had. Sourced by
# tests/e2e_k8s/cluster.sh, whose settings (RK, V, NODE1, ...) it uses.

stop_pid() {  # pid what: SIGTERM, SIGKILL after 30 s, until it is gone
  local pid=$1 t
  kill -TERM "$pid" 2>/dev/null || return 0
  for t in $(seq 1 300); do alive "$pid" || return 0; sleep 0.1; done
  log "$2 (pid $pid) still alive 30 s after SIGTERM: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for t in $(seq 1 50); do alive "$pid" || return 0; sleep 0.1; done
  die "$2 (pid $pid) did not exit"
}

save_process() {  # pid file-prefix: its command line and environment, NUL-separated, to start it again
  cp "/proc/$1/cmdline" "$2.cmdline"
  cp "/proc/$1/environ" "$2.environ"
  readlink "/proc/$1/cwd" > "$2.cwd"
}

start_saved() {  # file-prefix log pidfile...: the saved process again, appending to its log
  local prefix=$1 logfile=$2 pid f; shift 2
  local -a cmd envs
  mapfile -d '' cmd < "$prefix.cmdline"
  mapfile -d '' envs < "$prefix.environ"
  (cd "$(cat "$prefix.cwd")" && exec env -i "${envs[@]}" "${cmd[@]}" </dev/null >>"$logfile" 2>&1) &
  pid=$!
  for f in "$@"; do echo "$pid" > "$f"; done
  log "started again: ${cmd[0]##*/} (pid $pid)"
}

host_restart() {  # kubelet | containerd on this host's node
  local name=$1 pidfile logfile pid; local -a pidfiles
  case $name in
    kubelet) pidfile=$S/kubelet.pid logfile=$S/logs/kubelet.log pidfiles=("$S/kubelet.pid") ;;
    containerd) pidfile=$S/containerd/containerd.pid logfile=$S/containerd/logs/containerd.log
                pidfiles=("$S/containerd/containerd.pid" "$S/containerd-kit.pid") ;;
    *) die "restart: kubelet or containerd, not '$name'" ;;
  esac
  pid=$(pid_of "$pidfile")
  alive "$pid" || die "$name on $NODE1 is not running"
  save_process "$pid" "$S/$name"
  stop_pid "$pid" "$name"
  start_saved "$S/$name" "$logfile" "${pidfiles[@]}"
}

restart_component() {  # node kubelet|containerd
  case $1 in
    "$NODE1") host_restart "$2" ;;
    "$NODE2") guest_exec systemctl restart "$2" ;;
    *) die "unknown node '$1' ($NODE1 or $NODE2)" ;;
  esac
}

apiserver() {  # stop | start
  local pid
  case ${1:-} in
    stop)
      pid=$(pid_of "$S/kube-apiserver.pid")
      alive "$pid" || die "kube-apiserver is not running"
      save_process "$pid" "$S/kube-apiserver"
      stop_pid "$pid" kube-apiserver
      log "kube-apiserver stopped" ;;
    start)
      [ -f "$S/kube-apiserver.cmdline" ] || die "apiserver start: no saved command line (apiserver stop first)"
      pid=$(pid_of "$S/kube-apiserver.pid")
      ! alive "$pid" || die "kube-apiserver is running (pid $pid)"
      start_saved "$S/kube-apiserver" "$S/logs/kube-apiserver.log" "$S/kube-apiserver.pid"
      wait_for 120 "kube-apiserver ready" kc get --raw /readyz >/dev/null 2>&1 ;;
    *) die "usage: cluster.sh apiserver stop|start" ;;
  esac
}

reboot_guest() {  # the guest reboots in the same qemu (its disk, a snapshot of this qemu's life, is kept)
  local qemu t0
  qemu=$(qemu_pid)
  [ -n "$qemu" ] || die "no guest running"
  t0=$(now)
  KCG_EXEC_TIMEOUT=20 guest_exec systemctl --no-block reboot || true
  rm -f "$V/share/out/exec-ready" "$V/share/out/images-ready" "$V/share/out/kubelet-started"  # the new boot's marks
  guest_wait 300 "the guest's exec channel after the reboot" guest_file exec-ready || die "the guest did not come back"
  [ "$(qemu_pid)" = "$qemu" ] || die "qemu exited instead of rebooting"
  guest_wait 300 "the guest's kubelet after the reboot" guest_file kubelet-started || die "no kubelet after the reboot"
  log "guest rebooted: kubelet started $(secs "$t0" "$(now)") s after the reboot"
}
