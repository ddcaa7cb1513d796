"""The rollout's pre-pull against the real containerd (agent.cri.client ImageStatus/PullImage): the
wire format of the two ImageService calls of our proto subset is what containerd speaks. A present image
is reported present (and so never pulled again); an absent one is absent; a pull that cannot reach a
registry (this machine has none) is one typed error naming the call, not a crash."""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from pathlib import Path

import pytest

from agent.cri.client import CRIClient
from agent.cri.errors import CRIError
from agent.cri.v1 import api_pb2 as pb
from bench import provenance
from tests.e2e.conftest import SLOW_CALL, E2EEnv, Pod, PodRunner, resources
from tests.e2e.registry import Registry, address

pytestmark = pytest.mark.e2e


def test_image_status_and_pull_against_containerd(client: CRIClient, e2e_env: E2EEnv) -> None:
    assert client.image_present(e2e_env.image)
    missing = "registry.invalid/kcg/absent:1"
    assert not client.image_present(missing)
    with pytest.raises(CRIError) as err:
        client.pull_image(missing, timeout_s=30)
    assert "PullImage" in str(err.value)


def _replace(pods: PodRunner, pod: Pod, name: str, image: str, client: CRIClient, prepull: bool, attempt: int) -> float:
    """What the kubelet does when a running container's image changed — stop it, (pull), create, start —
    with the pull before the stop when `prepull` (the agent's rollout). Returns the seconds the container
    was down: from the stop's start to the new container started."""
    if prepull:
        client.pull_image(image, timeout_s=120)
    old = pod.containers[name]
    t0 = time.monotonic()
    pods.runtime.StopContainer(pb.StopContainerRequest(container_id=old, timeout=0), timeout=SLOW_CALL)
    if not client.image_present(image):
        client.pull_image(image, timeout_s=120)
    cconfig = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=attempt), image=pb.ImageSpec(image=image),
        command=["/bin/sleep", "1000000"], log_path=f"{name}-{attempt}.log",
        labels={**pod.config.labels, "io.kubernetes.container.name": name},
    )
    cid = pods.runtime.CreateContainer(
        pb.CreateContainerRequest(pod_sandbox_id=pod.sandbox_id, config=cconfig, sandbox_config=pod.config), timeout=SLOW_CALL
    ).container_id
    pods.runtime.StartContainer(pb.StartContainerRequest(container_id=cid), timeout=SLOW_CALL)
    down = time.monotonic() - t0
    pods.runtime.RemoveContainer(pb.RemoveContainerRequest(container_id=old), timeout=SLOW_CALL)
    pod.containers[name] = cid
    return down


def test_a_prepulled_image_shortens_the_containers_downtime(pods: PodRunner, client: CRIClient) -> None:
    """A sidecar's image replaced in a running pod, from a 32 MiB image on a local registry (each tag a
    distinct image, never present before): the container is down for stop + pull + create + start without
    the pre-pull, for stop + create + start with it. Figures: KCG_PREPULL_OUT names the JSON to write."""
    where = address()
    if where is None:
        pytest.skip("no local registry configured (make e2e configures one)")
    rounds = int(os.environ.get("KCG_PREPULL_ROUNDS", "3"))
    port = int(where.rsplit(":", 1)[1])
    got: dict[str, list[float]] = {"off": [], "on": []}
    with Registry(port) as registry:
        pod = pods.run({"app": resources(), "side": resources()}, name="prepull")
        app = pod.containers["app"]
        attempt = 0
        for i in range(rounds):
            for mode in ("off", "on"):
                image = f"{where}/kcg/side:{mode}-{i}-{uuid.uuid4().hex[:6]}"
                assert not client.image_present(image)
                attempt += 1  # the kubelet's restart count: a new container name each time
                got[mode].append(_replace(pods, pod, "side", image, client, mode == "on", attempt))
        assert pod.containers["app"] == app  # the other container was never touched
        assert len(registry.manifests) >= 2 * rounds
    off, on = statistics.median(got["off"]), statistics.median(got["on"])
    print(f"\nprepull: sidecar down {off * 1000:.0f} ms without the pre-pull, {on * 1000:.0f} ms with it (medians of {rounds})")
    assert off > 0 and on > 0
    if out := os.environ.get("KCG_PREPULL_OUT"):
        Path(out).write_text(json.dumps({
            "image_mib": registry.padding >> 20, "rounds": rounds, "down_s": got,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": provenance.current().label,
            "command": f"KCG_PREPULL_ROUNDS={rounds} PYTEST_ARGS='-k prepull' KCG_PREPULL_OUT=bench/results/prepull.json bash tests/e2e/run.sh",
        }, indent=2) + "\n")
