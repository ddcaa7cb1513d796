"""The agent as the systemd unit of a bare node, under the guest's real systemd (PID 1): installed as
docs/systemd.md says (a virtualenv with the project's wheel, the shipped unit and environment file, a
configuration with the systemd driver and a directory of Pod manifests), then `systemctl enable --now`.

What it shows, in order: Type=notify (systemd calls the unit started only after the agent's first full
pass, the status line says "ready"), the pod's values applied through the slice's unit properties, a
changed manifest applied, the log in the journal as structured fields, `systemctl reload` applying a new
configuration in the same PID and refusing a broken one (the unit stays active, one log line),
`daemon-reload` and `restart` losing nothing (values, state directory), the watchdog (SIGSTOP: systemd
kills and restarts the agent), and the unit's exposure score from `systemd-analyze security` (printed as
"e2e-v2: systemd-analyze security score X.Y").

There is no kubelet in the guest: the test makes the QoS and pod slices as the kubelet would (transient
slices below a private root slice, tests/backends/systemd_trees.py). The wheel comes from the host
(tests/v2guest/run.sh builds it into the ci share); the virtualenv is a copy of the guest's /opt/venv,
whose pinned dependencies stand in for the index the guest cannot reach. Everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
import yaml

from cgroupfs.types import CgroupName
from tests.backends.systemd_trees import GuestSystemdBackend
from tests.daemon.test_systemd_unit import EXPOSURE_MAX, seconds, service
from tests.unit.podbuild import ctr, pod
from tests.v2guest import guestlib

pytestmark = pytest.mark.v2guest

REPO = Path(__file__).resolve().parents[2]
UNIT = "kube-cgroup-agent.service"
UNIT_FILE = Path("/etc/systemd/system") / UNIT
ETC = Path("/etc/kube-cgroup-agent")
CONFIG = ETC / "config.yaml"
PODS = ETC / "pods"
STATE = Path("/var/lib/kube-cgroup-agent")
VENV = Path("/opt/kube-cgroup-agent")
COMMAND = Path("/usr/local/bin/kube-cgroup-agent")
WHEELS = Path("/mnt/ci/wheel")  # tests/v2guest/run.sh
UID = "eeeeeeee-3333-4000-8000-000000000005"
POD = CgroupName(("kubepods", "burstable", f"pod{UID}"))
TIERS = (CgroupName(("kubepods",)), CgroupName(("kubepods", "burstable")), CgroupName(("kubepods", "besteffort")))
MI = 1024**2
WATCHDOG_S = seconds(service()["WatchdogSec"])
START_S = 120.0  # a start under TCG: the interpreter, the agent's imports, the first pass


# ------------------------------------------------------------------------------------------------ tools
def show(*props: str) -> dict[str, str]:
    out = guestlib.systemctl("show", "-p", ",".join(props), UNIT).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    """Poll `predicate` (a file not there yet counts as not yet) until true; fail with the unit's state."""

    def check() -> bool:
        try:
            return bool(predicate())
        except OSError:  # a cgroup file systemd has not made yet (cpu.max before the first CPU property)
            return False

    if not guestlib.wait_for(check, timeout=timeout, interval=0.25):
        state = show("ActiveState", "SubState", "MainPID", "NRestarts", "StatusText", "Result")
        tail = guestlib.run(["journalctl", "-u", UNIT, "-n", "40", "--no-pager"], check=False).stdout
        raise AssertionError(f"gave up after {timeout:.0f} s waiting for {what}; unit: {state}\n{tail}")


def running() -> bool:
    s = show("ActiveState", "SubState")
    return s["ActiveState"] == "active" and s["SubState"] == "running"


def value(entry: dict[str, Any], name: str) -> str | None:
    """A field of `journalctl -o json` (a list of bytes for a binary value; the last of a repeated one)."""
    v = entry.get(name)
    if isinstance(v, list):
        v = bytes(v).decode(errors="replace") if v and isinstance(v[0], int) else (v[-1] if v else None)
    return v if isinstance(v, str) else None


def journal() -> list[dict[str, Any]]:
    """Every entry of the unit: the agent's own and systemd's about it."""
    out = guestlib.run(["journalctl", "-u", UNIT, "-o", "json", "--no-pager"])
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def events(name: str, **fields: str) -> list[dict[str, Any]]:
    """The agent's journal entries of one event (sent natively: _TRANSPORT=journal)."""
    return [
        e
        for e in journal()
        if value(e, "_TRANSPORT") == "journal"
        and value(e, "KCG_EVENT") == name
        and all(value(e, k) == v for k, v in fields.items())
    ]


