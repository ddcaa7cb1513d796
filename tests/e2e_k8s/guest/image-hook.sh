#!/bin/bash
# mmdebstrap --customize-hook for the Kubernetes node image of tests/e2e_k8s/cluster.sh, run on the host after
# tests/v2guest/host/configure-rootfs.sh (same guest: Debian, systemd PID 1, cgroup v2 only).
# usage: image-hook.sh ROOTFS
# Bakes in one unit, kcg-node.service, which runs the per-run /mnt/ci/node/setup.sh from the host's share when
# the kernel command line has kcg.node=1. Everything else (units, configs, certificates, binaries, images) comes
# through the share on each boot, so editing it never rebuilds the image.
set -euo pipefail
R=$1
HERE=$(cd "$(dirname "$0")" && pwd)
in_root() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 chroot "$R" "$@"; }
echo "[image-hook] Kubernetes node: kcg-node.service, hostname realk8s-v2"
echo realk8s-v2 > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 realk8s-v2\n' > "$R/etc/hosts"
rm -f "$R/etc/kube-cgroup-agent-v2guest"   # not the disposable pytest guest of make e2e-v2
install -m 0644 "$HERE/kcg-node.service" "$R/etc/systemd/system/kcg-node.service"
in_root systemctl enable kcg-node.service >/dev/null 2>&1
# pods resolve names through the node's resolv.conf: nothing to resolve offline, but the file must exist
[ -s "$R/etc/resolv.conf" ] || echo 'nameserver 127.0.0.1' > "$R/etc/resolv.conf"
