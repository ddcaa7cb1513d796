#!/bin/bash
# Build the v2 guest image into an empty directory: vmlinuz, initrd.img, rootfs.img (sparse raw ext4).
# usage: build-image.sh OUTDIR WHEELDIR SOURCES_FILE [EXTRA_PACKAGES [HOOK]]
#   WHEELDIR holds the wheels and pins.txt for /opt/venv ("-": no /opt/venv); SOURCES_FILE the one-line `deb`
#   entries (tests/v2guest/host/apt_sources.py), the first of which names the suite.
#   EXTRA_PACKAGES: more packages, comma-separated; HOOK: a script run as `HOOK ROOTFS` after
#   configure-rootfs.sh (tests/e2e_k8s/cluster.sh builds its Kubernetes node image this way).
# Needs root (mmdebstrap in root mode, chroot). The rootfs directory is removed once the image is made.
set -euo pipefail
OUT=$1 WHEELS=$2 SOURCES=$3 EXTRA=${4:-} HOOK=${5:-}
HERE=$(cd "$(dirname "$0")" && pwd)
GUEST=$(cd "$HERE/../guest" && pwd)
log() { echo "[build-image $(date +%T)] $*"; }

PACKAGES=systemd,systemd-sysv,dbus,udev,kmod,python3,python3-venv,linux-image-amd64,initramfs-tools,zstd
PACKAGES+=,containerd,runc,busybox-static,iproute2,procps
PACKAGES+=${EXTRA:+,$EXTRA}
SUITE=$(awk 'NR==1 {print $3}' "$SOURCES")
mapfile -t MIRRORS < "$SOURCES"
ROOTFS=$OUT/rootfs
HOOKS=(--customize-hook="\"$HERE/configure-rootfs.sh\" \"\$1\" \"$WHEELS\" \"$GUEST\"")
[ -z "$HOOK" ] || HOOKS+=(--customize-hook="\"$(cd "$(dirname "$HOOK")" && pwd)/$(basename "$HOOK")\" \"\$1\"")

log "mmdebstrap $SUITE (minbase + $PACKAGES)"
# shellcheck disable=SC2016  # $1 is expanded by mmdebstrap's hook shell (the rootfs path)
mmdebstrap --mode=root --variant=minbase --include="$PACKAGES" \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  "${HOOKS[@]}" \
  "$SUITE" "$ROOTFS" "${MIRRORS[@]}"

log "kernel, initrd, ext4 image"
cp "$ROOTFS"/boot/vmlinuz-* "$OUT/vmlinuz"
cp "$ROOTFS"/boot/initrd.img-* "$OUT/initrd.img"
truncate -s 3G "$OUT/rootfs.img"
mke2fs -q -F -t ext4 -L root -d "$ROOTFS" "$OUT/rootfs.img"
{
  echo "built=$(date -u +%FT%TZ)"
  echo "suite=$SUITE"
  echo "kernel=$(basename "$ROOTFS"/boot/vmlinuz-*)"
  echo "rootfs_mb=$(du -sm "$ROOTFS" | cut -f1)"
} > "$OUT/image.txt"
rm -rf "$ROOTFS"
log "done: $(du -sh --apparent-size "$OUT/rootfs.img" | cut -f1) apparent, $(du -sh "$OUT/rootfs.img" | cut -f1) on disk"
