"""commands/compose.py: an interpolation that fails is one line naming its key, in every command;
the settings' defaults as config nodes, composed values as plain ones, a group's overrides and run
references as typed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ..conftest import CliResult


@pytest.mark.parametrize(
    ("which", "override", "key"),
    [
        ("noise", "noise.experiment=${oops}", "noise.experiment"),  # read before the evaluation's
        ("noise", "model.name=${oops}", "model.name"),
        ("eval", "model.name=${oops}", "model.name"),
        ("compare", "baseline=${oops}", "baseline"),
    ],
)
def test_a_failing_interpolation_is_one_line_naming_its_key(
    cli: Callable[..., CliResult], tmp_path: Path, which: str, override: str, key: str
) -> None:
    """The noise command's spanned several lines (a traceback, then Hydra's hint): its own settings
    were resolved outside the one place errors become exit codes, and every command iterated
    Hydra's overrides, which resolves an override's `${...}` before any check."""
    extra = ["candidate=x"] if which == "compare" else ["model=tiny"]
    proc = cli(which, override, *extra, f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert proc.code == 2
    assert proc.err.strip().splitlines() == [f"mmlu_track: error: {key}: Interpolation key 'oops' not found"]


def test_the_defaults_are_the_dataclasses_own_and_a_required_setting_is_missing() -> None:
    """`register_defaults`: each setting's default from `config.py` as a config node, `???` where
    one is required, `all` for the subjects, an env-backed field read through `oc.env`."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from mmlu_track.commands import compose
    from mmlu_track.settings.config import DB_URL_ENV, DEFAULT_DB_URL, EvalConfig, TrackingConfig

    compose.register_defaults()
    node = OmegaConf.to_container(ConfigStore.instance().load("eval_defaults.yaml").node, resolve=False)
    assert isinstance(node, dict)
    assert (node["k"], node["batch_size"]) == (EvalConfig.k, EvalConfig.batch_size)
    assert node["model"]["name"] == "???"
    assert node["subjects"] == "all"
    assert node["tracking"]["db_url"] == f'${{oc.env:{DB_URL_ENV},"{DEFAULT_DB_URL}"}}'
    assert node["tracking"]["heartbeat_s"] == TrackingConfig.heartbeat_s


def test_plain_values_refuse_a_missing_value_and_a_prompt_from_the_environment() -> None:
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue

    from mmlu_track.commands.compose import config_message, plain
    from mmlu_track.settings.typed import ConfigError

    assert plain(OmegaConf.create({"k": 5, "n": "${k}"})) == {"k": 5, "n": 5}
    with pytest.raises(MissingMandatoryValue) as missing:
        plain(OmegaConf.create({"model": {"name": "???"}}))
    assert config_message(missing.value) == "Missing mandatory value: model.name"
    with pytest.raises(ConfigError, match=r"chat.system takes its text from the environment"):
        plain(OmegaConf.create({"chat": {"system": "${oc.env:HOME}"}}))


def test_a_groups_overrides_and_run_references_are_read_as_typed() -> None:
    from mmlu_track.commands.compose import raw_refs, sub_overrides

    given = ["noise.shot_seeds=[1]", "+noise.dtype=bfloat16", "~noise.batch_size", "model=tiny", "noisy=1"]
    assert sub_overrides(given, "noise") == ["shot_seeds=[1]", "dtype=bfloat16", "batch_size"]
    # Hydra read `baseline=08809` as the int 8809 and `1e5` as a float: the run prefixes as typed.
    refs = raw_refs({"baseline": 8809, "candidate": 100000.0}, ["baseline=08809", "candidate='1e5'"])
    assert refs == {"baseline": "08809", "candidate": "1e5"}
    assert raw_refs({"baseline": "abc", "candidate": None}, ["baseline=x"]) == {
        "baseline": "abc",
        "candidate": None,
    }
