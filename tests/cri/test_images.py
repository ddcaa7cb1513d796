"""ImageStatus and PullImage through the real client and a real gRPC server (the fake runtime): a present
image is seen, an absent one is pulled, a runtime error is a typed error naming the call."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from agent.cri.client import CRIClient
from agent.cri.errors import CRIError
from tests.support.fake_cri.serving import running_fake_cri


def test_status_then_pull(tmp_path: Path) -> None:
    with running_fake_cri(tmp_path) as cri, CRIClient(cri.endpoint) as client:
        assert not client.image_present("registry.local/app:2")
        ref = client.pull_image("registry.local/app:2")
        assert ref.startswith("sha256:") and client.image_present("registry.local/app:2")
        assert [c.request["image"]["image"] for c in cri.service.calls_of("PullImage")] == ["registry.local/app:2"]
        cri.service.errors["PullImage"] = [(grpc.StatusCode.UNKNOWN, "failed to pull and unpack image: 401 Unauthorized")]
        with pytest.raises(CRIError) as err:
            client.pull_image("registry.local/private:1")
        assert "PullImage" in str(err.value) and "401" in str(err.value)
