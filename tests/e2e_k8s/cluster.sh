#!/usr/bin/env bash
# A real two-node Kubernetes v1.36 cluster on this machine, the agent installed on it as users install it.
#
#   bash tests/e2e_k8s/cluster.sh up        # control plane + node realk8s-node (this host: cgroup v1, cgroupfs)
#                                           # + node realk8s-v2 (qemu guest: cgroup v2, systemd PID 1, TCG)
#                                           # + kubectl apply -k deploy/overlays/realk8s; last line KUBECONFIG=...
#   bash tests/e2e_k8s/cluster.sh status
#   bash tests/e2e_k8s/cluster.sh exec NODE -- CMD [ARG...]   # as root on a node (realk8s-node | realk8s-v2)
#   bash tests/e2e_k8s/cluster.sh down      # everything stopped by PID, links, bridge, tap, state removed
#
# The control plane and the host node are ../shared/tools/realk8s/start.sh (RK_FRESH=1), the binaries those of
# tests/e2e_k8s/build_kit.sh in $RK/bin. The guest is the image of tests/v2guest (built by its scripts with the
# node's packages, cached under $KCA_V2GUEST_CACHE as node-<key>), booted with snapshot=on; per-run files reach
# it over 9p and tests/e2e_k8s/guest/setup.sh starts containerd, kube-proxy and the kubelet there as systemd
# units. Networking: bridge kcg-br0 198.51.100.1/24 + tap kcg-tap0 on the host, guest 198.51.100.2. Details,
# timings and how to debug: tests/e2e_k8s/README.md.
#
# Environment: RK (default /var/cache/realk8s), REALK8S_TOOLS (default ../shared/tools/realk8s),
# KCA_V2GUEST_CACHE (default /var/cache/kube-cgroup-agent/v2guest), KCG_V2NODE_MEM (MiB, 3072),
# KCG_V2NODE_SMP (2), KCG_V2NODE_REBUILD=1 (rebuild the guest image), KCG_AGENT=0 (no agent install),
# KCG_AGENT_TIMEOUT (s, 300), KCG_NODE_TIMEOUT (s, 600), KCG_EXEC_TIMEOUT (s, 300).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export RK=${RK:-/var/cache/realk8s}
TOOLS=${REALK8S_TOOLS:-$(cd "$ROOT/.." && pwd)/shared/tools/realk8s}
S=$RK/state P=$RK/state/pki B=$RK/bin
V=$RK/v2node                       # the guest node's state: PIDs, 9p shares, logs (removed by down)
LAST=$RK/v2node.last               # the last guest's console and setup logs, kept by down
CACHE=${KCA_V2GUEST_CACHE:-/var/cache/kube-cgroup-agent/v2guest}
V2GUEST=$ROOT/tests/v2guest
NODE1=realk8s-node NODE2=realk8s-v2
BR=kcg-br0 TAP=kcg-tap0 BR_IP=198.51.100.1 GUEST_IP=198.51.100.2 PREFIX=24 GUEST_MAC=52:54:00:c6:33:02
POD_CIDR2=10.244.1.0/24
LINKS=/run/kcg-realk8s             # on each node: containerd.sock and kubelet-config.yaml, as the overlay mounts
MEM=${KCG_V2NODE_MEM:-3072} SMP=${KCG_V2NODE_SMP:-2}
NODE_PACKAGES=iptables,containernetworking-plugins,conntrack,ca-certificates,apparmor   # beyond tests/v2guest's own
BUSYBOX=docker.io/library/cri-e2e-busybox
KUBECTL=$B/kubectl
export KUBECONFIG=$RK/kubeconfig

T0=$(date +%s.%N) STEP_T=$T0 STEP=""
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
log() { echo "[cluster $(secs "$T0" "$(now)")s] $*"; }
step() {  # close the previous step with its duration, open the next
  local t; t=$(now)
  [ -z "$STEP" ] || echo "[cluster $(secs "$T0" "$t")s] === $STEP: $(secs "$STEP_T" "$t") s"
  STEP=$1 STEP_T=$t
  [ -z "$STEP" ] || log "--- $STEP"
}
die() { echo "cluster.sh: $*" >&2; exit 1; }
alive() { [ -n "${1:-}" ] && [ -r "/proc/$1/stat" ] && ! awk '{exit !($3=="Z")}' "/proc/$1/stat" 2>/dev/null; }
pid_of() { if [ -s "$1" ]; then cat "$1"; fi; }
qemu_pid() { local p; p=$(pid_of "$V/qemu.pid"); if alive "$p"; then echo "$p"; fi; }
kc() { "$KUBECTL" "$@"; }

