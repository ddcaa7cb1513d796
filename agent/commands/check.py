"""`kube-cgroup-agent check`: environment diagnostics, each with a clear verdict."""

from __future__ import annotations

import json
from pathlib import Path

from agent.config.settings import Settings
from cgroupfs.check import Check, Verdict, probe

EXIT_OK = 0
EXIT_FAIL = 2


def _runtime_check(endpoint: str) -> Check:
    """Beyond "the socket exists": does the runtime answer a CRI Version call?"""
    from agent.cri.client import CRIClient
    from agent.cri.errors import CRIError

    try:
        with CRIClient(endpoint, timeout=2.0) as client:
            v = client.version()
    except CRIError as err:
        return Check("CRI runtime", Verdict.FAIL, f"{endpoint} does not answer: {err}")
    return Check(
        "CRI runtime", Verdict.OK, f"{v.runtime_name} {v.runtime_version} (CRI {v.runtime_api_version})"
    )


def run_check(settings: Settings, kubelet_config: str | None, output: str) -> int:
    checks = probe(
        settings.cgroupfs,
        version=settings.cgroup_version,
        kubelet_config=Path(kubelet_config) if kubelet_config else None,
        cri_endpoint=settings.cri_endpoint,
        cgroup_root=settings.cgroup_root,
        cgroup_driver=settings.cgroup_driver,
    )
    checks.extend(
        Check(f"kubelet setting {key}", Verdict.OK, f"inherited from {src}")
        for key, src in sorted(settings.inherited.items())
    )
    checks.extend(Check("kubelet setting", Verdict.WARN, c) for c in settings.kubelet_conflicts)
    if settings.cri_endpoint and not any(
        c.name.startswith("CRI") and c.verdict is Verdict.FAIL for c in checks
    ):
        checks.append(_runtime_check(settings.cri_endpoint))
    if output == "json":
        print(
            json.dumps(
                [{"name": c.name, "verdict": c.verdict.value, "detail": c.detail} for c in checks], indent=2
            )
        )
    else:
        width = max((len(c.name) for c in checks), default=10)
        for c in checks:
            print(f"{c.verdict.value.upper():<5} {c.name:<{width}}  {c.detail}")
    return EXIT_FAIL if any(c.verdict is Verdict.FAIL for c in checks) else EXIT_OK
