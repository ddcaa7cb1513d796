"""The sampler with its counter files kept open gives, tick by tick, the samples the path-reading sampler
gave (the reference below is that sampler's tick, kept verbatim) — with the OOM-kill counter read every
tick; read every few ticks, the same samples with each OOM seen within that many ticks — and holds no
descriptor for a container that is gone."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent.core.compute.pod import pod_cgroup_name
from agent.core.model import QOSClass
from agent.pods.parse import parse_pod
from agent.recommender.counters import Counters, cpu_sample, observe, parse_v1, parse_v2
from agent.recommender.sampler import Sampler, Target, reader_for, targets
from agent.recommender.trace import Sample
from cgroupfs.files import CgroupFiles
from cgroupfs.naming import cgroup_dir
from cgroupfs.pinned import PinnedFiles
from cgroupfs.types import CgroupName
from tests.support.cgroup_tree import FakeCgroupTree

T0 = 1_764_000_000.0


@dataclass
class PathSampler:
    """The sampler before its files were kept open: one read_many pass of every file, then the text parsers."""

    reader: CgroupFiles
    starvation: bool = False
    throttle_threshold: float = 0.2
    _previous: dict[tuple[str, str, str], tuple[float, Counters]] = field(default_factory=dict)

    def tick(self, now: float, wanted: Sequence[Target]) -> tuple[list[Sample], list[Target]]:
        texts, _ = self.reader.read_many([p for t in wanted for _, p in t.files])
        samples: list[Sample] = []
        oomed: list[Target] = []
        seen: set[tuple[str, str, str]] = set()
        for t in wanted:
            files = {n: texts.get(p) for n, p in t.files}
            current = parse_v2(files) if t.v2 else parse_v1(files)
            key = (t.pod, t.container, t.container_id)
            seen.add(key)
            prev = self._previous.get(key)
            obs = observe(prev[1] if prev else None, current, now - prev[0] if prev else 0.0)
            self._previous[key] = (now, current)
            cpu = cpu_sample(obs, t.cpu_limit_cores, self.starvation, self.throttle_threshold)
            if cpu is not None or obs.working_set is not None:
                samples.append(Sample(now, t.pod, t.container, cpu=cpu, memory=obs.working_set))
            if obs.new_oom_kills:
                used = max(current.memory_peak or 0, obs.working_set or 0)
                samples.append(Sample(now, t.pod, t.container, memory=float(used), oom=True))
                oomed.append(t)
        for gone in set(self._previous) - seen:
            del self._previous[gone]
        return samples, oomed


def _uid(i: int) -> str:
    return f"0f0e0d0c-0000-4000-8000-{i:012d}"


def _pod(i: int) -> Any:
    cid = f"{i:02x}" * 32
    return parse_pod({
        "metadata": {"name": f"p{i}", "namespace": "ns", "uid": _uid(i)},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                               "limits": {"cpu": "500m"}}}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "app", "containerID": f"containerd://{cid}", "state": {"running": {}}, "restartCount": 0}]},
    })


def _values(mode: str, cpu_s: float, periods: int, throttled: int, mem: int, inactive: int, kills: int) -> dict[str, str]:
    if mode == "v1":
        return {"cpuacct.usage": f"{int(cpu_s * 1e9)}\n", "cpu.stat": f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time 5\n",
                "memory.usage_in_bytes": f"{mem}\n", "memory.stat": f"cache 1\ninactive_file 7\ntotal_inactive_file {inactive}\n",
                "memory.max_usage_in_bytes": f"{mem + 4096}\n", "memory.oom_control": f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n"}
    return {"cpu.stat": f"usage_usec {int(cpu_s * 1e6)}\nnr_periods {periods}\nnr_throttled {throttled}\n",
            "memory.current": f"{mem}\n", "memory.stat": f"anon 1\ninactive_file {inactive}\n",
            "memory.peak": f"{mem + 4096}\n", "memory.events": f"low 0\noom 1\noom_kill {kills}\n"}


# Per tick, per pod index: the counters (cpu s, periods, throttled, memory, inactive file, OOM kills); a pod
# left out is not running (its cgroup removed), and comes back with a fresh cgroup under the same path.
SCRIPT: list[dict[int, tuple[float, int, int, int, int, int]]] = [
    {0: (1.0, 10, 0, 300_000_000, 1_000_000, 0), 1: (5.0, 10, 0, 100_000_000, 0, 0), 2: (0.0, 0, 0, 5, 9, 0)},
    {0: (1.5, 20, 8, 310_000_000, 2_000_000, 0), 1: (5.1, 30, 1, 120_000_000, 0, 1), 2: (0.2, 3, 0, 5, 9, 0)},
    {0: (1.2, 25, 8, 305_000_000, 2_000_000, 0), 1: (5.2, 40, 9, 90_000_000, 100_000_000, 1)},  # 0 restarted
    {0: (1.9, 35, 9, 305_000_000, 2_000_000, 2), 1: (5.2, 40, 9, 90_000_000, 0, 1), 2: (0.0, 0, 0, 7, 0, 0)},
    {0: (2.4, 45, 19, 305_000_000, 2_000_000, 2), 1: (5.9, 60, 9, 90_000_000, 0, 1), 2: (0.3, 5, 5, 8, 0, 1)},
]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("mode", ["v1", "v2"])
@pytest.mark.parametrize("starvation", [False, True])
def test_samples_are_those_of_the_path_reads(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], mode: str, starvation: bool
) -> None:
    tree = fake_cgroup_tree(mode)
    pods = [_pod(i) for i in range(3)]
    root = CgroupName(())

    baseline = open_fds()
    new = Sampler(reader_for(tree.root, root, tree.driver, tree.hierarchy), starvation, oom_every=1, stat_every=1)
    old = PathSampler(reader_for(tree.root, root, tree.driver, tree.hierarchy), starvation)
    for n, step in enumerate(SCRIPT):
        for i in range(3):
            if i not in step:
                for leaf in _leaves(tree, pods, i):
                    if tree.path(leaf).exists():
                        tree.remove(leaf)
                continue
            _write(tree, pods, i, step[i])
        wanted = targets([pods[i] for i in sorted(step)], root, tree.driver, tree.hierarchy)
        now = T0 + 2.0 * n
        assert new.tick(now, wanted) == old.tick(now, wanted), f"tick {n}"
    assert open_fds() > baseline
    new.tick(T0 + 100, [])
    assert open_fds() == baseline
    new.close()


def stale_pread(fd: int, size: int, offset: int) -> bytes:
    """pread, but a file removed with its cgroup answers ENODEV, as kernfs answers an old descriptor."""
    if os.readlink(f"/proc/self/fd/{fd}").endswith(" (deleted)"):
        raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
    return os.pread(fd, size, offset)


@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_a_cgroup_recreated_under_a_running_target_is_read_anew_and_no_descriptor_leaks(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], mode: str
) -> None:
    """The sampler's kept descriptors: when their cgroup is removed and made again between two ticks (the
    container still a target), the old ones answer ENODEV, are closed and the new cgroup's files opened;
    the samples stay the path reads', and no descriptor is left behind."""
    tree = fake_cgroup_tree(mode)
    pods = [_pod(i) for i in range(2)]
    root = CgroupName(())

    baseline = open_fds()
    new = Sampler(reader_for(tree.root, root, tree.driver, tree.hierarchy), oom_every=1, stat_every=1)
    new._pinned = PinnedFiles(new.reader, budget=1000, pread=stale_pread)
    old = PathSampler(reader_for(tree.root, root, tree.driver, tree.hierarchy))
    wanted = targets(pods, root, tree.driver, tree.hierarchy)
    for n in range(5):
        if n == 3:  # pod 0's cgroup removed and made again under the same path
            for leaf in _leaves(tree, pods, 0):
                tree.remove(leaf)
        for i in range(2):
            _write(tree, pods, i, (1.0 + n / (4 if i == 0 and n < 3 else 2), 10 * n, n, 300_000_000 - n, 1000 * i, 0))
        now = T0 + 2.0 * n
        assert new.tick(now, wanted) == old.tick(now, wanted), f"tick {n}"
        assert open_fds() == baseline + new._pinned.open_count and len(new._pinned) == 6
    assert new._pinned.open_count == 8  # per container: the files of each tick, memory.stat, the OOM-kill counter
    new.close()
    assert open_fds() == baseline


