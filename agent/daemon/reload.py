"""SIGHUP (`systemctl reload`): read the settings again as the command line read them, judge them, and
when they are new, end the daemon as at SIGTERM and execute the same command line in the same process
(agent.daemon's docstring says why a re-exec)."""

from __future__ import annotations

import enum
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields

from agent.config.settings import ConfigError, Settings
from agent.daemon.supervisor import Supervisor
from agent.infra.errors import user_message
from agent.infra.logging import get_logger

log = get_logger("agent.daemon")


class Ending(enum.Enum):
    STOPPED = "stopped"  # SIGTERM: exit
    RELOAD = "reload"  # SIGHUP with new valid settings: execute the command line again


@dataclass(frozen=True, slots=True)
class Reloader:
    """How SIGHUP reads the settings again: the command line's own way (its config file, its flags)."""

    config: str | None  # the file, for the log line
    load: Callable[[], Settings]


@dataclass(frozen=True, slots=True)
class Verdict:
    settings: Settings | None  # None: refused or unchanged
    problems: tuple[str, ...] = ()  # why it was refused
    changed: tuple[str, ...] = ()  # the settings that differ (their field names)


def changed_settings(old: Settings, new: Settings) -> tuple[str, ...]:
    return tuple(f.name for f in fields(Settings) if getattr(old, f.name) != getattr(new, f.name))


def judge(current: Settings, load: Callable[[], Settings], check: Callable[[Settings], list[str]]) -> Verdict:
    """Read the settings again and judge them: refused (invalid, or the daemon could not start with
    them: `check`'s problems), unchanged, or new. Never raises: a reload must not end the daemon."""
    try:
        new = load()
    except ConfigError as err:
        return Verdict(None, tuple(err.problems))
    except Exception as err:  # whatever reading them raised, the running daemon goes on
        return Verdict(None, (user_message(err) or f"{type(err).__name__}: {err}",))
    problems = check(new)
    if problems:
        return Verdict(None, tuple(problems))
    changed = changed_settings(current, new)
    return Verdict(new if changed else None, (), changed)


def _wanted_reload(
    requested: threading.Event, reloader: Reloader | None, current: Settings, supervisor: Supervisor,
    check: Callable[[Settings], list[str]],
) -> bool:
    """After SIGHUP: whether to restart with new settings (the verdict logged in one line)."""
    if not requested.is_set():
        return False
    requested.clear()
    if reloader is None:
        log.warning("config.reload_unavailable", message="SIGHUP ignored: this daemon was not started from a command line")
        return False
    verdict = judge(current, reloader.load, check)
    if verdict.problems:
        log.error(
            "config.reload_refused",
            config=reloader.config,
            problems=list(verdict.problems),
            message="the configuration was not reloaded: the daemon goes on with the settings it started with",
        )
        supervisor.note = f"reload refused: {verdict.problems[0]}"
        return False
    supervisor.note = None
    if verdict.settings is None:
        log.info("config.reload", config=reloader.config, outcome="unchanged")
        return False
    log.info("config.reload", config=reloader.config, outcome="restarting", changed=list(verdict.changed))
    return True


def exec_self() -> None:
    """Execute this process's own command line again (same PID, same environment and working directory);
    raises OSError when the exec failed, never returns otherwise."""
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def reexec_now(supervisor: Supervisor, reexec: Callable[[], None]) -> int:
    """After a reload's shutdown: execute the command line again; 1 when that failed."""
    supervisor.ping()  # the watchdog runs through a reload: the new process gets a whole interval
    # a second SIGHUP before the new process has its handler must not end it (an ignored signal stays
    # ignored across exec; the new process's handler replaces that)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log.info("reload.exec", argv=[sys.executable, *sys.orig_argv[1:]])
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        reexec()
    except OSError as err:
        log.error(
            "reload.exec_failed",
            error=user_message(err),
            message="the daemon could not start itself again: it exits 1 (its service manager restarts it)",
        )
    return 1


@dataclass(frozen=True, slots=True)
class Reloads:
    requested: threading.Event  # set by SIGHUP
    reloader: Reloader | None
    current: Settings  # as the command line gave them (before the Node's allocatable is added)
    check: Callable[[Settings], list[str]]  # the daemon's checks of settings (agent.daemon.check_settings)

    def wanted(self, supervisor: Supervisor) -> bool:
        return _wanted_reload(self.requested, self.reloader, self.current, supervisor, self.check)
