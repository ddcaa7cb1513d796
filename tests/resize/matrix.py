"""Seed 000's E2E test matrix as data: (case id, initial containers, successive resizes).

Each resize maps a container name to its new resources {"requests": .., "limits": ..}. Every case goes
up and comes back down (seed 000: "Increase, decrease ...")."""

from __future__ import annotations

from typing import Any

R = dict[str, Any]


def g(cpu: str, mem: str) -> R:
    """Guaranteed resources: requests default to the limits."""
    return {"limits": {"cpu": cpu, "memory": mem}}


def b(rc: str | None = None, rm: str | None = None, lc: str | None = None, lm: str | None = None) -> R:
    req = {k: v for k, v in (("cpu", rc), ("memory", rm)) if v is not None}
    lim = {k: v for k, v in (("cpu", lc), ("memory", lm)) if v is not None}
    out: R = {}
    if req:
        out["requests"] = req
    if lim:
        out["limits"] = lim
    return out


Case = tuple[str, dict[str, R], list[dict[str, R]]]

G1 = {"app": g("500m", "256Mi")}
GUARANTEED_ONE: list[Case] = [
    ("guaranteed-cpu", G1, [{"app": g("1", "256Mi")}, {"app": g("500m", "256Mi")}]),
    ("guaranteed-memory", G1, [{"app": g("500m", "512Mi")}, {"app": g("500m", "256Mi")}]),
    ("guaranteed-cpu-memory", G1, [{"app": g("1", "512Mi")}, {"app": g("500m", "256Mi")}]),
    ("guaranteed-cpu-up-memory-down", G1, [{"app": g("1", "128Mi")}]),
    ("guaranteed-cpu-down-memory-up", G1, [{"app": g("250m", "512Mi")}]),
]

B0 = b("250m", "128Mi", "500m", "256Mi")
BURSTABLE: list[Case] = [
    ("burstable-req-cpu", {"app": B0}, [{"app": b("400m", "128Mi", "500m", "256Mi")}, {"app": B0}]),
    ("burstable-req-memory", {"app": B0}, [{"app": b("250m", "200Mi", "500m", "256Mi")}, {"app": B0}]),
    ("burstable-req-both", {"app": B0}, [{"app": b("400m", "200Mi", "500m", "256Mi")}, {"app": B0}]),
    ("burstable-lim-cpu", {"app": B0}, [{"app": b("250m", "128Mi", "1", "256Mi")}, {"app": B0}]),
    ("burstable-lim-memory", {"app": B0}, [{"app": b("250m", "128Mi", "500m", "512Mi")}, {"app": B0}]),
    ("burstable-lim-both", {"app": B0}, [{"app": b("250m", "128Mi", "1", "512Mi")}, {"app": B0}]),
    ("burstable-reqlim-cpu", {"app": B0}, [{"app": b("500m", "128Mi", "1", "256Mi")}, {"app": B0}]),
    ("burstable-reqlim-memory", {"app": B0}, [{"app": b("250m", "256Mi", "500m", "512Mi")}, {"app": B0}]),
    ("burstable-reqlim-both", {"app": B0}, [{"app": b("500m", "256Mi", "1", "512Mi")}, {"app": B0}]),
    ("burstable-cpu-up-memory-down", {"app": B0}, [{"app": b("500m", "64Mi", "1", "128Mi")}]),
    ("burstable-cpu-down-memory-up", {"app": B0}, [{"app": b("100m", "256Mi", "200m", "512Mi")}]),
    ("burstable-cpu-req-up-lim-down", {"app": B0}, [{"app": b("300m", "128Mi", "400m", "256Mi")}]),
    ("burstable-cpu-req-down-lim-up", {"app": B0}, [{"app": b("100m", "128Mi", "1", "256Mi")}]),
    ("burstable-mem-req-up-lim-down", {"app": B0}, [{"app": b("250m", "160Mi", "500m", "200Mi")}]),
    ("burstable-mem-req-down-lim-up", {"app": B0}, [{"app": b("250m", "64Mi", "500m", "512Mi")}]),
    ("burstable-both-req-up-lim-down", {"app": B0}, [{"app": b("300m", "160Mi", "400m", "200Mi")}]),
    ("burstable-both-req-down-lim-up", {"app": B0}, [{"app": b("100m", "64Mi", "1", "512Mi")}]),
]

BC = b("250m", None, "500m", None)
BM = b(None, "128Mi", None, "256Mi")
CPU_ONLY: list[Case] = [
    ("cpu-only-requests", {"app": BC}, [{"app": b("400m", None, "500m", None)}, {"app": BC}]),
    ("cpu-only-limits", {"app": BC}, [{"app": b("250m", None, "1", None)}, {"app": BC}]),
    ("cpu-only-both", {"app": BC}, [{"app": b("500m", None, "1", None)}, {"app": BC}]),
]
MEMORY_ONLY: list[Case] = [
    ("memory-only-requests", {"app": BM}, [{"app": b(None, "200Mi", None, "256Mi")}, {"app": BM}]),
    ("memory-only-limits", {"app": BM}, [{"app": b(None, "128Mi", None, "512Mi")}, {"app": BM}]),
    ("memory-only-both", {"app": BM}, [{"app": b(None, "256Mi", None, "512Mi")}, {"app": BM}]),
]

G3 = {"c1": g("300m", "128Mi"), "c2": g("300m", "128Mi"), "c3": g("300m", "128Mi")}
THREE: list[Case] = [
    ("three-increase-all", G3, [{n: g("500m", "256Mi") for n in G3}]),
    ("three-decrease-all", G3, [{n: g("200m", "64Mi") for n in G3}]),
    ("three-cpu-up-memory-down", G3, [{n: g("500m", "64Mi") for n in G3}]),
    ("three-cpu-down-memory-up", G3, [{n: g("200m", "256Mi") for n in G3}]),
    ("three-cpu-no-net", G3, [{"c1": g("400m", "128Mi"), "c2": g("200m", "128Mi")}]),
    ("three-memory-no-net", G3, [{"c1": g("300m", "192Mi"), "c2": g("300m", "64Mi")}]),
    (
        "three-cpu-net-decrease",
        G3,
        [{"c1": g("400m", "128Mi"), "c2": g("200m", "128Mi"), "c3": g("200m", "128Mi")}],
    ),
    (
        "three-memory-net-decrease",
        G3,
        [{"c1": g("300m", "192Mi"), "c2": g("300m", "64Mi"), "c3": g("300m", "64Mi")}],
    ),
    (
        "three-cpu-net-increase",
        G3,
        [{"c1": g("400m", "128Mi"), "c2": g("200m", "128Mi"), "c3": g("400m", "128Mi")}],
    ),
    (
        "three-memory-net-increase",
        G3,
        [{"c1": g("300m", "192Mi"), "c2": g("300m", "64Mi"), "c3": g("300m", "192Mi")}],
    ),
]

MATRIX: list[Case] = [*GUARANTEED_ONE, *BURSTABLE, *CPU_ONLY, *MEMORY_ONLY, *THREE]
