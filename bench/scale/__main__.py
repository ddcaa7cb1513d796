"""`make scale` (`python -m bench.scale [--quick]`): one run of the scale harness, its results in
bench/results/scale.json, its figure in BENCHMARKS.md ("At scale") and bench/results/scale.svg.

Env: SCALE_FACTORS (default 1,4,16; quick 1,4), SCALE_AGENTS (default 4,8,16; quick 2,4),
SCALE_QUIET_S, SCALE_WINDOW_S, SCALE_RATE (churn writes a second), SCALE_OUT (results file),
SCALE_REC_INTERVAL_S (the agents' recommenderInterval, default 20; the results scale it to the default),
RK_KIT (the kit, default /var/cache/realk8s), SCALE_RK (the harness's state, /var/cache/realk8s-scale).
Exit 2 when the kit is missing, 1 when the run failed, 0 otherwise (goals missed are printed, not an error).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import provenance
from bench.scale.controlplane import kit_missing

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def _ints(env: str, default: str) -> list[int]:
    return sorted({int(x) for x in os.environ.get(env, default).split(",") if x.strip()})


def options(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a smoke run of a few minutes (fewer agents, factors, windows)")
    p.add_argument("--out", default=os.environ.get("SCALE_OUT"), help="results file (default bench/results/scale.json)")
    p.add_argument("--no-report", action="store_true", help="do not rewrite BENCHMARKS.md")
    a = p.parse_args(argv)
    a.factors = _ints("SCALE_FACTORS", "1,2" if a.quick else "1,4,16")
    a.agents = _ints("SCALE_AGENTS", "2,3" if a.quick else "4,8,16")
    a.quiet_s = float(os.environ.get("SCALE_QUIET_S", "20" if a.quick else "180"))
    a.window_s = float(os.environ.get("SCALE_WINDOW_S", "20" if a.quick else "60"))
    a.rate = float(os.environ.get("SCALE_RATE", "60"))
    a.settle_s = 20.0 if a.quick else 90.0
    a.probes = 2 if a.quick else 6
    a.rec_interval_s = float(os.environ.get("SCALE_REC_INTERVAL_S", "20"))
    return a


def measure(a: argparse.Namespace, code_root: Path) -> dict[str, Any]:
    from bench.scale import phases, rollout, storage
    from bench.scale.harness import Harness, say
    from bench.scale.scenario import Base

    h = Harness(max(a.agents), Base(), max(a.factors), code_root, recommender_interval_s=a.rec_interval_s)
    out: dict[str, Any] = {"mode": "quick" if a.quick else "full", "factors": a.factors, "agent_counts": a.agents,
                           "base": Base().__dict__, "rate_per_s": a.rate}
    t0 = time.monotonic()
    try:
        h.setup()
        n0 = a.agents[0]
        say(f"starting {n0} agents and the keeper ...")
        out["ready_s"] = h.start_agents(n0)
        say(f"quiet: {a.quiet_s:.0f} s ...")
        out["quiet"] = phases.quiet(h, a.quiet_s)
        out["elsewhere"] = []
        prev = 0
        for f in a.factors:
            out["elsewhere"].append(phases.elsewhere_step(h, f, prev, a.rate, a.settle_s, out["quiet"]))
            prev = f
        out["agents"] = []
        probed: dict[tuple[str, str], int] = {}
        for n in a.agents:
            last = n == a.agents[-1]
            out["agents"].append(phases.agents_step(h, n, a.window_s, a.rate / 2, a.probes, a.settle_s, probed, last))
        out["steady"] = h.steady()
        out["recommender"] = h.recommender_info()
        out["storage"] = storage.measure(h)
        out["rollout"] = rollout.rollout_step(h, 120.0 + 15.0 * max(a.agents))
        out["timings"] = {k: round(v, 1) for k, v in h.timings.items()}
        out["kubelet_errors"] = (h.kubelets.errors if h.kubelets else [])[:5]
        out["reference_errors"] = (h.reference.errors if h.reference else [])[:5]
        out["log_warnings"] = h.log_summary()
    finally:
        say("stopping everything the harness started ...")
        h.stop()
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    missing = kit_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    a = options(argv)
    from bench.scale.code import export, use
    from bench.scale.controlplane import HOME

    code = export(HOME / "code", os.environ.get("SCALE_CODE", "head"))
    use(code)
    try:
        data = measure(a, code.root)
    except Exception:
        traceback.print_exc(file=sys.stderr)
        return 1
    from bench.scale import report

    data["_meta"] = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": provenance.machine(),
                     "command": "make scale" + (" SCALE_ARGS=--quick" if a.quick else ""),
                     "commit": code.label, "wall_s": data.get("wall_s"),
                     "code": "an export of HEAD" if code.root != ROOT else "the work tree"}
    data["commit"] = code.label
    data.update(report.analyse(data))
    out = Path(a.out) if a.out else RESULTS / "scale.json"
    out.write_text(json.dumps(data, indent=2) + "\n")
    report.write_svg(data, out.with_suffix(".svg"))
    print("\n".join(report.summary(data)))
    if not a.no_report and out.resolve() == (RESULTS / "scale.json").resolve():
        # in a process of its own: this one imported the measured export of HEAD, gone once measured
        subprocess.run([sys.executable, "-c", "from pathlib import Path; from bench.report import write_markdown; "
                        f"write_markdown(Path({str(RESULTS)!r}))"], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