# ------------------------------------------------------------------------------------------------ exec
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

# ------------------------------------------------------------------------------------------------ down
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

net_down() {
  ip link show "$TAP" >/dev/null 2>&1 && ip link delete "$TAP"
  ip link show "$BR" >/dev/null 2>&1 && ip link delete "$BR"
  true
}

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

# ------------------------------------------------------------------------------------------------ status
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

# ------------------------------------------------------------------------------------------------ up
need_host_packages() {
  local need=()
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
  command -v mke2fs >/dev/null || need+=(e2fsprogs)
  command -v iptables >/dev/null || need+=(iptables)          # kube-proxy on the host node
  command -v conntrack >/dev/null || need+=(conntrack)
  [ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
  [ -x /bin/busybox ] || need+=(busybox-static)
  command -v containerd >/dev/null || need+=(containerd)
  command -v runc >/dev/null || need+=(runc)
  command -v etcd >/dev/null || need+=(etcd-server)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing host packages: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

node_image() {  # sets IMG: the cached node image, built on a miss (tests/v2guest's scripts + the node's packages)
  local key sources build rc
  mkdir -p "$CACHE"
  sources=$V/sources.txt
  python3 "$V2GUEST/host/apt_sources.py" > "$sources" || die "no Debian entries in the host's apt configuration"
  key=$(cat "$V2GUEST/host/build-image.sh" "$V2GUEST/host/configure-rootfs.sh" "$V2GUEST/guest/ci-runner" \
            "$V2GUEST/guest/ci-runner.service" "$HERE/guest/image-hook.sh" "$HERE/guest/kcg-node.service" \
            <(echo "$NODE_PACKAGES") "$sources" | sha256sum | cut -c1-16)
  IMG=$CACHE/node-$key
  exec 8> "$CACHE/.lock"          # the lock of tests/v2guest/run.sh: one build in the cache at a time
  flock -n 8 || { log "waiting for $CACHE/.lock (make e2e-v2 running?)"; flock 8; }
  if [ "${KCG_V2NODE_REBUILD:-0}" = 1 ]; then rm -rf "$IMG"; fi
  if [ -f "$IMG/rootfs.img" ] && [ -f "$IMG/vmlinuz" ] && [ -f "$IMG/initrd.img" ]; then
    log "node image: cache hit $IMG"
    IMAGE_STATE=cached
  else
    IMAGE_STATE=built
    build=$CACHE/.node-build-$key-$$
    rm -rf "$build"; mkdir -p "$build"
    log "node image: building $IMG (log $CACHE/build-node.log)"
    setsid timeout -k 30 "${KCA_V2GUEST_BUILD_TIMEOUT:-900}" bash "$V2GUEST/host/build-image.sh" \
      "$build" - "$sources" "$NODE_PACKAGES" "$HERE/guest/image-hook.sh" > "$CACHE/build-node.log" 2>&1 < /dev/null 8>&- &
    echo $! > "$V/image-build.pid"
    rc=0; wait "$(cat "$V/image-build.pid")" || rc=$?
    rm -f "$V/image-build.pid"
    grep -E '^\[(build-image|configure-rootfs|image-hook)' "$CACHE/build-node.log" | sed 's/^/  /' || true
    [ "$rc" = 0 ] || { tail -n 30 "$CACHE/build-node.log"; rm -rf "$build"; die "node image build failed (rc $rc)"; }
    mv "$build" "$IMG"
    for old in "$CACHE"/node-*/; do old=${old%/}; [ "$old" = "$IMG" ] || { log "dropping old node image $old"; rm -rf "$old"; }; done
  fi
  flock -u 8; exec 8>&-
}

images() {  # the three images both nodes hold, as OCI archives in $V/ro/images
  local agent=${KCG_IMAGE_TAR:-$ROOT/dist/kube-cgroup-agent-image.tar}
  mkdir -p "$V/ro/images"
  if [ ! -f "$agent" ]; then
    log "no $agent: make image"
    make -C "$ROOT" image | sed 's/^/  /'
  fi
  cp -l "$agent" "$V/ro/images/kube-cgroup-agent.tar" 2>/dev/null || cp "$agent" "$V/ro/images/kube-cgroup-agent.tar"
  python3 "$TOOLS/../cri-e2e/build_image.py" "$V/ro/images/busybox-1.tar" "$BUSYBOX:1" | sed -n 's/^/  /; 1p'
  IMAGE_VARIANT=2 python3 "$TOOLS/../cri-e2e/build_image.py" "$V/ro/images/busybox-2.tar" "$BUSYBOX:2" | sed -n 's/^/  /; 1p'
  AGENT_IMAGE=$(tar -xOf "$agent" index.json | python3 -c 'import json, sys; print(json.load(sys.stdin)["manifests"][0]["annotations"]["io.containerd.image.name"])')
  log "agent image $AGENT_IMAGE ($(du -h "$agent" | cut -f1))"
}

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
    -nodefaults -no-user-config -display none -monitor none -serial "file:$V/console.log" -no-reboot \
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

sign() {  # name subject: a client certificate signed by the cluster's CA, into $V/share/node/pki
  local d=$V/share/node/pki
  openssl req -newkey rsa:2048 -nodes -keyout "$d/$1.key" -out "$d/$1.csr" -subj "$2" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' > "$d/$1.ext"
  openssl x509 -req -in "$d/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -CAserial "$d/ca.srl" \
    -out "$d/$1.crt" -days 3650 -extfile "$d/$1.ext" 2>/dev/null
  rm -f "$d/$1.csr" "$d/$1.ext"
}

guest_node_config() {  # certificates, kubeconfigs, kubelet and kube-proxy config; pki/ready lets setup.sh go on
  local n=$V/share/node host_ip=$1
  sign kubelet "/O=system:nodes/CN=system:node:$NODE2"
  cp "$P/ca.crt" "$P/kube-proxy.crt" "$P/kube-proxy.key" "$n/pki/"
  rm -f "$n/pki/ca.srl"
  for who in kubelet kube-proxy; do
    cat > "$n/$who.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: realk8s, cluster: {server: "https://$host_ip:6443", certificate-authority: /etc/kubernetes/pki/ca.crt}}]
users: [{name: u, user: {client-certificate: /etc/kubernetes/pki/$who.crt, client-key: /etc/kubernetes/pki/$who.key}}]
contexts: [{name: realk8s, context: {cluster: realk8s, user: u}}]
current-context: realk8s
EOF
  done
  # as start.sh's node, but cgroup v2 with the systemd driver: no cgroupRoot (kubepods.slice), failCgroupV1 left
  # at its default; the same QoS-reserved, reserved, enforceNodeAllocatable and feature gates
  cat > "$n/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
failSwapOn: false
address: $GUEST_IP
readOnlyPort: 0
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}}
authorization: {mode: AlwaysAllow}
featureGates: {QOSReserved: true}
qosReserved: {memory: "50%"}
kubeReserved: {cpu: 50m, memory: 256Mi}
systemReserved: {cpu: 50m, memory: 256Mi}
enforceNodeAllocatable: [pods]
evictionHard: {memory.available: 100Mi}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
EOF
  cat > "$n/kube-proxy-config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: /etc/kubernetes/kube-proxy.kubeconfig}
hostnameOverride: $NODE2
mode: iptables
clusterCIDR: 10.244.0.0/16
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
EOF
  date +%s > "$n/pki/ready.tmp" && mv "$n/pki/ready.tmp" "$n/pki/ready"
}

