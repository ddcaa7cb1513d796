"""`python -m bench` needs the agent's runtime dependencies, not the test runner: every bench module, every
figure's module and the report are imported (and the report rendered) in a fresh interpreter in which
pytest and hypothesis cannot be imported. Of tests/, the benchmarks use only tests/support/ (the fakes
they share with the tests), and tests/support/ itself reaches nothing else of tests/: a conftest, a
harness that grows a fixture or a test module stays out of `make bench`'s imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = r"""
import importlib, importlib.abc, pkgutil, sys
from pathlib import Path

class NoTestRunner(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pytest", "_pytest", "hypothesis"):
            raise ImportError(f"{name} is a test dependency")
        return None

def outside_support():
    return sorted(m for m in sys.modules if m.startswith("tests.") and not m.startswith("tests.support"))

sys.meta_path.insert(0, NoTestRunner())
import bench
from bench import figures, report

names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__))
for name in names:
    importlib.import_module(f"bench.{name}")
for figure in figures.FIGURES:
    figure.load()
report.render(Path("bench/results"))
assert not outside_support(), f"bench imports these parts of tests/ besides tests/support/: {outside_support()}"

import tests.support
support = sorted(m.name for m in pkgutil.walk_packages(tests.support.__path__, "tests.support."))
for name in support:
    importlib.import_module(name)
assert not outside_support(), f"tests/support/ imports these other parts of tests/: {outside_support()}"
assert not [m for m in sys.modules if m.split(".")[0] in ("pytest", "_pytest", "hypothesis")]
print(" ".join(names))
print(" ".join(support))
"""


def test_every_bench_module_imports_and_the_report_renders_without_pytest() -> None:
    proc = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    bench_modules, support_modules = (line.split() for line in proc.stdout.splitlines()[-2:])
    for module in ("sections", "report", "daemon", "rollout", "vpa", "tiers", "figures", "__main__"):
        assert module in bench_modules
    for module in ("fakeapi.server", "fake_cri.serving", "cgroup_tree", "kernel", "rollout_fakes"):
        assert f"tests.support.{module}" in support_modules
