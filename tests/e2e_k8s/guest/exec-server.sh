#!/bin/bash
# The guest end of `cluster.sh exec realk8s-v2 -- CMD...` (kcg-exec.service). The host drops ID.req into
# /mnt/ci/exec: the argv, NUL-separated. This loop claims it (rename to ID.run), runs it as root from / with
# no stdin, writes ID.out, ID.err and last ID.rc (renamed into place), each request in its own subshell so a
# slow command never holds up the next. The host polls for ID.rc and removes the files.
set -uo pipefail
D=/mnt/ci/exec
mkdir -p "$D"
shopt -s nullglob
# a 0.2 s pause without forking sleep each time (the poll runs for the guest's whole life, under TCG)
rm -f /run/kcg-exec.tick; mkfifo /run/kcg-exec.tick; exec {tick}<>/run/kcg-exec.tick
run() {
  local id=$1 rc
  local -a argv
  mapfile -d '' -t argv < "$D/$id.run"
  (cd / && exec "${argv[@]}") < /dev/null > "$D/$id.out" 2> "$D/$id.err"
  rc=$?
  echo "$rc" > "$D/$id.rc.tmp" && mv "$D/$id.rc.tmp" "$D/$id.rc"
  rm -f "$D/$id.run"
}
while :; do
  for req in "$D"/*.req; do
    id=${req##*/}; id=${id%.req}
    mv "$req" "$D/$id.run" 2>/dev/null || continue
    run "$id" &
  done
  read -r -t 0.2 -u "$tick" _
done
