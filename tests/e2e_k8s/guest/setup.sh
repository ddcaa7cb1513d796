#!/bin/bash
# Per-run node setup inside the guest, run as root by kcg-node.service (baked into the node image) from the
# host's 9p share. /mnt/ci/node: this script, node.env, units and configs (written by cluster.sh);
# /mnt/ci/node/pki appears once the control plane's CA exists; /mnt/src (read-only): bin/ (kubelet,
# kube-proxy) and images/*.tar. Progress: /mnt/ci/out/setup.log and marker files in /mnt/ci/out.
set -euo pipefail
N=/mnt/ci/node OUT=/mnt/ci/out RO=/mnt/src
mkdir -p "$OUT"
exec >> "$OUT/setup.log" 2>&1
up() { cut -d' ' -f1 /proc/uptime; }
log() { echo "[setup $(up)s] $*"; }
mark() { up > "$OUT/$1.tmp" && mv "$OUT/$1.tmp" "$OUT/$1"; }
# shellcheck source=/dev/null
. "$N/node.env"   # NODE_NAME NODE_IP NODE_PREFIX GATEWAY HOST_TIME
log "boot: $(uname -r), $(systemctl --version | head -n 1), cgroup fs $(stat -fc %T /sys/fs/cgroup)"
log "clock: guest $(date +%s) host at share write $HOST_TIME"

log "network: $NODE_IP/$NODE_PREFIX on eth0, default via $GATEWAY"
echo "$NODE_NAME" > /proc/sys/kernel/hostname
# The unit waits for the file systems, not for the network device: after a reboot under TCG the virtio NIC
# can still be probing when this runs (seen once: "Cannot find device eth0" 0.2 s into the setup).
for _ in $(seq 1200); do [ -e /sys/class/net/eth0 ] && break; sleep 0.1; done
[ -e /sys/class/net/eth0 ] || { log "no eth0 after 120 s (devices: $(echo /sys/class/net/*))"; exit 1; }
ip link set lo up
ip link set eth0 up
ip addr replace "$NODE_IP/$NODE_PREFIX" dev eth0
ip route replace default via "$GATEWAY"
modprobe br_netfilter
modprobe overlay
sysctl -q -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1

log "files: binaries, containerd and CNI config, units"
install -m 0755 "$RO/bin/kubelet" "$RO/bin/kube-proxy" /usr/local/bin/
install -m 0755 "$N/exec-server.sh" /usr/local/sbin/kcg-exec-server
mkdir -p /etc/containerd /etc/cni/net.d /var/lib/kubelet /var/lib/kube-proxy /etc/kubernetes/pki
install -m 0644 "$N/containerd.toml" /etc/containerd/config.toml
install -m 0644 "$N/10-realk8s.conflist" /etc/cni/net.d/10-realk8s.conflist
install -m 0644 "$N"/units/*.service /etc/systemd/system/
# the cluster-specific paths the realk8s overlay mounts (deploy/overlays/realk8s), to this node's real files
mkdir -p /run/kcg-realk8s
ln -sfn /run/containerd/containerd.sock /run/kcg-realk8s/containerd.sock
ln -sfn /var/lib/kubelet/config.yaml /run/kcg-realk8s/kubelet-config.yaml
systemctl daemon-reload
systemctl start kcg-exec.service        # the host's `cluster.sh exec realk8s-v2 -- ...` works from here on
mark exec-ready

log "containerd (SystemdCgroup = true)"
systemctl start containerd.service
for _ in $(seq 1 100); do ctr version >/dev/null 2>&1 && break; sleep 0.2; done
log "containerd $(ctr version 2>/dev/null | awk '/Version:/ {print $2}' | tail -n 1) up"
for tar in "$RO"/images/*.tar; do
  t0=$(up)
  ctr -n k8s.io images import "$tar" > /dev/null
  log "imported $(basename "$tar") ($(awk -v a="$t0" -v b="$(up)" 'BEGIN {printf "%.1f", b - a}') s)"
done
ctr -n k8s.io images ls -q | sed 's/^/  image: /'
mark images-ready

log "waiting for the control plane's certificates ($N/pki/ready)"
until [ -f "$N/pki/ready" ]; do sleep 0.5; done
install -m 0644 "$N"/pki/*.crt /etc/kubernetes/pki/
install -m 0600 "$N"/pki/*.key /etc/kubernetes/pki/
install -m 0600 "$N/kubelet.kubeconfig" "$N/kube-proxy.kubeconfig" /etc/kubernetes/
install -m 0644 "$N/node.env" /etc/kubernetes/kubelet.env
install -m 0644 "$N/kubelet-config.yaml" /var/lib/kubelet/config.yaml
install -m 0644 "$N/kube-proxy-config.yaml" /var/lib/kube-proxy/config.yaml
log "clock after certificates: guest $(date +%s), certificates from $(stat -c %Y "$N/pki/ready")"
systemctl start --no-block kubelet.service kube-proxy.service
mark kubelet-started
log "kubelet and kube-proxy started"
