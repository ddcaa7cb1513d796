#!/bin/bash
# make image: the agent's container image as an OCI archive, built here without a registry or a container
# daemon (root; Debian 12). Same recipe as the Containerfile beside the repository root:
#   layer 1: a minimal Debian 12 root (debootstrap --variant=minbase + python3), pruned of apt, docs,
#            locales and everything else a runtime image does not need; cached in $KCG_IMAGE_CACHE keyed by
#            its package list and this script's pruning rules;
#   layer 2: the project's wheel and its pinned dependencies (deploy/image/requirements.lock) in
#            /opt/kube-cgroup-agent, no compilers, no pip.
# Output: $OUT (default dist/kube-cgroup-agent-image.tar), image name $KCG_IMAGE_TAG (default
# kube-cgroup-agent:<version>; the name is also a label, so two names make two images, as two releases would).
# Reproducible: every timestamp is the commit's time (SOURCE_DATE_EPOCH); two builds of one commit on one
# machine give the same digest (the base root is cached; a new debootstrap on another day may fetch newer
# Debian packages, which changes layer 1 — see docs/installation.md, "The image").
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$REPO/dist/kube-cgroup-agent-image.tar}
CACHE=${KCG_IMAGE_CACHE:-/var/cache/kcg-image}
PY=${PYTHON:-$REPO/.venv/bin/python}
PACKAGES="python3-minimal,libpython3.11-stdlib,ca-certificates"
[ "$(id -u)" = 0 ] || { echo "make image needs root (debootstrap)" >&2; exit 2; }
cd "$REPO"
VERSION=$(PYTHONPATH="$REPO" "$PY" -c 'import agent;print(agent.__version__)')
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH=$EPOCH
T0=$(date +%s)
step() { echo "[image $(( $(date +%s) - T0 ))s] $*"; }

# one build of the cache at a time (two clones building at once would share $BASE.tmp)
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9

