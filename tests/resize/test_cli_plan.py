"""`plan` and `explain` on a node whose resizes the agent manages: the engine's exact steps (a restart
step included) and each pod's resize state, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.commands.main import main
from tests.resize.harness import ResizeNode
from tests.resize.manifests import ctr, manifest, policy


def test_plan_and_explain_show_resize_steps_and_state(
    node: ResizeNode, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    g = {"cpu": "500m", "memory": "256Mi"}
    node.add_pod(
        manifest(
            "p", [ctr("c1", lim=g), ctr("c2", lim=g, resizePolicy=policy("NotRequired", "RestartContainer"))]
        )
    )
    eng = node.engine()
    eng.start(node.views())
    eng.reconcile()
    node.resize(
        "p",
        {
            "c1": {"limits": {"cpu": "1", "memory": "256Mi"}},
            "c2": {"limits": {"cpu": "500m", "memory": "512Mi"}},
        },
    )
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"kind": "List", "items": [node.raw("p")]}))
    config = tmp_path / "config.yaml"
    config.write_text(
        f"cgroupfs: {node.tree.root}\npods: {pods}\nstateDir: {node.settings.state_dir}\n"
        "cgroupVersion: '1'\nhugepageSizes: []\nallocatable: {cpu: '8', memory: 16Gi}\n"
    )
    records = node.settings.state_dir / "pods"
    checkpoint = {f.name: f.read_bytes() for f in records.iterdir()}
    before = node.read(node.pod_path("p", "cpu.cfs_quota_us"))

    assert main(["plan", "--config", str(config), "-o", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    kinds = [(s["kind"], s.get("container") or s.get("path")) for s in out["steps"]]
    assert ("restart", "c2") in kinds and ("container", "c1") in kinds
    assert all(k[1] != "c2" for k in kinds if k[0] == "container")  # c2 restarts instead
    [resize] = out["resizes"]
    assert resize["pod"] == "default/p" and resize["state"] == "InProgress"
    assert resize["reason"] == "WaitingForRestart"

    assert main(["explain", "default/p", "--config", str(config)]) == 0
    assert "resize default/p: InProgress (WaitingForRestart)" in capsys.readouterr().out

    assert node.read(node.pod_path("p", "cpu.cfs_quota_us")) == before  # dry runs write nothing
    assert {f.name: f.read_bytes() for f in records.iterdir()} == checkpoint
    assert node.cri.service.calls_of("StopContainer") == []
