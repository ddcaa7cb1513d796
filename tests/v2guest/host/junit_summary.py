"""Summarise a pytest JUnit XML report: counts, then one line per failed or errored test.

Prints `N passed, N failed, N skipped` (errors count as failed, xfails as skipped) as the last line; exit code 0, or 1 when
the file is missing or unreadable.

usage: junit_summary.py JUNIT_XML
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def summarise(path: Path) -> tuple[int, int, int, int, list[str]]:
    """(passed, failed, skipped, of which xfailed, failure lines)."""
    root = ET.parse(path).getroot()
    passed = failed = skipped = xfailed = 0
    problems: list[str] = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            failed += 1
            problems.append(f"FAILED {name}")
        elif "skipped" in kinds:
            skipped += 1
            xfailed += any(c.get("type") == "pytest.xfail" for c in case if c.tag == "skipped")
        else:
            passed += 1
    return passed, failed, skipped, xfailed, problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        passed, failed, skipped, xfailed, problems = summarise(Path(argv[0]))
    except (OSError, ET.ParseError) as exc:
        print(f"junit_summary: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 1
    for line in problems:
        print(line)
    if xfailed:
        print(f"({xfailed} of the skipped are expected failures: xfail)")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
