#!/bin/bash
# make image: the agent's container image as an OCI archive, built here without a registry or a container
# daemon (root; Debian 12). Same recipe as the Containerfile beside the repository root, once for each
# architecture of $KCG_IMAGE_ARCHES (default "amd64 arm64"), into one multi-platform image (an OCI index):
#   layer 1: a minimal Debian 12 root of that architecture (debootstrap --variant=minbase + python3),
#            pruned of apt, docs, locales and everything else a runtime image does not need; cached in
#            $KCG_IMAGE_CACHE keyed by the architecture, its package list and this script's pruning rules;
#   layer 2: the project's wheel and its pinned dependencies (deploy/image/requirements.lock; that
#            architecture's wheels) in /opt/kube-cgroup-agent, no compilers, no pip, and the bytecode of
#            all of it and of the stdlib, compiled by that root's own python3.
# A foreign architecture (arm64 on an amd64 machine) runs under Debian's qemu-user-static through
# binfmt_misc: debootstrap's second stage, the bytecode compiler and the check that the image starts.
# Output: $OUT (default dist/kube-cgroup-agent-image.tar), image name $KCG_IMAGE_TAG (default
# kube-cgroup-agent:<version>; the name is also a label, so two names make two images, as two releases would).
# Reproducible: every timestamp is the commit's time (SOURCE_DATE_EPOCH); two builds of one commit on one
# machine give the same digest (the base roots and the dependencies are cached; a new debootstrap on another
# day may fetch newer Debian packages, which changes layer 1 — see docs/image.md).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$REPO/dist/kube-cgroup-agent-image.tar}
CACHE=${KCG_IMAGE_CACHE:-/var/cache/kcg-image}
PY=${PYTHON:-$REPO/.venv/bin/python}
ARCHES=${KCG_IMAGE_ARCHES:-amd64 arm64}
PYVER=3.11
PACKAGES="python3-minimal,libpython$PYVER-stdlib,ca-certificates"
[ "$(id -u)" = 0 ] || { echo "make image needs root (debootstrap)" >&2; exit 2; }
cd "$REPO"
VERSION=$(PYTHONPATH="$REPO" "$PY" -c 'import agent;print(agent.__version__)')
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH=$EPOCH
HOST_ARCH=$(dpkg --print-architecture)
T0=$(date +%s)
step() { echo "[image $(( $(date +%s) - T0 ))s] $*"; }
need() {  # COMMAND APT-GET-INSTALL-ARGS...: the package when the command is missing
  command -v "$1" >/dev/null && return 0; shift
  apt-get update -q >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}
machine() {  # Debian's architecture name -> the kernel's (qemu's, the wheels')
  case $1 in amd64) echo x86_64 ;; arm64) echo aarch64 ;; *) echo "make image: no recipe for architecture '$1' (amd64, arm64)" >&2; exit 2 ;; esac
}
for arch in $ARCHES; do machine "$arch" >/dev/null; done

