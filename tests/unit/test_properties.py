"""Hypothesis properties of the pure core: conversions monotone and in range, systemd names round trip,
parse∘render is the identity for every file format, and a tree already at the desired values diffs empty."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.compute import ComputeConfig, compute_node
from agent.core.compute.cpu import MAX_SHARES, MIN_SHARES, milli_cpu_to_quota, milli_cpu_to_shares
from agent.core.diff import Observation, desired_files, diff
from agent.core.plan import build_plan
from cgroupfs import layout
from cgroupfs.convert import (
    hugepage_size_from_name,
    hugepage_size_name,
    parse_cpu_max,
    render_cpu_max,
    shares_to_weight_linear,
    shares_to_weight_quadratic,
)
from cgroupfs.layout import Hierarchy, RenderOptions
from cgroupfs.naming import expand_slice, parse_systemd, to_cgroupfs, to_systemd, to_systemd_unit
from cgroupfs.types import CgroupName, CgroupValues, DriverKind
from tests.unit.podbuild import ctr, pod, view

milli = st.integers(min_value=0, max_value=10_000_000)
shares = st.integers(min_value=0, max_value=1_000_000)


@given(milli, milli)
def test_shares_monotone_and_in_range(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    assert MIN_SHARES <= milli_cpu_to_shares(lo) <= milli_cpu_to_shares(hi) <= MAX_SHARES


@given(milli, milli, st.integers(min_value=1000, max_value=1_000_000))
def test_quota_monotone_and_at_least_1ms(a: int, b: int, period: int) -> None:
    lo, hi = sorted((a, b))
    qlo, qhi = milli_cpu_to_quota(lo, period), milli_cpu_to_quota(hi, period)
    assert qlo <= qhi
    if lo > 0:
        assert qlo >= 1000


@given(shares, shares)
def test_weights_monotone_and_in_range(a: int, b: int) -> None:
    lo, hi = sorted((max(a, 2), max(b, 2)))
    for f in (shares_to_weight_linear, shares_to_weight_quadratic):
        assert 1 <= f(lo) <= f(hi) <= 10000


component = st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True).filter(lambda s: "--" not in s)


@given(st.lists(component, min_size=1, max_size=5))
def test_systemd_name_round_trip(parts: list[str]) -> None:
    name = CgroupName(tuple(parts))
    path = to_systemd(name)
    assert parse_systemd(path) == name
    assert path.endswith(to_systemd_unit(name))
    assert expand_slice(to_systemd_unit(name)) == path
    assert to_cgroupfs(name) == "/".join(parts)


@given(
    st.one_of(st.just(-1), st.integers(min_value=1000, max_value=10**9)),
    st.integers(min_value=1000, max_value=1_000_000),
)
def test_cpu_max_parse_render_identity(quota: int, period: int) -> None:
    text = render_cpu_max(quota, period)
    assert render_cpu_max(*parse_cpu_max(text)) == text
    assert layout.canonical("cpu.max", text) == text


@given(st.integers(min_value=0, max_value=2**62))
def test_memory_canonical_is_idempotent_and_page_rounded(value: int) -> None:
    for name in ("memory.limit_in_bytes", "memory.max", "memory.low", "memory.soft_limit_in_bytes"):
        c = layout.canonical(name, str(value))
        assert layout.canonical(name, c) == c
        if c != "max":
            assert int(c) % 4096 == 0 and 0 <= value - int(c) < 4096


@given(st.sampled_from([64 * 1024, 2 * 1024**2, 32 * 1024**2, 1024**3, 16 * 1024**3]))
def test_hugepage_size_name_round_trip(size: int) -> None:
    assert hugepage_size_from_name(hugepage_size_name(size)) == size


HIERARCHIES = {
    "v1": Hierarchy(v1={"cpu": "cpu", "memory": "memory", "hugetlb": "hugetlb"}),
    "hybrid": Hierarchy(
        v1={"cpu": "cpu", "memory": "memory"}, unified="unified", unified_controllers=frozenset({"hugetlb"})
    ),
    "v2": Hierarchy(unified="", unified_controllers=frozenset({"cpu", "memory", "hugetlb"})),
}

quantities_cpu = st.sampled_from(["10m", "100m", "250m", "1", "1500m", "3"])
quantities_mem = st.sampled_from(["64Mi", "100M", "128Mi", "1Gi", "1000000001"])


@st.composite
def pods(draw: st.DrawFn) -> list[dict[str, object]]:
    out = []
    for i in range(draw(st.integers(min_value=0, max_value=5))):
        containers = []
        for j in range(draw(st.integers(min_value=1, max_value=3))):
            kind = draw(st.sampled_from(["none", "req", "lim", "both"]))
            req = (
                {"cpu": draw(quantities_cpu), "memory": draw(quantities_mem)}
                if kind in ("req", "both")
                else None
            )
            lim = (
                {"cpu": draw(quantities_cpu), "memory": draw(quantities_mem)}
                if kind in ("lim", "both")
                else None
            )
            if req and lim:
                req = {k: v for k, v in req.items() if k == "cpu"}  # keep requests <= limits simple: cpu only
                lim = {"cpu": "3", "memory": lim["memory"]}
            containers.append(ctr(f"c{j}", req=req, lim=lim))
        out.append(pod(f"p{i}", containers, uid=f"0000000{i}-aaaa-bbbb-cccc-dddddddddddd"))
    return out


@settings(max_examples=60, deadline=None)
@given(
    pods(),
    st.sampled_from(sorted(HIERARCHIES)),
    st.sampled_from(list(DriverKind)),
    st.sampled_from([None, 0, 50, 100]),
)
def test_a_tree_at_the_desired_values_diffs_empty(
    raws: list[dict[str, object]], mode: str, driver: DriverKind, pct: int | None
) -> None:
    from agent.core.model import Resources

    cfg = ComputeConfig(
        hugepage_sizes=(2 * 1024**2,),
        allocatable=Resources(8000, 32 * 1024**3),
        qos_reserved_memory_percent=pct,
    )
    comp = compute_node([view(r) for r in raws], cfg)
    files = desired_files(comp, HIERARCHIES[mode], RenderOptions(driver))
    observed = Observation(
        files={f.setting.path: f.setting.value + "\n" for f in files},
        dirs={f.setting.directory: True for f in files},
    )
    node = diff(comp, files, observed)
    assert node.changes == ()
    assert build_plan(node).steps == ()
    # and an empty tree differs everywhere
    empty = diff(comp, files, Observation({}, {}))
    assert len(empty.changes) == len(files)


pages = st.integers(min_value=1, max_value=2**28).map(lambda v: v * 4096)
values_strategy = st.builds(
    CgroupValues,
    cpu_shares=st.one_of(st.none(), st.integers(min_value=2, max_value=262144)),
    cpu_quota=st.one_of(st.none(), st.just(-1), st.integers(min_value=1000, max_value=10**8)),
    cpu_period=st.one_of(st.none(), st.integers(min_value=1000, max_value=1_000_000)),
    memory_limit=st.one_of(st.none(), st.just(-1), pages),
    memory_reservation=st.one_of(st.none(), pages),
    hugetlb=st.dictionaries(
        st.sampled_from([2 * 1024**2, 1024**3]),
        st.integers(min_value=0, max_value=1024).map(lambda v: v * 1024**3),
    ),
)


@given(values_strategy, st.sampled_from(sorted(HIERARCHIES)), st.sampled_from(list(DriverKind)))
def test_parse_after_render_is_the_identity_for_every_file(
    values: CgroupValues, mode: str, driver: DriverKind
) -> None:
    for s in layout.render(
        CgroupName(("kubepods", "pod1")), values, HIERARCHIES[mode], RenderOptions(driver)
    ):
        canon = layout.canonical(s.filename, s.value)
        assert layout.canonical(s.filename, canon) == canon
        if canon != "max":  # v1 writes -1 for unlimited; every other value reads back as written
            assert canon == s.value, (s.filename, s.value)
