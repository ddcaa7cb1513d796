"""A command run beside the daemon, in its memory cgroup (`kubectl exec` into the agent's pod), is the one
the kernel kills at the cgroup's limit — never the daemon. Real cgroup v1 memory limits on this kernel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kernel import KernelRoot

MI = 1 << 20

# The command's stand-in: joins the cgroup (the parent moves it there before "go"), takes what the CLI
# takes at its start, then grows 8 MiB at a time up to 160 MiB: more than the limit leaves beside the daemon, less than the
# limit alone.
_COMMAND = """
import sys
from agent.commands.main import yield_memory_to_the_daemon
sys.stdin.readline()
if sys.argv[1] == "yield":
    assert yield_memory_to_the_daemon()
held = []
for _ in range(20):
    held.append(b"\\x01" * (8 << 20))
print("survived", flush=True)
"""


@pytest.mark.kernel
@pytest.mark.parametrize("mode", ["yield", "as-is"])
def test_at_the_limit_the_kernel_kills_the_command_not_the_daemon(kernel_root: KernelRoot, mode: str) -> None:
    pod = kernel_root.mkdirs("memory", "agent-pod")
    kernel_root.files.write(f"{pod}/memory.limit_in_bytes", str(192 * MI))
    daemon = kernel_root.start_hog(pod, 110)  # the daemon: the larger RSS in the pod
    # the premise: the daemon's score is not already the highest (a parent that raised its own would pass
    # it on, and a tie goes to the larger RSS)
    assert int(Path(f"/proc/{daemon.pid}/oom_score_adj").read_text()) < 1000
    command = subprocess.Popen(
        [sys.executable, "-c", _COMMAND, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        kernel_root.files.write(f"{pod}/cgroup.procs", str(command.pid))
        out, _ = command.communicate("go\n", timeout=120)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
    oom_kills = int(dict(line.split() for line in kernel_root.files.read(f"{pod}/memory.oom_control").splitlines())
                    .get("oom_kill", "1"))
    assert oom_kills >= 1, "the limit was never reached: the test proves nothing"
    if mode == "yield":
        assert command.returncode == -9, f"the command was not the one killed (rc {command.returncode}, {out!r})"
        assert daemon.poll() is None, "the daemon was killed"
    else:  # the control: without the CLI's own OOM score the kernel picks the larger RSS, the daemon
        assert daemon.poll() is not None, "without yielding, the daemon should have been the victim"
        assert "survived" in out
