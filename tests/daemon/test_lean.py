"""The long-running commands never load `rich` (agent.infra.lean), though the development virtualenv has it."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
from agent.commands.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
rich = sys.modules.get("rich")
print("STRUCTLOG", "structlog" in sys.modules, "RICH", rich is not None)
"""


@pytest.mark.parametrize("argv", [["run", "--config", "/nonexistent/config.yaml"], ["vpa-admission", "--kubeconfig", "/nonexistent/kubeconfig"]])
def test_the_daemon_and_the_keeper_start_without_rich(argv: list[str]) -> None:
    pytest.importorskip("rich")  # only meaningful where it is installed (the development virtualenv)
    r = subprocess.run([sys.executable, "-c", CHECK, *argv], capture_output=True, text=True, check=False)
    assert "STRUCTLOG True RICH False" in r.stdout, (r.stdout, r.stderr)


def test_a_console_traceback_is_still_rendered_without_rich() -> None:
    code = (
        "from agent.infra.lean import without_rich; without_rich()\n"
        "import io, structlog\n"
        "out = io.StringIO()\n"
        "structlog.configure(processors=[structlog.dev.ConsoleRenderer(colors=False)], logger_factory=structlog.PrintLoggerFactory(out))\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    structlog.get_logger().exception('boom')\n"
        "print(out.getvalue())\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "boom" in r.stdout and "ZeroDivisionError" in r.stdout
