# shellcheck shell=bash
# The guest's network: bridge and tap up and down, and the iptables chains the host's kubelet leaves behind.
# Sourced by tests/e2e_k8s/cluster.sh, whose settings (RK, V, NODE1, ...) it uses.

net_up() {
  net_down
  ip link add "$BR" type bridge
  ip addr add "$BR_IP/$PREFIX" dev "$BR"
  ip link set "$BR" up
  ip tuntap add dev "$TAP" mode tap
  ip link set "$TAP" master "$BR"
  ip link set "$TAP" up
  # processes of this host (tests, the API server) reach the guest's pods; the host forwards nothing itself
  ip route add "$POD_CIDR2" via "$GUEST_IP" dev "$BR"
  log "$BR $BR_IP/$PREFIX, $TAP attached (guest $GUEST_IP, its pods $POD_CIDR2 routed to it)"
}

net_down() {
  ip link show "$TAP" >/dev/null 2>&1 && ip link delete "$TAP"
  ip link show "$BR" >/dev/null 2>&1 && ip link delete "$BR"
  true
}

iptables_down() {  # the chains the host's kubelet made (kube-proxy's own: stop.sh's kube-proxy --cleanup)
  local ipt t c rule
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for t in filter nat mangle raw; do
      "$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-A" && $2 !~ /^KUBE-/ && / -j KUBE-/' | while read -r rule; do
        eval "\"$ipt\" -t $t -D ${rule#-A }"
      done
      for c in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do "$ipt" -t "$t" -F "$c"; done
      for c in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do "$ipt" -t "$t" -X "$c"; done
    done
  done
}
