"""Every command but `run` makes itself the kernel's first OOM victim (tests/kernel/test_cli_oom.py shows
why that protects the daemon); `run` keeps the score its pod gave it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agent.commands.main import yield_memory_to_the_daemon

_AFTER = ("import sys; from agent.commands.main import main; sys.argv = ['kube-cgroup-agent', *{argv!r}]; main(); "
          "print(open('/proc/self/oom_score_adj').read().strip())")


def _score_after(argv: list[str]) -> str:
    out = subprocess.run([sys.executable, "-c", _AFTER.format(argv=argv)], capture_output=True, text=True,
                         check=True).stdout
    return out.strip().splitlines()[-1]


def test_a_command_raises_its_own_oom_score(tmp_path: Path) -> None:
    assert _score_after(["version"]) == "1000"
    pods = tmp_path / "pods.yaml"
    pods.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    assert _score_after(["diff", "--pods", str(pods), "--cgroupfs", str(tmp_path)]) == "1000"


def test_the_daemon_and_code_calling_main_keep_their_score() -> None:
    parent = Path("/proc/self/oom_score_adj").read_text().strip()
    # `run` with a bad config stops before anything runs; the score is the parent's
    code = ("import sys; from agent.commands.main import main; sys.argv = ['kube-cgroup-agent', 'run', '--config', '/nonexistent']; "
            "main(); print(open('/proc/self/oom_score_adj').read().strip())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False).stdout
    assert out.strip().splitlines()[-1] == parent
    # a caller that hands main its own argv keeps its process as it is (tests, embedding programs)
    assert _score_in_code(["version"]) == parent


def _score_in_code(argv: list[str]) -> str:
    code = f"from agent.commands.main import main; main({argv!r}); print(open('/proc/self/oom_score_adj').read().strip())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def test_a_proc_that_refuses_is_not_an_error(tmp_path: Path) -> None:
    assert yield_memory_to_the_daemon(tmp_path / "missing" / "oom_score_adj") is False
    target = tmp_path / "oom_score_adj"
    assert yield_memory_to_the_daemon(target) is True and target.read_text() == "1000"
