#!/bin/bash
# mmdebstrap --customize-hook: turn the bootstrapped rootfs into a headless CI guest.
# usage: configure-rootfs.sh ROOTFS WHEELDIR GUESTDIR
#   WHEELDIR: wheels + pins.txt for /opt/venv ("-": none); GUESTDIR: tests/v2guest/guest (ci-runner + unit).
# Runs on the host as root; every chroot command gets a clean environment (the host's PIP_* etc. must
# not leak into the guest).
set -euo pipefail
R=$1 WHEELS=$2 GUEST=$3
log() { echo "[configure-rootfs] $*"; }
in_root() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 chroot "$R" "$@"; }

log "base configuration"
echo kca-v2guest > "$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 kca-v2guest\n' > "$R/etc/hosts"
: > "$R/etc/machine-id"                    # systemd makes one at (every, thanks to snapshot=on) first boot
touch "$R/etc/kube-cgroup-agent-v2guest"   # tests/v2guest/conftest.py: "this is the disposable guest"
in_root passwd -d root >/dev/null          # serial-console debugging only (boot without ci.run=1)
mkdir -p "$R/mnt/ci" "$R/mnt/src"
cat > "$R/etc/fstab" <<'F'
/dev/vda  /         ext4  defaults,noatime  0 1
ci        /mnt/ci   9p    trans=virtio,version=9p2000.L,msize=262144,nofail,x-systemd.device-timeout=10s  0 0
src       /mnt/src  9p    trans=virtio,version=9p2000.L,msize=262144,ro,nofail,x-systemd.device-timeout=10s  0 0
F
printf '9p\n9pnet_virtio\n' > "$R/etc/modules-load.d/9p.conf"
mkdir -p "$R/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' > "$R/etc/systemd/journald.conf.d/ci.conf"
# No network device is given to the guest: nothing to configure, nothing to wait for.

log "units: CI runner in, slow or useless units out"
install -m 0755 "$GUEST/ci-runner" "$R/usr/local/sbin/ci-runner"
install -m 0644 "$GUEST/ci-runner.service" "$R/etc/systemd/system/ci-runner.service"
in_root systemctl enable ci-runner.service >/dev/null 2>&1
for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
         e2scrub_reap.service getty@tty1.service systemd-pstore.service systemd-firstboot.service \
         man-db.timer systemd-timesyncd.service; do
  in_root systemctl mask "$u" >/dev/null 2>&1 || true
done
# containerd/runc are in the image for CRI tests, which start containerd themselves: keep boot short.
in_root systemctl disable containerd.service >/dev/null 2>&1 || true
mkdir -p "$R/etc/systemd/system/serial-getty@ttyS0.service.d"
cat > "$R/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf" <<'F'
[Service]
ExecStart=
ExecStart=-/sbin/agetty --autologin root --noclear --keep-baud 115200,38400,9600 %I $TERM
F

log "kernel modules and initramfs (virtio + ext4 only)"
M=$(echo "$R"/lib/modules/*)
rm -rf "$M"/kernel/drivers/{gpu,media,net/wireless,net/ethernet,infiniband,staging,sound,bluetooth,iio,isdn} \
       "$M"/kernel/drivers/{input/touchscreen,hid,usb,mmc,nfc,scsi/qla2xxx,scsi/lpfc,scsi/mpt3sas,scsi/be2iscsi} \
       "$M"/kernel/drivers/{thunderbolt,mtd,w1,leds,platform/x86} "$M"/kernel/sound \
       "$M"/kernel/net/{wireless,mac80211,bluetooth} \
       "$M"/kernel/drivers/{ata,watchdog,i2c,mfd,input/misc,net/wan,net/can,video,firewire,pcmcia} \
       "$M"/kernel/arch/x86/kvm  # udev would load these for q35's AHCI/ICH9/SVM under TCG: seconds of boot
in_root depmod -a "$(basename "$M")"
printf 'MODULES=list\nCOMPRESS=zstd\n' > "$R/etc/initramfs-tools/conf.d/ci.conf"
# 9pnet_virtio too: loaded by systemd-modules-load it raced the fstab mounts ("9pnet_virtio: no channels
# available for device src": the second share was not probed yet and its mount failed for good)
printf 'virtio_pci\nvirtio_blk\next4\n9pnet_virtio\n9p\n' >> "$R/etc/initramfs-tools/modules"
in_root update-initramfs -u -k all >/dev/null 2>&1

if [ "$WHEELS" != - ]; then
  log "pre-built /opt/venv from host wheels (a venv made under TCG costs ~55 s)"
  mkdir -p "$R/tmp/wheels"
  cp "$WHEELS"/*.whl "$WHEELS/pins.txt" "$R/tmp/wheels/"
  in_root python3 -m venv /opt/venv
  in_root /opt/venv/bin/pip install -q --no-index --no-cache-dir --find-links /tmp/wheels -r /tmp/wheels/pins.txt
  cp "$WHEELS/pins.txt" "$R/opt/venv/pins.txt"
  rm -rf "$R/tmp/wheels"
fi

log "trim"
rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/* "$R"/usr/share/doc/* "$R"/usr/share/man/*
