# shellcheck shell=bash
# Waiting for the guest node to come up: its setup's markers, its kubelet, node Ready; and telling a stuck
# guest kernel from a slow one. Sourced by tests/e2e_k8s/cluster.sh, whose settings (RK, V, NODE1, ...) it
# uses.

# the guest's kernel lost a CPU for good (seen once in 7 boots: both vCPUs looping in nf_conntrack_in under
# TCG right after kube-proxy started; the node never came back)
STUCK_RE='soft lockup|rcu_preempt self-detected stall|rcu: INFO: rcu_preempt detected stalls'
guest_stuck() { grep -qE "$STUCK_RE" "$V/console.log" 2>/dev/null; }

guest_wait() {  # seconds what command...: poll; 0 done, 1 timed out, 2 the guest's kernel is stuck
  local limit=$1 what=$2 t0=$SECONDS; shift 2
  until "$@"; do
    if guest_stuck; then
      log "the guest's kernel is stuck: $(grep -m 1 -E "$STUCK_RE" "$V/console.log")"; return 2
    fi
    (( SECONDS - t0 < limit )) || { log "gave up waiting for $what after $limit s"; return 1; }
    sleep 1
  done
}

node2_ready() { [ "$(node_ready "$NODE2")" = True ]; }

# shellcheck disable=SC2034  # T_KUBELET is read by up (commands.sh)
guest_node_up() {  # after its certificates: setup, kubelet, node Ready. 0 Ready, 1 failed, 2 kernel stuck
  guest_wait "${KCG_GUEST_SETUP_TIMEOUT:-300}" "the guest's setup (images imported)" guest_file images-ready || return $?
  log "guest: exec channel at uptime $(cat "$V/share/out/exec-ready") s, images imported at $(cat "$V/share/out/images-ready") s"
  step "$NODE2: kubelet until the node is Ready"
  guest_wait 60 "the guest's kubelet start" guest_file kubelet-started || return $?
  T_KUBELET=$(now)
  guest_wait "${KCG_NODE_TIMEOUT:-600}" "node $NODE2 Ready" node2_ready || return $?
}

guest_file() {  # marker: true once the guest's setup wrote it; exits when the setup cannot run any more
  [ -f "$V/share/out/$1" ] && return 0
  if grep -qE '(Dependency failed for|Failed to start).*setup.sh from the host' "$V/console.log" 2>/dev/null \
     || [ -z "$(qemu_pid)" ]; then
    grep -E 'FAILED|Dependency failed' "$V/console.log" | tail -n 5 >&2
    die "the guest's setup (kcg-node.service) did not run: $V/console.log"
  fi
  return 1
}
