"""The long-running commands never load `rich` nor `kubernetes_validate` (agent.infra.lean), though the
development virtualenv has both."""

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
loaded = [m for m in ("rich", "kubernetes_validate") if sys.modules.get(m) is not None]
print("STRUCTLOG", "structlog" in sys.modules, "KUBERNETES", "kubernetes" in sys.modules, "OPTIONAL", loaded)
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--config", "/nonexistent/config.yaml"],
        ["vpa-admission", "--kubeconfig", "/nonexistent/kubeconfig"],
    ],
)
def test_the_daemon_and_the_keeper_start_without_the_optional_imports(argv: list[str]) -> None:
    pytest.importorskip("rich")  # only meaningful where they are installed (the development virtualenv)
    pytest.importorskip("kubernetes_validate")
    r = subprocess.run([sys.executable, "-c", CHECK, *argv], capture_output=True, text=True, check=False)
    assert "OPTIONAL []" in r.stdout and "STRUCTLOG True" in r.stdout, (r.stdout, r.stderr)
    if argv[0] == "vpa-admission":  # it got as far as the kubernetes package, whose dynamic client tries kubernetes_validate
        assert "KUBERNETES True" in r.stdout, r.stdout


def test_a_console_traceback_is_still_rendered_without_optional_imports() -> None:
    code = (
        "from agent.infra.lean import without_optional_imports; without_optional_imports()\n"
        "import io, structlog\n"
        "out = io.StringIO()\n"
        "structlog.configure(processors=[structlog.dev.ConsoleRenderer(colors=False)], logger_factory=structlog.PrintLoggerFactory(out))\n"
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    structlog.get_logger().exception('boom')\n"
        "print(out.getvalue())\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "boom" in r.stdout and "ZeroDivisionError" in r.stdout