node_ready() {  # Ready condition of a node: True, False, Unknown or empty
  kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true
}

wait_for() {  # seconds what command...: poll until the command succeeds
  local limit=$1 what=$2 t0=$SECONDS; shift 2
  until "$@"; do
    (( SECONDS - t0 < limit )) || { log "gave up waiting for $what after $limit s"; return 1; }
    sleep 1
  done
}

host_node_extras() {  # images and the cluster-specific links on the host node
  local sock=$S/containerd/containerd.sock t
  for t in busybox-2 kube-cgroup-agent; do
    ctr -a "$sock" -n k8s.io images import "$V/ro/images/$t.tar" >/dev/null
  done
  ctr -a "$sock" -n k8s.io images ls -q | sed 's/^/  image on '"$NODE1"': /'
  mkdir -p "$LINKS"
  ln -sfn "$sock" "$LINKS/containerd.sock"
  ln -sfn "$S/kubelet.yaml" "$LINKS/kubelet-config.yaml"
  log "$LINKS on $NODE1: $(for f in "$LINKS"/*; do printf '%s -> %s  ' "${f##*/}" "$(readlink "$f")"; done)"
}

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

guest_node_up() {  # after its certificates: setup, kubelet, node Ready. 0 Ready, 1 failed, 2 kernel stuck
  guest_wait 300 "the guest's setup (images imported)" guest_file images-ready || return $?
  log "guest: exec channel at uptime $(cat "$V/share/out/exec-ready") s, images imported at $(cat "$V/share/out/images-ready") s"
  step "$NODE2: kubelet until the node is Ready"
  guest_wait 60 "the guest's kubelet start" guest_file kubelet-started || return $?
  T_KUBELET=$(now)
  guest_wait "${KCG_NODE_TIMEOUT:-600}" "node $NODE2 Ready" node2_ready || return $?
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

guest_file() {  # marker: true once the guest's setup wrote it; exits when the setup cannot run any more
  [ -f "$V/share/out/$1" ] && return 0
  if grep -qE '(Dependency failed for|Failed to start).*setup.sh from the host' "$V/console.log" 2>/dev/null \
     || [ -z "$(qemu_pid)" ]; then
    grep -E 'FAILED|Dependency failed' "$V/console.log" | tail -n 5 >&2
    die "the guest's setup (kcg-node.service) did not run: $V/console.log"
  fi
  return 1
}
agent_ready_on() {  # node: a Ready agent pod there
  kc -n kube-cgroup-agent get pods -l app.kubernetes.io/name=kube-cgroup-agent \
    --field-selector "spec.nodeName=$1" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -qx True
}
agents_ready() { agent_ready_on "$NODE1" && agent_ready_on "$NODE2"; }

agent_diagnostics() {
  local pod
  kc -n kube-cgroup-agent get pods -o wide || true
  for pod in $(kc -n kube-cgroup-agent get pods -l app.kubernetes.io/name=kube-cgroup-agent -o name 2>/dev/null); do
    echo "----- $pod: events"
    kc -n kube-cgroup-agent get events --field-selector "involvedObject.name=${pod#pod/}" \
      -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message --no-headers 2>/dev/null | tail -n 15 || true
    echo "----- $pod: log (last 20 lines)"
    kc -n kube-cgroup-agent logs "$pod" --tail 20 2>/dev/null || true
    kc -n kube-cgroup-agent logs "$pod" --previous --tail 20 2>/dev/null | sed 's/^/previous: /' || true
  done
}

agent_install() {
  local overlay=$ROOT/deploy/overlays/realk8s
  # the overlay patches two hostPaths by index in deploy/base: check the names still match
  kc kustomize "$overlay" | python3 -c '
import sys, yaml
want = {"cri-socket": ("/run/kcg-realk8s/containerd.sock", "Socket"), "kubelet-config": ("/run/kcg-realk8s/kubelet-config.yaml", "File")}
for doc in yaml.safe_load_all(sys.stdin):
    if doc and doc["kind"] == "DaemonSet":
        got = {v["name"]: (v["hostPath"]["path"], v["hostPath"].get("type")) for v in doc["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
        bad = {k: got.get(k) for k in want if got.get(k) != want[k]}
        sys.exit(f"deploy/overlays/realk8s: volumes {bad} (deploy/base reordered its volumes? fix the patch indexes)" if bad else 0)
sys.exit("deploy/overlays/realk8s renders no DaemonSet")' || die "the realk8s overlay does not render as expected"
  # the VPA project's CRDs first (the tests' VPAs): the agent's VPA component looks for them at start
  kc apply -f "$HERE/vpa-v1-crd.yaml" | sed 's/^/  /'
  kc wait --for condition=established --timeout=60s crd/verticalpodautoscalers.autoscaling.k8s.io >/dev/null
  kc apply -k "$overlay" | sed 's/^/  /'
}

up() {
  local host_ip t_cfg t_ready pid try rc=0
  [ "$(id -u)" = 0 ] || die "needs root"
  step "preflight"
  [ -x "$TOOLS/start.sh" ] || { echo "cluster.sh: no cluster kit at $TOOLS (REALK8S_TOOLS)" >&2; exit 2; }
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    if [ ! -x "$B/$b" ]; then
      echo "cluster.sh: no $B/$b: build the kit first with" >&2
      echo "  bash tests/e2e_k8s/build_kit.sh GIT_DIR_OF_openshift/microshift   (README, \"A real cluster\")" >&2
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

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  exec) shift; node_exec "$@" ;;
  *) echo "usage: cluster.sh up | down | status | exec NODE -- CMD [ARG...]" >&2; exit 2 ;;
esac
