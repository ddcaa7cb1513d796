#!/usr/bin/env bash
# A real two-node Kubernetes v1.36 cluster on this machine, the agent installed on it as users install it.
#
#   bash tests/e2e_k8s/cluster.sh up        # control plane + node realk8s-node (this host: cgroup v1, cgroupfs)
#                                           # + node realk8s-v2 (qemu guest: cgroup v2, systemd PID 1, TCG)
#                                           # + kubectl apply -k deploy/overlays/realk8s; last line KUBECONFIG=...
#   bash tests/e2e_k8s/cluster.sh status
#   bash tests/e2e_k8s/cluster.sh exec NODE -- CMD [ARG...]   # as root on a node (realk8s-node | realk8s-v2)
#   bash tests/e2e_k8s/cluster.sh down      # everything stopped by PID, links, bridge, tap, state removed
#   bash tests/e2e_k8s/cluster.sh restart NODE kubelet|containerd   # faults: stopped by PID, started again
#   bash tests/e2e_k8s/cluster.sh apiserver stop|start
#   bash tests/e2e_k8s/cluster.sh reboot realk8s-v2                  # the guest reboots in its qemu
#   bash tests/e2e_k8s/cluster.sh load-image ARCHIVE                 # an image archive onto both nodes
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
# shellcheck source-path=SCRIPTDIR
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

# the parts, one job each; they define functions only (and guest-wait.sh the constant STUCK_RE)
# shellcheck source=cluster/common.sh
source "$HERE/cluster/common.sh"
# shellcheck source=cluster/exec.sh
source "$HERE/cluster/exec.sh"
# shellcheck source=cluster/network.sh
source "$HERE/cluster/network.sh"
# shellcheck source=cluster/host.sh
source "$HERE/cluster/host.sh"
# shellcheck source=cluster/guest-image.sh
source "$HERE/cluster/guest-image.sh"
# shellcheck source=cluster/guest.sh
source "$HERE/cluster/guest.sh"
# shellcheck source=cluster/guest-config.sh
source "$HERE/cluster/guest-config.sh"
# shellcheck source=cluster/guest-wait.sh
source "$HERE/cluster/guest-wait.sh"
# shellcheck source=cluster/agent.sh
source "$HERE/cluster/agent.sh"
# shellcheck source=cluster/faults.sh
source "$HERE/cluster/faults.sh"
# shellcheck source=cluster/commands.sh
source "$HERE/cluster/commands.sh"

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  exec) shift; node_exec "$@" ;;
  restart) shift; restart_component "$@" ;;
  apiserver) shift; apiserver "$@" ;;
  load-image) load_image "${2:-}" ;;
  reboot) [ "${2:-}" = "$NODE2" ] || die "reboot: only $NODE2 (the guest) reboots"; reboot_guest ;;
  *) echo "usage: cluster.sh up | down | status | exec NODE -- CMD [ARG...] | restart NODE kubelet|containerd" \
          "| apiserver stop|start | reboot $NODE2 | load-image ARCHIVE" >&2; exit 2 ;;
esac
