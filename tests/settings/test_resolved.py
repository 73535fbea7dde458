"""settings/resolved.py: the choices made from the settings as a command starts, stored and shown
beside the config (never in it), a tracking URI's password masked."""

from __future__ import annotations

import dataclasses

import pytest

from mmlu_track.settings.resolved import Resolved


def test_the_choices_are_stored_and_shown_without_a_password() -> None:
    chosen = Resolved("http://alice:pw-42@mlflow.example:5000", 3, "the CPU quota of this cgroup")
    assert chosen.to_json() == {
        "mlflow_uri": "http://alice:***@mlflow.example:5000",
        "threads": 3,
        "threads_why": "the CPU quota of this cgroup",
    }
    assert chosen.lines() == [
        "# resolved from the settings as this command starts (not settings themselves):",
        "#   mlflow_uri: http://alice:***@mlflow.example:5000",
        "#   threads: 3",
        "#   threads_why: the CPU quota of this cgroup",
    ]
    assert chosen.mlflow_uri == "http://alice:pw-42@mlflow.example:5000"  # used as is, shown masked
    served = Resolved(None, None)
    assert served.lines()[1:] == ["#   mlflow_uri: null", "#   threads: null", "#   threads_why: null"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        served.threads = 2  # type: ignore[misc]