def _leaves(tree: FakeCgroupTree, pods: list[Any], i: int) -> tuple[str, ...]:
    """Pod i's container directory in each hierarchy the sampler reads."""
    name = pod_cgroup_name(CgroupName(()), QOSClass.BURSTABLE, _uid(i))
    return tuple(f"{leaf}/{pods[i].statuses[0].container_id}"
                 for leaf in (f"{m}/{cgroup_dir(name, tree.driver)}".lstrip("/") for m in _mounts(tree)))


def _write(tree: FakeCgroupTree, pods: list[Any], i: int, values: tuple[float, int, int, int, int, int]) -> None:
    """Pod i's container cgroup made, its counter files holding `values` (see `_values`)."""
    name = pod_cgroup_name(CgroupName(()), QOSClass.BURSTABLE, _uid(i))
    tree.create(f"{cgroup_dir(name, tree.driver)}/{pods[i].statuses[0].container_id}")
    for leaf in _leaves(tree, pods, i):
        for file, text in _values(tree.mode, *values).items():
            if tree.mode == "v2" or file.split(".")[0] in leaf.split("/")[0].split(","):
                tree.path(f"{leaf}/{file}").write_text(text)


def _mounts(tree: FakeCgroupTree) -> list[str]:
    h = tree.hierarchy
    if tree.mode == "v2":
        return [h.unified or ""]
    return sorted({h.v1[c] for c in ("cpu", "cpuacct", "memory")})