# ---- layer 1: the base root, cached ----
# keyed by the package list and layer 1's own lines (an edit below layer 1 does not rebuild the root)
KEY=$( { printf '%s\n' "$PACKAGES"; sed -n '/^# ---- layer 1/,/^# ---- layer 2/p' "$0"; } | sha256sum | cut -c1-16)
BASE="$CACHE/base-$KEY"
if [ ! -f "$BASE/.complete" ]; then
  command -v debootstrap >/dev/null || { apt-get update -q >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }
  # the mirror this machine's apt uses (never a name written here)
  MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list)
  step "debootstrap (minbase + $PACKAGES)"
  rm -rf "$BASE" "$BASE.tmp"; mkdir -p "$CACHE"
  debootstrap --variant=minbase --include="$PACKAGES" bookworm "$BASE.tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log"; exit 1; }
  R="$BASE.tmp"
  step "prune"
  # a runtime image: no package manager state, docs, locales, logs, caches, or tools only a shell user needs
  # (ldconfig's aux-cache records inode numbers and times: the one file that made two debootstraps differ)
  rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/* "$R"/var/cache/debconf/*-old "$R"/var/lib/dpkg/*-old \
         "$R"/var/log/* "$R"/usr/share/doc/* "$R"/usr/share/man/* "$R"/usr/share/info/* "$R"/usr/share/locale/* \
         "$R"/usr/share/i18n "$R"/usr/share/lintian "$R"/usr/share/common-licenses "$R"/usr/share/zoneinfo \
         "$R"/usr/lib/python3.11/{test,idlelib,tkinter,turtledemo,ensurepip,lib2to3,pydoc_data,unittest/test} \
         "$R"/usr/share/perl "$R"/usr/lib/x86_64-linux-gnu/perl* "$R"/usr/bin/perl* \
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
fi
step "base $(du -sh --exclude=.complete "$BASE" | cut -f1) ($BASE)"

# ---- layer 2: the application ----
WORK=$(mktemp -d /tmp/kcg-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
step "wheel"
# setuptools builds in ./build and packs all it finds there: a module moved or removed since an earlier
# build would ship again
rm -rf build
"$PY" -m pip wheel -q --no-deps -w "$WORK/wheel" . 2>&1 | { grep -v '^WARNING' || true; }
APP="$WORK/app"; SITE="$APP/opt/kube-cgroup-agent"
mkdir -p "$SITE"
step "dependencies (requirements.lock)"
"$PY" -m pip install -q --no-compile --no-deps --only-binary=:all: --target "$SITE" \
  -r deploy/image/requirements.lock "$WORK"/wheel/*.whl 2>&1 | { grep -v '^WARNING' || true; }
# kubernetes' asyncio client and its HTTP stack: the agent uses the synchronous client only
rm -rf "$SITE"/kubernetes/aio "$SITE"/aiohttp* "$SITE"/aiohappyeyeballs* "$SITE"/aiosignal* "$SITE"/frozenlist* \
       "$SITE"/multidict* "$SITE"/yarl* "$SITE"/propcache* "${SITE:?}"/bin "$SITE"/kubernetes/test "$SITE"/kubernetes/e2e_test
find "$SITE" -name __pycache__ -type d -prune -exec rm -rf {} +
# pip records where it found the wheel (a temp dir): drop that record so the layer does not vary by build
rm -f "$SITE"/kube_cgroup_agent-*.dist-info/direct_url.json
sed -i '/direct_url.json/d' "$SITE"/kube_cgroup_agent-*.dist-info/RECORD
# the console scripts (removed above) carry the build venv's interpreter path, so their RECORD hashes vary by
# checkout: drop those lines too, so every clone of one commit builds the same layer
sed -i '\#^\.\./\.\./bin/#d' "$SITE"/*.dist-info/RECORD
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
step "bytecode (the image's own python3; unchecked-hash, so reproducible and never checked against the source)"
mkdir -p "$WORK/probe"
cp -a "$BASE"/. "$WORK/probe/"; cp -a "$APP"/. "$WORK/probe/"
# Without bytecode every exec'd command compiles what it imports (the kubernetes client: about a second) and
# the root filesystem is read-only, so nothing would ever keep it. `unchecked-hash` .pyc files hold the
# source's hash instead of its mtime (reproducible) and Python imports them without reading the source;
# -j1 and a fixed hash seed: one process, the same marshalled output each build. The stdlib's bytecode
# (pruned from the cached base) goes into this layer with the application's.
PYLIB=$(chroot "$WORK/probe" /usr/bin/python3 -c 'import sysconfig;print(sysconfig.get_path("stdlib"))')
compile() { chroot "$WORK/probe" env PYTHONHASHSEED=0 SOURCE_DATE_EPOCH="$EPOCH" /usr/bin/python3 -m compileall -q -j1 \
  --invalidation-mode unchecked-hash "$@"; }
compile /opt/kube-cgroup-agent
compile -x '/(test|tests|idlelib|tkinter|turtledemo|lib2to3)/' "$PYLIB" >/dev/null || step "note: some stdlib files did not compile (left as source)"
for tree in /opt/kube-cgroup-agent "$PYLIB"; do
  mkdir -p "$APP$tree"
  (cd "$WORK/probe$tree" && find . -path '*/__pycache__/*.pyc' -print0 | sort -z | tar --null -T - -cf -) | tar -xf - -C "$APP$tree"
done
step "check the application imports in the base root (from the bytecode)"
chroot "$WORK/probe" env PYTHONPATH=/opt/kube-cgroup-agent PYTHONDONTWRITEBYTECODE=1 KCG_COMMIT="$COMMIT" \
  /usr/bin/python3 -c 'import agent.commands.main, agent.daemon, agent.cri.client, agent.kube.watch, kubernetes.client, grpc; from agent.infra.version import describe; print(describe())'
chroot "$WORK/probe" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin KCG_COMMIT="$COMMIT" \
  kube-cgroup-agent version
rm -rf "$WORK/probe"

step "archive"
mkdir -p "$(dirname "$OUT")"
TAG=${KCG_IMAGE_TAG:-kube-cgroup-agent:$VERSION}
DIGEST=$("$PY" deploy/image/oci.py "$OUT" --layer "$BASE" --layer "$APP" --tag "$TAG" --epoch "$EPOCH" \
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
UNPACKED=$(( $(du -sb --exclude=.complete "$BASE" | cut -f1) + $(du -sb "$APP" | cut -f1) ))
step "done: $OUT"
echo "image    $TAG"
echo "digest   $DIGEST"
echo "archive  $(( SIZE / 1048576 )) MiB (compressed layers), unpacked $(( UNPACKED / 1048576 )) MiB"
