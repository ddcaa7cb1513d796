#!/bin/bash
# Per-run guest script: the host copies it to the 9p share as /mnt/ci/run.sh; ci-runner runs it as root.
# /mnt/src is a read-only copy of the project tree, /mnt/ci/out collects the results.
set -euo pipefail
out=/mnt/ci/out
src=/mnt/src
cd "$src"
echo "guest: $(uname -r), $(systemctl --version | head -1), python $(/opt/venv/bin/python -V 2>&1)"
echo "guest: cgroup fs $(stat -fc %T /sys/fs/cgroup), controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"

# The project is used from the read-only share: no install step, no bytecode or caches written there.
export PYTHONPATH=$src PYTHONDONTWRITEBYTECODE=1 HYPOTHESIS_STORAGE_DIRECTORY=/tmp/hypothesis
# Console scripts of [project.scripts] as thin wrappers, so tests can call e.g. `kube-cgroup-agent`.
/opt/venv/bin/python - <<'PY'
import os, tomllib
scripts = tomllib.load(open("pyproject.toml", "rb"))["project"].get("scripts", {})
for name, target in scripts.items():
    module, func = target.split(":")
    path = f"/opt/venv/bin/{name}"
    with open(path, "w") as f:
        f.write(f"#!/opt/venv/bin/python\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    os.chmod(path, 0o755)
PY
export PATH=/opt/venv/bin:$PATH

args=()
if [ -f /mnt/ci/pytest-args ]; then
  # one argument a line, from KCA_V2GUEST_PYTEST_ARGS on the host
  mapfile -t args < /mnt/ci/pytest-args
fi
echo "guest: pytest start at uptime $(cut -d' ' -f1 /proc/uptime)s"
set +e
# tests/v2guest, and the suites shared with the fakes whose real-kernel/real-systemd backend is marked
# v2guest (tests/backends.py): one test code for the fake tree and the guest's kernel.
python -m pytest -m v2guest tests/v2guest tests/drivers tests/systemd -p no:cacheprovider -rA --durations=8 \
  --junitxml="$out/junit.xml" -o junit_suite_name=v2guest "${args[@]}" 2>&1 | tee "$out/pytest.log"
rc=${PIPESTATUS[0]}
set -e
end=$(cut -d' ' -f1 /proc/uptime)
echo "guest: pytest rc=$rc at uptime ${end}s"
{
  echo "pytest_rc=$rc"
  echo "pytest_end_uptime=$end"
  echo "result=$(grep -E '^=+ .* in [0-9.]+s' "$out/pytest.log" | tail -n 1 | tr -d '=' | xargs)"
} > "$out/summary.txt"
exit "$rc"
