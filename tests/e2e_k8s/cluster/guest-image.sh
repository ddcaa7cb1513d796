# shellcheck shell=bash
# The guest node's disk image: tests/v2guest's image with the node's packages, cached by the hash of what
# builds it, built on a miss. Sourced by tests/e2e_k8s/cluster.sh, whose settings (RK, V, NODE1, ...) it uses.

# shellcheck disable=SC2034  # IMAGE_STATE is read by up (commands.sh)
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
