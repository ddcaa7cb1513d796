"""`kube-cgroup-agent` command line: wiring only. Bad input ends in one clear line and exit code 2,
never a traceback. Heavy modules (kubernetes, grpc) are imported only by the commands that need them."""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from agent.commands import dryrun
from agent.commands.arguments import COMMAND_ARGS, build_settings, parser
from agent.commands.dryrun import EXIT_ERROR, EXIT_OK

OOM_SCORE_ADJ = Path("/proc/self/oom_score_adj")
# Commands that build the node's state once, show or apply it, and exit: what they allocate lives until the
# end, so the cyclic garbage collector only scans it again and again (some 230 passes, a tenth of a 1,000-pod
# `diff`). Reference counting still frees what they drop.
ONE_PASS = frozenset({"diff", "plan", "explain", "apply"})
DAEMONS = frozenset({"run", "vpa-admission"})  # long-running: they keep their own OOM score
_T = TypeVar("_T")


def yield_memory_to_the_daemon(path: Path = OOM_SCORE_ADJ) -> bool:
    """Make this process the kernel's first choice when memory runs out.

    Why: `kubectl exec` into the agent's pod runs a command in the daemon's own memory cgroup; at the pod's
    limit the kernel kills the task with the highest badness, which would be the daemon (the larger RSS).
    Raising one's own OOM score needs no privilege. False where /proc refuses it (best effort)."""
    try:
        path.write_text("1000")
    except OSError:
        return False
    return True


def _cmd_apply(args: argparse.Namespace) -> int:
    from agent.commands.apply import apply_once

    code: int = apply_once(build_settings(args), args.output)
    return code


def _cmd_check(args: argparse.Namespace) -> int:
    from agent.commands.check import run_check

    settings = build_settings(args)
    code: int = run_check(
        settings, str(settings.kubelet_config) if settings.kubelet_config else None, args.output
    )
    return code


def _cmd_recommend(args: argparse.Namespace) -> int:
    settings = build_settings(args)
    if args.record:
        from agent.commands.recommend import record

        return record(settings, Path(args.record), args.duration)
    from agent.commands.recommend import run

    return run(settings.recommender, settings.state_dir, args.samples, args.now, args.output)


def _cmd_rollout(args: argparse.Namespace) -> int:
    from agent.commands.rollout import run
    from agent.config.settings import Settings, load_file

    settings = load_file(Path(args.config)) if args.config else Settings()
    return run(
        args.target, args.namespace, args.kubeconfig or settings.kubeconfig, settings.rollout, args.output
    )


def _cmd_vpa_admission(args: argparse.Namespace) -> int:
    from agent.infra.lean import without_optional_imports

    without_optional_imports()
    from agent.commands.admission import run_keeper
    from agent.commands.dryrun import UsageError
    from agent.config.settings import Settings, load_file
    from agent.config.values import parse_bind_address
    from agent.infra.configsection import as_seconds

    def flag(name: str, parse: Callable[[str], _T], value: str) -> _T:
        try:
            return parse(value)
        except ValueError as err:
            raise UsageError(f"--{name}: {err}") from err

    settings = load_file(Path(args.config)) if args.config else Settings()
    return run_keeper(
        args.kubeconfig or settings.kubeconfig,
        settings.vpa.options(),
        flag("resync-period", lambda v: as_seconds(v, "60s", allow_zero=False), args.resync_period),
        args.log_format,
        args.log_level,
        flag("metrics-bind-address", parse_bind_address, args.metrics_bind_address),
        flag("health-bind-address", parse_bind_address, args.health_bind_address),
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from agent.infra.lean import without_optional_imports

    without_optional_imports()
    from agent.daemon import Reloader, run

    # SIGHUP (`systemctl reload`) reads the settings again the way this command line did
    return run(build_settings(args), Reloader(args.config, lambda: build_settings(args)))


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "diff": dryrun.diff,
    "plan": dryrun.plan,
    "explain": dryrun.explain,
    "apply": _cmd_apply,
    "check": _cmd_check,
    "recommend": _cmd_recommend,
    "rollout": _cmd_rollout,
    "vpa-admission": _cmd_vpa_admission,
    "run": _cmd_run,
}


def main(argv: Sequence[str] | None = None) -> int:
    # gRPC's core logs a runtime's GOAWAY (its server stopping) at INFO on stderr, a line that is not the
    # daemon's JSON; the agent reports the CRI error itself. Set before grpc is first imported; the
    # environment still wins (GRPC_VERBOSITY=INFO to debug the transport).
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    words = sys.argv[1:] if argv is None else list(argv)
    named = (
        words[0] if words and words[0] in COMMAND_ARGS else None
    )  # else the whole parser says what is wrong
    args = parser(named).parse_args(words)
    if argv is None and args.command not in DAEMONS:  # a command line, not code that owns the process
        yield_memory_to_the_daemon()
        if args.command in ONE_PASS:
            gc.disable()
    if args.command == "version":
        from agent.infra.version import describe

        print(describe())
        return EXIT_OK
    from agent.infra.errors import user_message

    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # one clear line, never a traceback
        message = user_message(err)
        if message is None:
            raise
        print(f"kube-cgroup-agent: {message}", file=sys.stderr)
        return EXIT_ERROR


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
