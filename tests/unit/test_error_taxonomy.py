"""One taxonomy: every error class of the agent derives from AgentError (the drivers' from DriverError),
reads as one line with its context, and is either temporary (retried with backoff) or permanent."""

from __future__ import annotations

import errno
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

import pytest

import agent
import cgroupfs
from agent.infra.errors import AgentError, PermanentError, TemporaryError, is_temporary, user_message
from cgroupfs.errors import DriverError

TEMPORARY = {
    "agent.cri.errors.Unavailable", "agent.cri.errors.DeadlineExceeded", "agent.cri.errors.RuntimeFailure",
    "agent.cri.endpoint.NoRuntimeSocket", "agent.kube.errors.APIGone", "agent.kube.errors.APIConflict",
    "agent.kube.errors.APIUnavailable", "cgroupfs.errors.CgroupNotFound", "cgroupfs.errors.QuotaRefused",
    "cgroupfs.errors.MemoryBelowUsage", "cgroupfs.errors.MemswOrderRefused", "cgroupfs.systemd.bus.NoSuchUnit",
    "cgroupfs.systemd.bus.BusUnavailable", "agent.infra.errors.TemporaryError",
    "agent.cri.errors.MemoryBelowUsage", "agent.cri.errors.QuotaRefused",
}


def _error_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for pkg in (agent, cgroupfs):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if ".cri.v1" in info.name or info.name.endswith("__main__"):
                continue  # generated stubs
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseException) and cls.__module__ == info.name:
                    found[f"{cls.__module__}.{cls.__name__}"] = cls
    return found


CLASSES = _error_classes()


def test_every_error_class_has_the_root() -> None:
    assert len(CLASSES) > 40
    strays = [name for name, cls in CLASSES.items() if not issubclass(cls, AgentError | DriverError)]
    assert strays == [], f"errors outside the taxonomy: {strays}"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_each_class_is_temporary_or_permanent_as_listed(name: str) -> None:
    cls = CLASSES[name]
    assert bool(cls.retryable) is (name in TEMPORARY), name  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("err", "line", "temporary"),
    [
        (__import__("agent.config.settings", fromlist=["ConfigError"]).ConfigError(["a: bad", "b: worse"]), "invalid configuration: a: bad; b: worse", False),
        (__import__("agent.pods.parse", fromlist=["PodParseError"]).PodParseError("ns/p", "metadata.uid is missing"), "ns/p: metadata.uid is missing", False),
        (__import__("cgroupfs.errors", fromlist=["CgroupNotFound"]).CgroupNotFound("write", "cpu/kubepods/x/cpu.shares", "no such cgroup", "2", errno.ENOENT),
         "write '2' to cpu/kubepods/x/cpu.shares: no such cgroup", True),
        (__import__("agent.cri.errors", fromlist=["Unavailable"]).Unavailable("UpdateContainerResources", "UNAVAILABLE", "connection refused", "ab" * 32),
         f"CRI UpdateContainerResources for container {'ab' * 32} failed (UNAVAILABLE): connection refused", True),
        (__import__("agent.kube.errors", fromlist=["APIForbidden"]).APIForbidden("patch pods/status", 403, "Forbidden"), "patch pods/status: 403 Forbidden", False),
        (TemporaryError("the runtime restarts", pod="ns/p"), "the runtime restarts", True),
        (PermanentError("bad value", path="x", value="1"), "bad value", False),
    ],
)
def test_one_line_with_context_and_the_split(err: BaseException, line: str, temporary: bool) -> None:
    assert user_message(err) == line and "\n" not in line
    assert is_temporary(err) is temporary


def test_context_is_kept_and_unknown_errors_are_not_retried() -> None:
    err = PermanentError("x", pod="ns/p", path="memory/kubepods", value="5")
    assert err.context == {"pod": "ns/p", "path": "memory/kubepods", "value": "5"}
    assert not is_temporary(RuntimeError("a bug"))
    assert user_message(RuntimeError("boom")) == "internal error: RuntimeError: boom (set KCG_DEBUG=1 for a traceback)"


def test_errors_module_imports_nothing_above_it() -> None:
    text = (Path(agent.__file__).parent / "infra" / "errors.py").read_text()
    imports = [line for line in text.splitlines() if line.startswith(("from ", "import ")) or line.startswith("    from agent")]
    assert all(not line.startswith(("from agent", "import agent", "    from agent")) for line in imports), imports


def test_the_cycle_finder_finds_a_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.tools.import_cycles import cycles

    pkg = tmp_path / "circ"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circ import b\n")
    (pkg / "b.py").write_text("def f():\n    from circ import a\n")
    (pkg / "c.py").write_text("from circ import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("circ", None)
    assert cycles("circ") == [["circ.a", "circ.b"]]
    assert cycles("agent", "cgroupfs") == []
