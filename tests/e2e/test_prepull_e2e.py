"""The rollout's pre-pull against the real containerd (agent.cri.client ImageStatus/PullImage): the
wire format of the two ImageService calls of our proto subset is what containerd speaks. A present image
is reported present (and so never pulled again); an absent one is absent; a pull that cannot reach a
registry (this machine has none) is one typed error naming the call, not a crash."""

from __future__ import annotations

import pytest

from agent.cri.client import CRIClient
from agent.cri.errors import CRIError
from tests.e2e.conftest import E2EEnv


def test_image_status_and_pull_against_containerd(client: CRIClient, e2e_env: E2EEnv) -> None:
    assert client.image_present(e2e_env.image)
    missing = "registry.invalid/kcg/absent:1"
    assert not client.image_present(missing)
    with pytest.raises(CRIError) as err:
        client.pull_image(missing, timeout_s=30)
    assert "PullImage" in str(err.value)