@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_an_oom_kill_read_every_few_ticks_is_seen_within_them_and_never_lost(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], mode: str
) -> None:
    tree = fake_cgroup_tree(mode)
    pod, root, every = _pod(0), CgroupName(()), 3
    name = pod_cgroup_name(root, QOSClass.BURSTABLE, pod.uid)
    leaves = tree.create(f"{cgroup_dir(name, tree.driver)}/{pod.statuses[0].container_id}")
    new = Sampler(reader_for(tree.root, root, tree.driver, tree.hierarchy), oom_every=every)
    old = PathSampler(reader_for(tree.root, root, tree.driver, tree.hierarchy))
    wanted = targets([pod], root, tree.driver, tree.hierarchy)
    kills_at = {2: 1, 6: 3}  # tick -> the counter from then on (two kills at once at tick 6)
    seen: dict[str, list[int]] = {"new": [], "old": []}
    kills = 0
    for n in range(12):
        kills = kills_at.get(n, kills)
        for leaf in leaves:
            for file, text in _values(mode, 1.0 + n, 10 * n, 0, 300_000_000 + n, 1_000, kills).items():
                if mode == "v2" or file.split(".")[0] in leaf.split("/")[0].split(","):
                    tree.path(f"{leaf}/{file}").write_text(text)
        got = {"new": new.tick(T0 + n, wanted)[0], "old": old.tick(T0 + n, wanted)[0]}
        usage = [s for s in got["old"] if not s.oom]
        assert [s for s in got["new"] if not s.oom] == usage, f"tick {n}"
        for who, samples in got.items():
            for s in samples:
                if s.oom:
                    assert s.memory is not None and s.memory >= 300_000_000 + n  # the peak, not a guess
                    seen[who].append(n)
    assert seen["old"] == [2, 6]
    assert len(seen["new"]) == 2
    assert all(o <= m < o + every for o, m in zip(seen["old"], seen["new"], strict=True)), seen
    new.close()


def test_descriptors_follow_the_targets(fake_cgroup_tree: Callable[..., FakeCgroupTree]) -> None:
    tree = fake_cgroup_tree("v1")
    pods = [_pod(i) for i in range(6)]
    root = CgroupName(())
    for p in pods:
        name = pod_cgroup_name(root, QOSClass.BURSTABLE, p.uid)
        for leaf in tree.create(f"{cgroup_dir(name, tree.driver)}/{p.statuses[0].container_id}"):
            for file, text in _values("v1", 1.0, 1, 0, 5, 0, 0).items():
                if file.split(".")[0] == leaf.split("/")[0]:
                    tree.path(f"{leaf}/{file}").write_text(text)
    all_targets = targets(pods, root, tree.driver, tree.hierarchy)
    baseline = open_fds()
    sampler = Sampler(reader_for(tree.root, root, tree.driver, tree.hierarchy))
    sampler.tick(T0, all_targets)
    per_container = (open_fds() - baseline) // len(all_targets)
    assert per_container == 4  # cpuacct.usage, memory.usage_in_bytes; memory.stat; memory.oom_control
    sampler.tick(T0 + 1, all_targets[:2])
    assert open_fds() == baseline + 2 * per_container
    sampler.tick(T0 + 2, all_targets)
    sampler.close()
    assert open_fds() == baseline


@pytest.mark.parametrize("mode", ["v1", "v2"])
def test_memory_stat_read_every_few_ticks_and_at_once_when_the_usage_falls_below_it(
    fake_cgroup_tree: Callable[..., FakeCgroupTree], mode: str
) -> None:
    """The usage is read every tick, the inactive file pages (memory.stat) every `stat_every` ticks: a
    working set is the usage of its tick less the pages of the last memory.stat read. A usage below those
    pages (they were freed with it) reads memory.stat again at once rather than report a working set of 0."""
    tree = fake_cgroup_tree(mode)
    pod, root, every = _pod(0), CgroupName(()), 3
    name = pod_cgroup_name(root, QOSClass.BURSTABLE, pod.uid)
    leaves = tree.create(f"{cgroup_dir(name, tree.driver)}/{pod.statuses[0].container_id}")
    new = Sampler(reader_for(tree.root, root, tree.driver, tree.hierarchy), stat_every=every)
    wanted = targets([pod], root, tree.driver, tree.hierarchy)
    # per tick: (usage, inactive file pages); at tick 7 the usage falls below the pages last read
    script = [(300, 10), (301, 11), (302, 12), (303, 13), (304, 14), (305, 15), (306, 16), (5, 1), (8, 2), (9, 3)]
    got = []
    for n, (usage, inactive) in enumerate(script):
        for leaf in leaves:
            for file, text in _values(mode, 1.0 + n, 10 * n, 0, usage * 1000, inactive * 1000, 0).items():
                if mode == "v2" or file.split(".")[0] in leaf.split("/")[0].split(","):
                    tree.path(f"{leaf}/{file}").write_text(text)
        [sample] = new.tick(T0 + n, wanted)[0]
        got.append(int(sample.memory or 0) // 1000)
    # memory.stat read at tick 0, then (one container: spread to 1 + 1 % 3) at 2, 5; at 7 at once (5 < 15), then 10
    assert got == [300 - 10, 301 - 10, 302 - 12, 303 - 12, 304 - 12, 305 - 15, 306 - 15, 5 - 1, 8 - 1, 9 - 1]
    new.close()
