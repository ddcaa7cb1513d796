# shellcheck shell=bash
# This host's part: the packages `up` needs, the images both nodes import (built here), and what node
# realk8s-node needs beyond start.sh. Sourced by tests/e2e_k8s/cluster.sh, whose settings (RK, V, NODE1, ...)
# it uses.

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

load_image() {  # archive: an OCI image archive imported on both nodes (a second build of the agent, for an upgrade)
  local tar=${1:-} name
  [ -f "$tar" ] || die "load-image: no archive '$tar'"
  name=$(basename "$tar")
  ctr -a "$S/containerd/containerd.sock" -n k8s.io images import "$tar" | sed "s/^/  $NODE1: /"
  cp "$tar" "$V/ro/images/$name.tmp" && mv "$V/ro/images/$name.tmp" "$V/ro/images/$name"  # a reboot imports it again
  guest_exec ctr -n k8s.io images import "/mnt/src/images/$name" | sed "s/^/  $NODE2: /"
}
