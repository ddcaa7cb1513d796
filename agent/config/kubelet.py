"""The kubelet's settings from the kubelet: a KubeletConfiguration file as the default source of its knobs.

Why: the agent must use the kubelet's cgroup driver, root, reservations and QoS settings, and an operator
who types them twice will one day type them differently. With `kubeletConfig` set (the DaemonSet mounts
the node's `/var/lib/kubelet/config.yaml` read-only), every key of `agent.config.keys.KUBELET_KEYS` that the
agent's own config and flags leave unset is taken from that file; one set explicitly wins, and a
disagreement is reported once (`Settings.kubelet_conflicts`), never silently resolved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.config.keys import KUBELET_KEYS, convert_key
from agent.config.settings import ConfigError, Settings, validate


def read_kubelet_config(path: Path) -> Mapping[str, Any]:
    """The KubeletConfiguration document at `path`; ConfigError with one line when it is not usable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError([f"kubeletConfig {path}: {err.strerror or err}"]) from err
    import yaml  # only with a kubeletConfig: most commands never parse YAML

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError([f"kubeletConfig {path} is not valid YAML: {str(err).splitlines()[0]}"]) from err
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise ConfigError([f"kubeletConfig {path} is not a KubeletConfiguration mapping"])
    kind = doc.get("kind")
    if kind not in (None, "KubeletConfiguration"):
        raise ConfigError([f"kubeletConfig {path} holds a {kind}, not a KubeletConfiguration"])
    return doc


def _shown(value: object) -> str:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(getattr(value, "value", value))


def inherit(settings: Settings) -> Settings:
    """`settings` with the kubelet's values for every kubelet key not set explicitly; pure but for the read."""
    if settings.kubelet_config is None:
        return settings
    path = settings.kubelet_config
    doc = read_kubelet_config(path)
    return merge_kubelet(settings, doc, str(path))


def merge_kubelet(settings: Settings, doc: Mapping[str, Any], source: str) -> Settings:
    changes: dict[str, Any] = {}
    inherited: dict[str, str] = {}
    conflicts: list[str] = []
    problems: list[str] = []
    for key in KUBELET_KEYS:
        if key not in doc or doc[key] is None:
            continue
        try:
            name, value = convert_key(key, doc[key])
        except ValueError as err:
            problems.append(f"kubeletConfig {source}: {key}: {err}")
            continue
        if key in settings.explicit:
            mine = getattr(settings, name)
            if mine != value:
                conflicts.append(
                    f"{key}: the agent's setting {_shown(mine)} wins over the kubelet's {_shown(value)} ({source})"
                )
            continue
        changes[name] = value
        inherited[key] = source
    if problems:
        raise ConfigError(problems)
    out = replace(settings, **changes, inherited=inherited, kubelet_conflicts=tuple(conflicts))
    problems = validate(out)
    if problems:
        raise ConfigError([f"{p} (with the kubelet's settings from {source})" for p in problems])
    return out
