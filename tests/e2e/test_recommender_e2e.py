"""The recommender on real containers (containerd + runc, this kernel's v1 files): a container burning half a
core and holding 150 MiB gets, within seconds, a target within one bucket of that usage; a container that
keeps getting OOM-killed gets its memory target bumped."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent.recommender.config import RecommenderSettings
from agent.recommender.counters import V1_FILES
from agent.recommender.estimate import recommend
from agent.recommender.sampler import Sampler, Target
from agent.recommender.state import RecommenderState
from cgroupfs.files import CgroupFiles
from tests.e2e.conftest import E2EEnv, Kernel, PodRunner, resources

pytestmark = pytest.mark.e2e
MI = 2**20
# tail keeps all it reads (no newline) and, the pipe held open by sleep, never reaches EOF: 150 MiB held
HOLD = "(head -c 150m /dev/zero; sleep 1000000) | tail & sleep 1; "
BURN = "while :; do :; done"
OOM_LOOP = "while :; do head -c 200m /dev/zero | tail; sleep 0.5; done"


def _target(kernel: Kernel, cgroup: str, pod: str, name: str, cid: str) -> Target:
    files = []
    for controller, names in V1_FILES.items():
        mount, _ = kernel.mounts[controller]
        rel = str(Path(mount).relative_to("/sys/fs/cgroup"))
        files.extend((n, f"{rel}{cgroup}/{n}") for n in names)
    return Target(pod, name, cid, tuple(files), False, None, None)


def _reader(kernel: Kernel, env: E2EEnv) -> CgroupFiles:
    roots = {str(Path(kernel.mounts[c][0]).relative_to("/sys/fs/cgroup")) + env.cgroup_root for c in V1_FILES}
    return CgroupFiles(Path("/sys/fs/cgroup"), sorted(roots))


def _sample_for(state: RecommenderState, sampler: Sampler, targets: list[Target], seconds: float) -> None:
    end = time.monotonic() + seconds  # how long to sample: a bound, not an assertion on speed
    while time.monotonic() < end:
        samples, _ = sampler.tick(time.time(), targets)
        state.observe_all(samples)
        time.sleep(1.0)


def test_usage_caused_by_a_real_container_is_recommended_within_a_bucket(
    pods: PodRunner, kernel: Kernel, e2e_env: E2EEnv
) -> None:
    pod = pods.run({"app": resources(period=100_000, quota=50_000, memory=512 * MI)},
                   command=("/bin/sh", "-c", HOLD + BURN))
    cid = pod.containers["app"]
    target = _target(kernel, pod.container_cgroup("app"), "e2e/pod", "app", cid)
    settings = RecommenderSettings()
    state = RecommenderState(settings)
    sampler = Sampler(_reader(kernel, e2e_env))
    deadline = time.monotonic() + 60  # the holder fills its memory first (a bound on the wait, not a timing check)
    while kernel.read_int("memory", pod.container_cgroup("app"), "memory.usage_in_bytes") < 140 * MI:
        assert time.monotonic() < deadline, "the container never held its 150 MiB"
        time.sleep(0.5)
    _sample_for(state, sampler, [target], 8.0)
    h = state.histories[("e2e/pod", "app")]
    assert h.samples >= 4 and sampler.reader.writes == 0
    opts = settings.cpu_options
    # the quota holds it at 0.5 cores: p90's bucket is that of 0.5 cores, give or take one
    p90 = h.cpu.percentile(0.9)
    assert abs(opts.find_bucket(p90 * 0.999) - opts.find_bucket(0.5)) <= 1, p90
    ws = kernel.read_int("memory", pod.container_cgroup("app"), "memory.usage_in_bytes")
    mem_p90 = h.memory.percentile(0.9)
    mopts = settings.memory_options
    assert ws > 150 * MI * 0.9
    assert abs(mopts.find_bucket(mem_p90 * 0.999) - mopts.find_bucket(ws)) <= 1, (mem_p90, ws)
    r = recommend(h, settings, 1)
    assert r.target.cpu_milli == int(p90 * 1000) + int(int(p90 * 1000) * 0.15)


def test_a_real_oom_kill_bumps_the_memory_target(pods: PodRunner, kernel: Kernel, e2e_env: E2EEnv) -> None:
    pod = pods.run({"app": resources(memory=64 * MI)}, command=("/bin/sh", "-c", OOM_LOOP))
    cid = pod.containers["app"]
    target = _target(kernel, pod.container_cgroup("app"), "e2e/oom", "app", cid)
    settings = RecommenderSettings()
    state = RecommenderState(settings)
    sampler = Sampler(_reader(kernel, e2e_env))
    oomed = []
    end = time.monotonic() + 20
    while time.monotonic() < end and not oomed:
        samples, kills = sampler.tick(time.time(), [target])
        state.observe_all(samples)
        oomed.extend(kills)
        time.sleep(0.5)
    assert oomed, "the kernel never reported an OOM kill for the container"
    h = state.histories[("e2e/oom", "app")]
    assert h.ooms >= 1
    # the OOM sample is at least the used memory plus 100 MiB, and the used memory is near the 64 MiB limit
    assert h.oom_peak >= 100 * MI + 32 * MI
    assert recommend(h, settings, 1).target.memory > 64 * MI + 100 * MI