def write_atomically(path: Path, text: str) -> None:
    """As an editor or a configuration tool does: the directory source never reads half a manifest."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def manifest(cpu: str, memory: str) -> str:
    raw = pod("b", [ctr("app", req={"cpu": "500m", "memory": "64Mi"}, lim={"cpu": cpu, "memory": memory})], uid=UID)
    return yaml.safe_dump(raw)


def config(b: GuestSystemdBackend, **extra: Any) -> str:
    return yaml.safe_dump(
        {
            "cgroupDriver": "systemd",
            "cgroupRoot": b.cgroup_root,
            "pods": str(PODS),
            "podsPollInterval": "1s",
            "hugepageSizes": [],
            **extra,
        }
    )


def state_files() -> set[str]:
    """The agent's state files (not the temporary ones of an atomic write in progress)."""
    return {str(p.relative_to(STATE)) for p in STATE.rglob("*") if p.is_file() and not p.name.startswith(".")}


def clean_env() -> dict[str, str]:
    """The test runner's environment without the read-only project on the path (pip would take its
    egg-info for an installed kube-cgroup-agent)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}


# ------------------------------------------------------------------------------------------------ set-up
@pytest.fixture(scope="module")
def installed() -> Iterator[GuestSystemdBackend]:
    """The agent installed for a bare node (not started), the kubelet's slices made; all removed after."""
    for path in (UNIT_FILE, ETC, VENV, COMMAND):
        assert not path.exists() and not path.is_symlink(), f"{path} exists before the test: not a clean guest"
    wheels = sorted(WHEELS.glob("kube_cgroup_agent-*.whl"))
    if not wheels:
        pytest.fail(f"no wheel of the project in {WHEELS}: tests/v2guest/run.sh builds it on the host")
    # another test's `apply` may have left the default state directory: set aside, put back afterwards
    aside = STATE.with_name(STATE.name + ".before-unit-test")
    if STATE.exists():
        STATE.rename(aside)
    b = GuestSystemdBackend.start()
    try:
        # the virtualenv: the pinned dependencies (a copy of /opt/venv), then the wheel as pip installs it
        subprocess.run(["cp", "-a", "/opt/venv", str(VENV)], check=True, timeout=600)
        (VENV / "bin" / "kube-cgroup-agent").unlink(missing_ok=True)  # run-tests.sh's wrapper, not the wheel's
        install = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-cache-dir"]
        pip = subprocess.run(
            [*install, "--disable-pip-version-check", str(wheels[-1])],
            capture_output=True,
            text=True,
            env=clean_env(),
            timeout=300,
            check=False,
        )
        assert pip.returncode == 0, pip.stdout + pip.stderr
        COMMAND.symlink_to(VENV / "bin" / "kube-cgroup-agent")
        version = subprocess.run(
            [str(COMMAND), "version"], capture_output=True, text=True, env=clean_env(), timeout=120, check=False
        )
        assert version.returncode == 0 and version.stdout.strip(), version.stderr
        # the unit and its environment file as shipped; the configuration and one pod
        shutil.copy(REPO / "systemd" / UNIT, UNIT_FILE)
        PODS.mkdir(parents=True)
        shutil.copy(REPO / "systemd" / "kube-cgroup-agent.env", ETC / "agent.env")
        CONFIG.write_text(config(b))
        (PODS / "b.yaml").write_text(manifest("1500m", "128Mi"))
        # what the kubelet would have made: the QoS slices and the pod's slice
        for tier in TIERS:
            b.start_slice(tier, [("MemoryAccounting", "b", True)])
        b.start_slice(POD, [("MemoryAccounting", "b", True)])
        guestlib.systemctl("daemon-reload")
        yield b
    finally:
        with suppress(Exception):  # a process the watchdog step stopped, if systemd has not ended it
            pid = int(show("MainPID").get("MainPID", "0"))
            if pid > 0:
                os.kill(pid, signal.SIGCONT)
        guestlib.systemctl("disable", "--now", UNIT, check=False)
        guestlib.systemctl("reset-failed", UNIT, check=False)
        UNIT_FILE.unlink(missing_ok=True)
        if COMMAND.is_symlink():
            COMMAND.unlink()
        for tree in (ETC, VENV, STATE):
            shutil.rmtree(tree, ignore_errors=True)
        if aside.exists():
            aside.rename(STATE)
        guestlib.systemctl("daemon-reload", check=False)
        b.cleanup()


