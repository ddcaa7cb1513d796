# shellcheck shell=bash
# The qemu guest that is node realk8s-v2: its per-run share, its boot, a reboot when its kernel got stuck, and
# its power-off. Sourced by tests/e2e_k8s/cluster.sh, whose settings (RK, V, NODE1, ...) it uses.

guest_share() {  # the per-run files of the guest, before it boots (certificates come later: pki/ready)
  local n=$V/share/node
  mkdir -p "$n/units" "$n/pki" "$V/share/exec" "$V/share/out" "$V/ro/bin"
  for b in kubelet kube-proxy; do cp -l "$B/$b" "$V/ro/bin/$b" 2>/dev/null || cp "$B/$b" "$V/ro/bin/$b"; done
  install -m 0755 "$HERE/guest/setup.sh" "$HERE/guest/exec-server.sh" "$n/"
  install -m 0644 "$HERE"/guest/units/*.service "$n/units/"
  printf 'NODE_NAME=%s\nNODE_IP=%s\nNODE_PREFIX=%s\nGATEWAY=%s\nHOST_TIME=%s\n' \
    "$NODE2" "$GUEST_IP" "$PREFIX" "$BR_IP" "$(date +%s)" > "$n/node.env"
  cat > "$n/containerd.toml" <<EOF
# containerd of node $NODE2 (tests/e2e_k8s/cluster.sh): runc with the systemd cgroup driver, the CRI plugin,
# the local busybox image as sandbox image (no registry offline), CNI from Debian's containernetworking-plugins;
# AppArmor on, as on a Debian node (containers get containerd's default profile unless a pod says otherwise)
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$BUSYBOX:1"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
EOF
  cat > "$n/10-realk8s.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "realk8s", "plugins": [
  {"type": "bridge", "bridge": "realk8s0", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR2"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}, {"type": "loopback"}]}
EOF
}

guest_boot() {
  local k=$IMG
  : > "$V/console.log"
  rm -f "$V/qemu.pid"
  setsid qemu-system-x86_64 -name "$NODE2" -machine q35,accel=tcg -cpu max -m "$MEM" -smp "$SMP" \
    -nodefaults -no-user-config -display none -monitor none -serial "file:$V/console.log" \
    -pidfile "$V/qemu.pid" \
    -kernel "$k/vmlinuz" -initrd "$k/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 panic=-1 net.ifnames=0 kcg.node=1" \
    -drive "file=$k/rootfs.img,format=raw,if=virtio,cache=unsafe,snapshot=on" \
    -virtfs "local,path=$V/share,mount_tag=ci,security_model=none,id=ci" \
    -virtfs "local,path=$V/ro,mount_tag=src,security_model=none,id=src,readonly=on" \
    -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,mac=$GUEST_MAC" \
    < /dev/null > "$V/qemu.log" 2>&1 &
  local launcher=$!
  for _ in $(seq 1 100); do [ -s "$V/qemu.pid" ] && break; alive "$launcher" || break; sleep 0.1; done
  [ -n "$(qemu_pid)" ] || { cat "$V/qemu.log"; die "qemu did not start"; }
  log "qemu pid $(qemu_pid): TCG, $SMP vCPU, $MEM MiB, snapshot=on; console $V/console.log"
}

guest_reboot() {  # a stuck guest: killed by PID and booted again from the pristine image, same share
  local pid; pid=$(qemu_pid)
  if [ -n "$pid" ]; then
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
  fi
  mv "$V/console.log" "$V/console.stuck.log"
  rm -rf "${V:?}/share/out" "${V:?}/share/exec"; mkdir -p "$V/share/out" "$V/share/exec"
  log "booting the guest again (the stuck boot's console: $V/console.stuck.log)"
  guest_boot
}

# shellcheck disable=SC2034  # t only counts the waits
guest_down() {  # power the guest off through the exec channel, then by PID after a timeout
  local pid t
  pid=$(qemu_pid)
  if [ -n "$pid" ]; then
    log "guest (qemu pid $pid): poweroff through the share"
    # pods first: a sandbox's pause (busybox sleep as PID 1 of its namespace) ignores SIGTERM, and shutdown would
    # wait 90 s for it
    if KCG_EXEC_TIMEOUT=20 guest_exec sh -c 'systemctl stop kubelet; systemctl kill -s KILL kubepods.slice;
        systemctl --no-block poweroff' >/dev/null 2>&1; then
      for t in $(seq 1 600); do alive "$pid" || break; sleep 0.1; done
    fi
    if alive "$pid"; then
      log "guest still up (no exec channel, or 60 s after its poweroff): SIGTERM to qemu $pid"
      kill -TERM "$pid" 2>/dev/null || true
      for t in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && { log "SIGKILL to qemu $pid"; kill -KILL "$pid" 2>/dev/null || true; }
    fi
    log "guest stopped"
  fi
  pid=$(pid_of "$V/image-build.pid")
  if alive "$pid"; then  # an image build of an interrupted up: its whole process group
    log "stopping the image build (process group $pid)"
    kill -TERM -- "-$pid" 2>/dev/null || true; sleep 2; kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  # mounts an interrupted mmdebstrap left behind, deepest first
  awk -v d="$CACHE/.node-build-" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  if [ -d "$V" ]; then
    rm -rf "$LAST"; mkdir -p "$LAST"
    cp "$V"/console*.log "$V"/qemu.log "$LAST/" 2>/dev/null || true
    cp -r "$V/share/out/." "$LAST/" 2>/dev/null || true
    rm -rf --one-file-system "$V"
  fi
  rm -rf "$CACHE"/.node-build-* 2>/dev/null || true
}