# one build of the cache at a time (two clones building at once would share $BASE.tmp)
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
WORK=$(mktemp -d /tmp/kcg-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# A foreign architecture's binaries (chroot's included) run under Debian's qemu-user-static: its binfmt_misc
# entry registered from the package's own binfmt.d file, as systemd-binfmt would at boot (this machine may
# have no systemd). Its F flag makes the kernel open the interpreter once, at registration, so it also runs
# inside a chroot that has no qemu of its own.
emulate() {
  local m conf entry
  m=$(machine "$1"); conf=/usr/lib/binfmt.d/qemu-$m.conf; entry=/proc/sys/fs/binfmt_misc/qemu-$m
  [ "$1" != "$HOST_ARCH" ] || return 0
  # (its Recommends, systemd or binfmt-support, would register it at boot: this does it now)
  [ -f "$conf" ] || need "qemu-$m-static" --no-install-recommends qemu-user-static
  mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  [ -e "$entry" ] || grep '^:' "$conf" >/proc/sys/fs/binfmt_misc/register
  if ! grep -qx enabled "$entry" || ! grep -q '^flags:.*F' "$entry"; then
    echo "make image: $entry is not enabled with the F (fix-binary) flag: $1 binaries cannot run in a chroot" >&2
    exit 1
  fi
}

# ---- layer 1: the base root of each architecture, cached ----
# keyed by the architecture, the package list and layer 1's own lines (an edit below layer 1 does not
# rebuild a root)
base_root() {  # ARCH: sets BASE
  local arch=$1 key mirror R
  key=$( { printf '%s\n' "$arch" "$PACKAGES"; sed -n '/^# ---- layer 1/,/^# ---- layer 2/p' "$0"; } | sha256sum | cut -c1-16)
  BASE="$CACHE/base-$arch-$key"
  [ ! -f "$BASE/.complete" ] || return 0
  need debootstrap debootstrap
  # the mirror this machine's apt uses (never a name written here)
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list)
  step "debootstrap $arch (minbase + $PACKAGES)$([ "$arch" = "$HOST_ARCH" ] || echo ', its second stage under qemu-user')"
  rm -rf "$BASE" "$BASE.tmp"
  debootstrap --arch="$arch" --variant=minbase --include="$PACKAGES" bookworm "$BASE.tmp" "$mirror" \
    >"$CACHE/debootstrap-$arch.log" 2>&1 || { tail -20 "$CACHE/debootstrap-$arch.log"; exit 1; }
  R="$BASE.tmp"
  step "prune"
  # a runtime image: no package manager state, docs, locales, logs, caches, or tools only a shell user needs
  # (ldconfig's aux-cache records inode numbers and times: the one file that made two debootstraps differ)
  rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/* "$R"/var/cache/debconf/*-old "$R"/var/lib/dpkg/*-old \
         "$R"/var/log/* "$R"/usr/share/doc/* "$R"/usr/share/man/* "$R"/usr/share/info/* "$R"/usr/share/locale/* \
         "$R"/usr/share/i18n "$R"/usr/share/lintian "$R"/usr/share/common-licenses "$R"/usr/share/zoneinfo \
         "$R"/usr/lib/python$PYVER/{test,idlelib,tkinter,turtledemo,ensurepip,lib2to3,pydoc_data,unittest/test} \
         "$R"/usr/share/perl "$R"/usr/lib/*-linux-gnu/perl* "$R"/usr/bin/perl* \
         "$R"/var/lib/dpkg/info/*.md5sums "$R"/etc/machine-id "$R"/etc/.pwd.lock "$R"/run/* "$R"/tmp/* \
         "$R"/usr/share/bash-completion "$R"/usr/share/bug "$R"/var/cache/ldconfig/aux-cache
  find "$R" -name __pycache__ -type d -prune -exec rm -rf {} +
  # /etc/shadow's "last change" field is the day debootstrap ran: fix it so the root does not vary by day
  sed -i -E 's/^([^:]*:[^:]*:)[0-9]+:/\10:/' "$R/etc/shadow" "$R/etc/shadow-" 2>/dev/null || true
  # non-root capable: a `nonroot` user (65532, the distroless convention) for a securityContext that asks
  # for it; the state directory is root's and that group's (0775), so either uid can write it
  echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin' >>"$R/etc/passwd"
  echo 'nonroot:x:65532:' >>"$R/etc/group"
  echo 'nonroot:!:0::::::' >>"$R/etc/shadow"
  install -d -m 0755 "$R/etc/kube-cgroup-agent" "$R/host"
  install -d -m 0775 -o 0 -g 65532 "$R/var/lib/kube-cgroup-agent"
  install -d -m 1777 "$R/tmp"
  mv "$R" "$BASE"; touch "$BASE/.complete"
}

# ---- layer 2: the dependencies and the stdlib's bytecode of each architecture, cached ----
# keyed by the base root, requirements.lock and these lines: a new commit of the project only compiles its
# own modules (under qemu-user, the stdlib and the kubernetes client would take minutes)

# Bytecode compiled in ROOT by ROOT's own python3: `unchecked-hash` .pyc files hold the source's hash instead
# of its mtime (reproducible) and Python imports them without reading the source; -j1 and a fixed hash seed:
# one process, the same marshalled output each build. Without bytecode every exec'd command compiles what
# it imports (the kubernetes client: about a second) and the root filesystem is read-only, so nothing would
# ever keep it.
compile() {  # ROOT ARGS...
  local root=$1; shift
  chroot "$root" env PYTHONHASHSEED=0 SOURCE_DATE_EPOCH="$EPOCH" /usr/bin/python3 -m compileall -q -j1 \
    --invalidation-mode unchecked-hash "$@"
}
pycache() {  # FROM TO DIR...: every .pyc below DIR of FROM, to the same place below TO
  local from=$1 to=$2 tree; shift 2
  for tree in "$@"; do
    mkdir -p "$to$tree"
    (cd "$from$tree" && find . -path '*/__pycache__/*.pyc' -print0 | sort -z | tar --null -T - -cf -) | tar -xf - -C "$to$tree"
  done
}
deps_tree() {  # ARCH: sets DEPS (a root of only what layer 2 adds: /opt/kube-cgroup-agent and .pyc files)
  local arch=$1 key m glibc D SITE minor pylib platforms=()
  key=$( { printf '%s\n' "$arch" "${BASE##*/}"; cat deploy/image/requirements.lock
           sed -n '/^# ---- layer 2: the dependencies/,/^# ---- layer 2: the application/p' "$0"; } | sha256sum | cut -c1-16)
  DEPS="$CACHE/deps-$arch-$key"
  [ ! -f "$DEPS/.complete" ] || return 0
  D="$DEPS.tmp"; SITE="$D/opt/kube-cgroup-agent"
  rm -rf "$DEPS" "$D"; mkdir -p "$SITE"
  if [ "$arch" = "$HOST_ARCH" ]; then
    step "dependencies (requirements.lock)"
  else
    # the wheels pip on that root would choose: CPython $PYVER, manylinux up to the root's glibc
    m=$(machine "$arch")
    glibc=$(awk '/^Package: libc6$/{p=1} p&&/^Version:/{print $2; exit}' "$BASE/var/lib/dpkg/status" | cut -d- -f1)
    for minor in $(seq "${glibc#2.}" -1 17); do platforms+=(--platform "manylinux_2_${minor}_$m"); done
    platforms+=(--platform "manylinux2014_$m" --python-version "$PYVER" --implementation cp)
    step "dependencies (requirements.lock; $m wheels, glibc $glibc)"
  fi
  "$PY" -m pip install -q --no-compile --no-deps --only-binary=:all: "${platforms[@]}" --target "$SITE" \
    -r deploy/image/requirements.lock 2>&1 | { grep -v '^WARNING' || true; }
  # kubernetes' asyncio client and its HTTP stack: the agent uses the synchronous client only
  rm -rf "$SITE"/kubernetes/aio "$SITE"/aiohttp* "$SITE"/aiohappyeyeballs* "$SITE"/aiosignal* "$SITE"/frozenlist* \
         "$SITE"/multidict* "$SITE"/yarl* "$SITE"/propcache* "${SITE:?}"/bin "$SITE"/kubernetes/test "$SITE"/kubernetes/e2e_test
  find "$SITE" -name __pycache__ -type d -prune -exec rm -rf {} +
  # console scripts (removed above) carry the build venv's interpreter path, so their RECORD hashes vary by
  # checkout: drop those lines, so every clone of one commit builds the same layer
  sed -i '\#^\.\./\.\./bin/#d' "$SITE"/*.dist-info/RECORD
  step "bytecode of the dependencies and the stdlib ($arch's python3$([ "$arch" = "$HOST_ARCH" ] || echo ' under qemu-user'))"
  mkdir -p "$WORK/deps-probe"
  cp -a "$BASE"/. "$WORK/deps-probe/"; cp -a "$D"/. "$WORK/deps-probe/"
  pylib=$(chroot "$WORK/deps-probe" /usr/bin/python3 -c 'import sysconfig;print(sysconfig.get_path("stdlib"))')
  compile "$WORK/deps-probe" /opt/kube-cgroup-agent
  compile "$WORK/deps-probe" -x '/(test|tests|idlelib|tkinter|turtledemo|lib2to3)/' "$pylib" >/dev/null \
    || step "note: some stdlib files did not compile (left as source)"
  pycache "$WORK/deps-probe" "$D" /opt/kube-cgroup-agent "$pylib"
  rm -rf "$WORK/deps-probe"
  mv "$D" "$DEPS"; touch "$DEPS/.complete"
}

# ---- layer 2: the application ----
step "wheel"
# setuptools builds in ./build and packs all it finds there: a module moved or removed since an earlier
# build would ship again
rm -rf build
"$PY" -m pip wheel -q --no-deps -w "$WORK/wheel" . 2>&1 | { grep -v '^WARNING' || true; }
WHEEL=$(echo "$WORK"/wheel/*.whl)
PACKAGES_OF_WHEEL=$("$PY" -c 'import sys, zipfile; print(" ".join(sorted({n.split("/")[0] for n in zipfile.ZipFile(sys.argv[1]).namelist() if "/" in n and not n.split("/")[0].endswith((".dist-info", ".data"))})))' "$WHEEL")
OCI_ARGS=()
SIZES=""
for arch in $ARCHES; do
  emulate "$arch"
  base_root "$arch"
  step "$arch base $(du -sh --exclude=.complete "$BASE" | cut -f1) ($BASE)"
  deps_tree "$arch"
  step "$arch dependencies $(du -sh --exclude=.complete "$DEPS" | cut -f1) ($DEPS)"
  APP="$WORK/$arch/app"; SITE="$APP/opt/kube-cgroup-agent"
  mkdir -p "$APP"; cp -a "$DEPS"/. "$APP"/; rm -f "$APP/.complete"
  "$PY" -m pip install -q --no-compile --no-deps --target "$SITE" "$WHEEL" 2>&1 | { grep -v '^WARNING' || true; }
  rm -rf "${SITE:?}"/bin
  # pip records where it found the wheel (a temp dir): drop that record so the layer does not vary by build
  rm -f "$SITE"/kube_cgroup_agent-*.dist-info/direct_url.json
  sed -i '/direct_url.json/d' "$SITE"/kube_cgroup_agent-*.dist-info/RECORD
  sed -i '\#^\.\./\.\./bin/#d' "$SITE"/kube_cgroup_agent-*.dist-info/RECORD
  # the command users type in the container (`kubectl exec ... -- kube-cgroup-agent diff ...`), on the PATH;
  # pip's own console script was removed above (it names the build venv's interpreter)
  install -d "$APP/usr/local/bin"
  cat > "$APP/usr/local/bin/kube-cgroup-agent" <<'SCRIPT'
#!/usr/bin/python3
import sys

sys.path.insert(0, "/opt/kube-cgroup-agent")
from agent.commands.main import main  # noqa: E402

sys.exit(main())
SCRIPT
  chmod 0755 "$APP/usr/local/bin/kube-cgroup-agent"
  step "$arch bytecode of the application ($arch's python3$([ "$arch" = "$HOST_ARCH" ] || echo ' under qemu-user'))"
  PROBE="$WORK/$arch/probe"
  mkdir -p "$PROBE"; cp -a "$BASE"/. "$PROBE/"; cp -a "$APP"/. "$PROBE/"
  # shellcheck disable=SC2046
  compile "$PROBE" $(printf '/opt/kube-cgroup-agent/%s ' $PACKAGES_OF_WHEEL)
  # shellcheck disable=SC2086
  pycache "$PROBE" "$APP" $(printf '/opt/kube-cgroup-agent/%s ' $PACKAGES_OF_WHEEL)
  step "$arch: the application imports in its base root (from the bytecode) and its command starts"
  chroot "$PROBE" env PYTHONPATH=/opt/kube-cgroup-agent PYTHONDONTWRITEBYTECODE=1 KCG_COMMIT="$COMMIT" \
    /usr/bin/python3 -c 'import platform, agent.commands.main, agent.daemon, agent.cri.client, agent.kube.watch, kubernetes.client, grpc, pydantic_core, yaml._yaml, psutil; from agent.infra.version import describe; print(describe(), platform.machine())'
  chroot "$PROBE" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin KCG_COMMIT="$COMMIT" \
    kube-cgroup-agent version
  rm -rf "$PROBE"
  OCI_ARGS+=(--platform "linux/$arch" --layer "$BASE" --layer "$APP")
  SIZES+="$arch unpacked $(( ($(du -sb --exclude=.complete "$BASE" | cut -f1) + $(du -sb "$APP" | cut -f1)) / 1048576 )) MiB; "
done

step "archive"
mkdir -p "$(dirname "$OUT")"
TAG=${KCG_IMAGE_TAG:-kube-cgroup-agent:$VERSION}
DIGESTS=$("$PY" deploy/image/oci.py "$OUT" "${OCI_ARGS[@]}" --tag "$TAG" --epoch "$EPOCH" \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env PYTHONPATH=/opt/kube-cgroup-agent --env PYTHONDONTWRITEBYTECODE=1 --env "KCG_COMMIT=$COMMIT" \
  --entrypoint '["/usr/local/bin/kube-cgroup-agent"]' --user 0 \
  --label "org.opencontainers.image.title=kube-cgroup-agent" \
  --label "org.opencontainers.image.description=Node-local agent that owns a Kubernetes node's pod resource tiers" \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.ref.name=$TAG" \
  --label "org.opencontainers.image.revision=$COMMIT" \
  --label "org.opencontainers.image.licenses=Apache-2.0" \
  --label "org.opencontainers.image.created=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)" \
  --label "org.opencontainers.image.base.name=debian:bookworm (debootstrap minbase)")
SIZE=$(du -b "$OUT" | cut -f1)
step "done: $OUT"
echo "image    $TAG"
echo "digest   $(head -1 <<<"$DIGESTS") (index)"
tail -n +2 <<<"$DIGESTS" | sed 's/^/         /'
echo "archive  $(( SIZE / 1048576 )) MiB (compressed layers); ${SIZES%; }"
