"""The `vpa:` and `rollout:` config sections (agent.infra.configsection's frame): each key, each bad value named
as `section.key: why`, every problem of a section reported at once."""

from __future__ import annotations

import pytest

from agent.rollout.config import RolloutSettings, parse_rollout_settings
from agent.vpa.config import VPASettings, parse_vpa_settings


def test_vpa_keys() -> None:
    got = parse_vpa_settings({"enabled": True, "actuate": "all", "treatRecreateAsInPlace": True,
                              "podLifetimeThreshold": "1h", "minChange": 0.2, "memoryUsageMargin": 0})
    assert got == VPASettings(True, True, True, 3600.0, 0.2, 0.0)
    assert parse_vpa_settings(None) == VPASettings()
    assert parse_vpa_settings({"podLifetimeThreshold": 0}).pod_lifetime_s == 0.0  # zero allowed: at once
    react = parse_vpa_settings({"react": {"cpuStarvation": False, "oom": True}})
    assert (react.react_cpu_starvation, react.react_oom) == (False, True)
    assert parse_vpa_settings({"react": {"oom": False}}).react_cpu_starvation is VPASettings().react_cpu_starvation


def test_rollout_keys() -> None:
    got = parse_rollout_settings({"enabled": True, "metadataInPlace": True, "resourcesInPlace": True,
                                  "readyTimeout": "90s", "allowWithoutAdmissionPolicy": True})
    assert got == RolloutSettings(True, True, True, 90.0, True)
    assert parse_rollout_settings({"readyTimeout": 30}).ready_timeout_s == 30.0


@pytest.mark.parametrize(
    ("parse", "raw", "message"),
    [
        (parse_vpa_settings, ["x"], "vpa must be a map of settings"),
        (parse_vpa_settings, {"enabled": "yes"}, "vpa.enabled: 'yes' is not true or false"),
        (parse_vpa_settings, {"actuate": "some"}, "vpa.actuate: 'some' is not opted-in or all"),
        (parse_vpa_settings, {"podLifetimeThreshold": -1}, "vpa.podLifetimeThreshold: -1 is not a duration like 12h"),
        (parse_vpa_settings, {"podLifetimeThreshold": True}, "vpa.podLifetimeThreshold: True is not a duration like 12h"),
        (parse_vpa_settings, {"minChange": 11}, "vpa.minChange: 11 is not a fraction like 0.1"),
        (parse_vpa_settings, {"react": True}, "vpa.react: must be a map like {cpuStarvation: true, oom: true}"),
        (parse_vpa_settings, {"react": {"oom": "on"}}, "vpa.react: oom: 'on' is not true or false"),
        (parse_vpa_settings, {"react": {"memory": True}}, "vpa.react: unknown setting 'memory' (known: cpuStarvation, oom)"),
        (parse_vpa_settings, {"nope": 1, "enabled": 1},
         "vpa.nope: unknown setting; vpa.enabled: 1 is not true or false"),  # every problem at once
        (parse_rollout_settings, "x", "rollout must be a map of settings"),
        (parse_rollout_settings, {"readyTimeout": 0}, "rollout.readyTimeout: 0 is not a duration like 5m"),
        (parse_rollout_settings, {"readyTimeout": "soon"}, "rollout.readyTimeout: 'soon' is not a duration like 100ms"),
        (parse_rollout_settings, {"resourcesInPlace": "true"}, "rollout.resourcesInPlace: 'true' is not true or false"),
        (parse_rollout_settings, {"partition": 1}, "rollout.partition: unknown setting"),
    ],
)
def test_bad_values_are_named(parse: object, raw: object, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse(raw)  # type: ignore[operator]
    assert str(err.value) == message
