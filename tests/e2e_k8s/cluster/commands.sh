# shellcheck shell=bash
# The commands: up, down and status (exec is exec.sh). Sourced by tests/e2e_k8s/cluster.sh, whose settings
# (RK, V, NODE1, ...) it uses.

up() {
  local host_ip t_cfg t_ready pid try rc=0
  [ "$(id -u)" = 0 ] || die "needs root"
  step "preflight"
  [ -x "$TOOLS/start.sh" ] || { echo "cluster.sh: no cluster kit at $TOOLS (REALK8S_TOOLS)" >&2; exit 2; }
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    if [ ! -x "$B/$b" ]; then
      echo "cluster.sh: no $B/$b: build the kit first with" >&2
      echo "  bash tests/e2e_k8s/build_kit.sh GIT_DIR_OF_openshift/microshift   (docs/development.md, \"A real cluster\")" >&2
      exit 2
    fi
  done
  pid=$(qemu_pid)
  [ -z "$pid" ] || die "a guest node is running (qemu pid $pid): cluster.sh down first"
  guest_down >/dev/null 2>&1 || true      # what a crashed run left (no guest is alive)
  mkdir -p "$V"
  need_host_packages

  step "guest node image"
  node_image
  step "images (busybox :1 :2, agent)"
  images
  step "network ($BR, $TAP)"
  net_up
  step "guest boot (runs on while the control plane starts)"
  guest_share
  guest_boot
  step "control plane and $NODE1 (start.sh, RK_FRESH=1)"
  RK_FRESH=1 bash "$TOOLS/start.sh" 2>&1 | sed 's/^/  /'
  [ "$(node_ready "$NODE1")" = True ] || die "node $NODE1 not Ready (see $S/logs/kubelet.log)"
  host_ip=$(awk '$1 == "address:" {print $2}' "$S/kubelet.yaml")
  log "API server https://$host_ip:6443 for $NODE2"
  step "$NODE1: images, $LINKS"
  host_node_extras
  step "$NODE2: certificates and config"
  guest_node_config "$host_ip"
  t_cfg=$(now)
  for try in 1 2; do
    rc=0; guest_node_up || rc=$?
    [ "$rc" = 0 ] && break
    if [ "$rc" = 2 ] && [ "$try" = 1 ]; then
      step "$NODE2: reboot (its kernel got stuck)"
      guest_reboot; t_cfg=$(now); continue
    fi
    [ "$rc" = 2 ] || guest_exec journalctl -u kubelet --no-pager -n 40 || true
    die "node $NODE2 did not come up: $V/share/out/setup.log, $V/console.log"
  done
  rc=0
  t_ready=$(now)
  log "$NODE2 Ready $(secs "$T_KUBELET" "$t_ready") s after its kubelet started ($(secs "$t_cfg" "$t_ready") s after its certificates or reboot)"
  if [ "${KCG_AGENT:-1}" = 1 ]; then
    step "agent: kubectl apply -k deploy/overlays/realk8s"
    agent_install
    step "agent: Ready on both nodes"
    if wait_for "${KCG_AGENT_TIMEOUT:-300}" "the agent Ready on both nodes" agents_ready; then
      log "agent Ready on $NODE1 and $NODE2"
    else
      agent_diagnostics
      if guest_stuck; then log "the guest's kernel is stuck: $(grep -m 1 -E "$STUCK_RE" "$V/console.log")"; fi
      rc=3
    fi
  fi
  step ""
  kc get nodes -o wide
  pid=$(qemu_pid)
  log "up in $(secs "$T0" "$(now)") s (guest image $IMAGE_STATE; qemu RSS $(awk '/^VmRSS/ {printf "%d MiB", $2 / 1024}' "/proc/$pid/status"))"
  [ "$rc" = 0 ] || log "the agent is NOT Ready on every node (above); the cluster stays up: cluster.sh down to stop it"
  echo "KUBECONFIG=$KUBECONFIG"
  return "$rc"
}

down() {
  step "guest node $NODE2"
  guest_down
  step "control plane and $NODE1 (stop.sh)"
  if [ -x "$TOOLS/stop.sh" ]; then bash "$TOOLS/stop.sh" | sed 's/^/  /'; else log "no $TOOLS/stop.sh"; fi
  step "network, links, the host kubelet's iptables chains"
  net_down
  alive "$(pid_of "$S/kubelet.pid")" || iptables_down
  rm -rf "$LINKS"
  step ""
  log "down"
}

status() {
  local pid n rss cpu
  echo "control plane and $NODE1 ($S):"
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler containerd-kit kubelet kube-proxy; do
    pid=$(pid_of "$S/$n.pid")
    if alive "$pid"; then echo "  $n: running (pid $pid)"; else echo "  $n: not running"; fi
  done
  pid=$(qemu_pid)
  if [ -n "$pid" ]; then
    rss=$(awk '/^VmRSS/ {printf "%d MiB", $2 / 1024}' "/proc/$pid/status")
    cpu=$(awk -v hz="$(getconf CLK_TCK)" '{printf "%.0f s", ($14 + $15) / hz}' "/proc/$pid/stat")
    echo "$NODE2: qemu pid $pid, RSS $rss, CPU $cpu since boot; console $V/console.log"
    if guest_stuck; then echo "  its kernel is STUCK: $(grep -m 1 -E "$STUCK_RE" "$V/console.log")"; fi
    for n in exec-ready images-ready kubelet-started; do
      [ -f "$V/share/out/$n" ] && echo "  $n at guest uptime $(cat "$V/share/out/$n") s"
    done
  else
    echo "$NODE2: not running"
  fi
  ip -br addr show "$BR" 2>/dev/null | sed 's/^/  /' || true
  if [ -x "$KUBECTL" ] && [ -f "$KUBECONFIG" ] && alive "$(pid_of "$S/kube-apiserver.pid")"; then
    kc get nodes -o wide || true
    kc -n kube-cgroup-agent get pods -o wide 2>/dev/null || true
  fi
}