# -------------------------------------------------------------------------------------------------- tests
def test_the_agent_as_a_systemd_unit(installed: GuestSystemdBackend) -> None:
    b = installed

    # --- enable --now: Type=notify, READY=1 after the first full pass ------------------------------------
    guestlib.systemctl("enable", "--now", "--no-block", UNIT)
    seen: set[str] = set()
    wait(lambda: seen.add(show("ActiveState")["ActiveState"]) or running(), "the unit active", START_S)
    first_up = time.monotonic()
    props = show("ActiveState", "SubState", "NRestarts", "StatusText", "Type", "NotifyAccess", "WatchdogUSec", "MainPID")
    assert props["Type"] == "notify" and props["NotifyAccess"] == "main", props
    assert props["NRestarts"] == "0" and props["StatusText"].startswith("ready: 1 pod"), props
    assert seconds(props["WatchdogUSec"]) == WATCHDOG_S, props
    main_pid = int(props["MainPID"])
    entries = journal()
    started_job = [  # systemd's "Started ..." (its catalog's id for a unit started)
        e
        for e in entries
        if (value(e, "JOB_TYPE"), value(e, "JOB_RESULT")) == ("start", "done")
        or value(e, "MESSAGE_ID") == "39f53479d3a045ac8e11786248231fbf"
    ]
    agent_started = [e for e in entries if value(e, "KCG_EVENT") == "started"]
    assert started_job and agent_started, f"states seen while starting: {seen}"
    # systemd called it started only after the agent had built its daemon (and READY after the first pass)
    assert int(started_job[0]["__MONOTONIC_TIMESTAMP"]) > int(agent_started[0]["__MONOTONIC_TIMESTAMP"])
    tiers = [e for e in entries if value(e, "KCG_SCOPE") == "tiers" and value(e, "KCG_EVENT") == "reconcile"]
    if tiers:  # logged at info when the tiers' pass wrote something (it does on fresh slices)
        assert int(started_job[0]["__MONOTONIC_TIMESTAMP"]) > int(tiers[0]["__MONOTONIC_TIMESTAMP"])

    wait(lambda: b.read(POD, "cpu.max") == "150000 100000", "the pod's CPU limit")
    wait(lambda: b.read(POD, "memory.max") == str(128 * MI), "the pod's memory limit")
    assert b.unit_property(POD, "MemoryMax") == 128 * MI  # through the unit's property, not only the file

    # --- the log in the journal as fields ----------------------------------------------------------------
    wait(lambda: events("reconcile", KCG_POD="default/b", KCG_OUTCOME="applied"), "the pod's entry in the journal")
    rec = events("reconcile", KCG_POD="default/b", KCG_OUTCOME="applied")[0]
    assert value(rec, "KCG_POD_UID") == UID and value(rec, "KCG_NAMESPACE") == "default"
    assert value(rec, "SYSLOG_IDENTIFIER") == "kube-cgroup-agent" and value(rec, "PRIORITY") == "6"
    assert value(rec, "_SYSTEMD_UNIT") == UNIT and (value(rec, "MESSAGE") or "").startswith("reconcile ")
    assert "cpu.max" in (value(rec, "KCG_CHANGED") or "")  # a list, as JSON
    loaded = events("manifests.loaded")[0]
    assert value(loaded, "KCG_DIRECTORY") == str(PODS) and value(loaded, "KCG_PODS") == "1"
    json_lines = [e for e in journal() if value(e, "_TRANSPORT") == "stdout" and (value(e, "MESSAGE") or "").startswith("{")]
    assert json_lines == [], "every event went natively ($JOURNAL_STREAM detected), none as a JSON line"

    # --- a changed manifest is applied -------------------------------------------------------------------
    write_atomically(PODS / "b.yaml", manifest("2", "128Mi"))
    wait(lambda: b.read(POD, "cpu.max") == "200000 100000", "the edited manifest applied")

    # --- systemctl reload: a new configuration, in the same PID ------------------------------------------
    write_atomically(CONFIG, config(b, cpuCFSQuota=False))
    guestlib.systemctl("reload", UNIT)
    wait(lambda: len(events("started")) == 2, "the agent started again by the reload")
    wait(lambda: b.read(POD, "cpu.max").startswith("max "), "cpuCFSQuota: false applied (no CPU limit)")
    wait(running, "the unit back to running after the reload's READY=1")
    props = show("MainPID", "NRestarts", "StatusText")
    assert int(props["MainPID"]) == main_pid and props["NRestarts"] == "0", props
    assert [value(e, "KCG_OUTCOME") for e in events("config.reload")] == ["restarting"]

    # --- a broken configuration is refused: the unit stays active on the settings it has -----------------
    write_atomically(CONFIG, config(b, cpuCFSQuota=False) + "cgroupDrvier: systemd\n")
    guestlib.systemctl("reload", UNIT)
    wait(lambda: events("config.reload_refused"), "the refusal in the journal")
    refused = events("config.reload_refused")
    assert len(refused) == 1 and value(refused[0], "PRIORITY") == "3"
    assert "cgroupDrvier" in (value(refused[0], "KCG_PROBLEMS") or "")
    wait(lambda: "reload refused" in show("StatusText")["StatusText"], "the refusal on the status line")
    assert running() and int(show("MainPID")["MainPID"]) == main_pid and len(events("started")) == 2
    write_atomically(PODS / "b.yaml", manifest("2", "192Mi"))  # still following its pods
    wait(lambda: b.read(POD, "memory.max") == str(192 * MI), "a manifest edit applied after the refusal")
    write_atomically(CONFIG, config(b, cpuCFSQuota=False))
    guestlib.systemctl("reload", UNIT)  # the settings it runs with: nothing restarts
    wait(lambda: "unchanged" in [value(e, "KCG_OUTCOME") for e in events("config.reload")], "the unchanged reload")
    wait(lambda: "reload refused" not in show("StatusText")["StatusText"], "the status line cleared")
    assert len(events("started")) == 2

    # --- daemon-reload: systemd puts the slices' properties back, which are the agent's -------------------
    guestlib.systemctl("daemon-reload")
    assert b.read(POD, "cpu.max").startswith("max ") and b.read(POD, "memory.max") == str(192 * MI)
    assert running() and int(show("MainPID")["MainPID"]) == main_pid

    # --- the watchdog has been fed: up longer than WatchdogSec, never restarted --------------------------
    time.sleep(max(0.0, WATCHDOG_S + 5 - (time.monotonic() - first_up)))
    props = show("MainPID", "NRestarts")
    assert int(props["MainPID"]) == main_pid and props["NRestarts"] == "0", props

    # --- restart: a new process, the state directory and the values kept --------------------------------
    kept = state_files()
    assert any(f.startswith("pods/") for f in kept), kept
    resumed = len(events("state.resumed"))  # one a start: the first, the reload's
    guestlib.systemctl("restart", "--no-block", UNIT)
    wait(lambda: running() and int(show("MainPID")["MainPID"]) not in (0, main_pid), "the restarted unit", START_S)
    assert kept <= state_files()
    wait(lambda: len(events("state.resumed")) == resumed + 1, "the new process resuming its state")
    assert int(value(events("state.resumed")[-1], "KCG_POD_RECORDS") or 0) >= 1
    assert b.read(POD, "cpu.max").startswith("max ") and b.read(POD, "memory.max") == str(192 * MI)
    assert show("NRestarts")["NRestarts"] == "0"  # a restart asked for is not a failure

    # --- the watchdog: a stopped agent is killed and restarted by systemd --------------------------------
    stopped_pid = int(show("MainPID")["MainPID"])
    os.kill(stopped_pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        wait(lambda: show("NRestarts")["NRestarts"] == "1", "the watchdog's restart", WATCHDOG_S + 60)
        elapsed = time.monotonic() - t0
        # its last ping was at most half a WatchdogSec before the stop: the timeout cannot come sooner
        assert WATCHDOG_S / 2 - 1 <= elapsed <= WATCHDOG_S + 45, elapsed
    finally:
        with suppress(ProcessLookupError):
            os.kill(stopped_pid, signal.SIGCONT)
    wait(lambda: running() and int(show("MainPID")["MainPID"]) not in (0, stopped_pid), "the unit back", START_S)
    messages = [value(e, "MESSAGE") or "" for e in journal()]
    assert any("Watchdog timeout" in m for m in messages), "systemd's own reason: the watchdog"
    assert any("Fatal Python error: Aborted" in m for m in messages), "the stacks of the aborted agent (faulthandler)"
    wait(lambda: b.read(POD, "memory.max") == str(192 * MI), "the values after the watchdog's restart")


def test_the_units_exposure_score(installed: GuestSystemdBackend, capsys: pytest.CaptureFixture[str]) -> None:
    out = guestlib.run(["systemd-analyze", "security", "--no-pager", UNIT]).stdout
    m = re.search(r"Overall exposure level for kube-cgroup-agent\.service: (\d+\.\d)", out)
    assert m is not None, out
    with capsys.disabled():
        print(f"\ne2e-v2: systemd-analyze security score {m.group(1)}")
    assert float(m.group(1)) <= EXPOSURE_MAX, out
