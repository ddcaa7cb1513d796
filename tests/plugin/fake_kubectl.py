"""A fake `kubectl` for the plugin's tests: it logs its argv (one JSON line per call, $FAKE_KUBECTL_LOG) and
answers from a scenario ($FAKE_KUBECTL_SCENARIO, JSON) keyed by what it was asked: "get pods", "get node"
or "exec". An answer is {"stdout", "stderr", "rc"}; an exec answer may instead be {"agent": {PATH: LOCAL}}:
run this checkout's kube-cgroup-agent with the command line exec was given (a config path in the pod mapped
to a local file) and end as kubectl exec ends, its "command terminated with exit code N" line included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

GLOBAL_FLAGS = ("--kubeconfig", "--context", "--as")
ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    argv = sys.argv[1:]
    with open(os.environ["FAKE_KUBECTL_LOG"], "a") as log:
        log.write(json.dumps(argv) + "\n")
    scenario = json.loads(Path(os.environ["FAKE_KUBECTL_SCENARIO"]).read_text())
    words = list(argv)
    while words and words[0] in GLOBAL_FLAGS:
        words = words[2:]
    key = "exec" if words[:1] == ["exec"] else " ".join(words[:2])
    answer = scenario.get(key)
    if answer is None:
        print(f"fake kubectl: no answer for {key!r} ({argv})", file=sys.stderr)
        return 97
    if "agent" in answer:
        command = words[words.index("--") + 2:]  # after `-- kube-cgroup-agent`
        command = [answer["agent"].get(w, w) for w in command]
        done = subprocess.run([sys.executable, "-m", "agent", *command], capture_output=True, cwd=ROOT,
                              check=False)
        sys.stdout.buffer.write(done.stdout)
        sys.stderr.buffer.write(done.stderr)
        if done.returncode:
            sys.stderr.write(f"command terminated with exit code {done.returncode}\n")
        return done.returncode
    sys.stdout.write(answer.get("stdout", ""))
    sys.stderr.write(answer.get("stderr", ""))
    return int(answer.get("rc", 0))


if __name__ == "__main__":
    sys.exit(main())
