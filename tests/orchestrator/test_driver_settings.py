"""The driver's settings are one frozen value: every field checked when it is made, an unknown one refused
by name, a default read from the environment only for a field not given."""

import dataclasses

import pytest

from looplab.model.errors import ConfigError
from looplab.orchestrator.settings import DriverSettings


def test_the_settings_are_frozen_and_keep_what_was_given():
    s = DriverSettings.of(until_empty=True, poll_s=0.2, max_concurrent=2)
    assert (s.until_empty, s.poll_s, s.max_concurrent) == (True, 0.2, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.poll_s = 1.0  # type: ignore[misc]
    later = DriverSettings.of(s, progress=False)
    assert (later.progress, later.poll_s, s.progress) == (False, 0.2, True)


def test_an_unknown_setting_is_refused_with_the_likely_one(monkeypatch):
    with pytest.raises(ConfigError, match=r"'pol_s': unknown \(did you mean 'poll_s'\?\); accepted: address"):
        DriverSettings.of(pol_s=0.2)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("max_concurrent", 0, "max_concurrent: must be >= 1"),
        ("max_concurrent", 1.5, "max_concurrent: expected an integer"),
        ("poll_s", 0, "poll_s"),
        ("grace_s", -1, "grace_s"),
        ("db_retry_max_s", "30", "db_retry_max_s"),
    ],
)
def test_a_bad_value_is_refused_naming_its_field(field, value, says):
    with pytest.raises(ConfigError, match=says):
        DriverSettings.of(**{field: value})


def test_an_environment_default_is_read_only_for_a_field_not_given(monkeypatch):
    monkeypatch.setenv("LOOPLAB_HEARTBEAT_GRACE_S", "7")
    monkeypatch.setenv("LOOPLAB_AGING_S", "soon")
    assert DriverSettings.of(aging_s=10).grace_s == 7.0  # the bad aging variable is not read
    with pytest.raises(ConfigError, match=r"\$LOOPLAB_AGING_S"):
        DriverSettings.of()
