"""What the CRI client tests share besides their fixtures (tests/cri/conftest.py): the pod UIDs the fake
runtime's sandboxes carry, and a sleep that records its delays, so the retry back-off is checked without
any time passing."""

from __future__ import annotations

UID = "4c3b2a19-0817-4f6e-9d5c-4b3a29180704"
OTHER_UID = "6f1c1a4e-0b7d-4f43-9a55-1d2e3f4a5b01"


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)
