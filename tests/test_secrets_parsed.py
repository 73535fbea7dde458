"""Credentials removed by parsing, not by a pattern that stops at one character (issue 39, item 2):
a password holding any of `' " ? # @ : / %` or a space, percent-encoded or not, is found by parsing
the URL it is set in and masked in every text the tool prints, stores or logs; so are an API key
and the Basic credential the HTTP client sends (a server may echo them)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mmlu_track.config import to_dict
from mmlu_track.config_checks import eval_config_from_dict
from mmlu_track.credentials import redact_text
from mmlu_track.eval.http_api import Client
from mmlu_track.typed import ConfigError

from .conftest import CliResult, compose_raw

Cli = Callable[..., CliResult]

SERVED = ["model=openai_api", "model.base_url=http://h:1/v1", "model.served_name=m", "model.revision=r"]
CHARACTERS = ["'", '"', "?", "#", "@", ":", "/", "%", " "]


@pytest.mark.parametrize("char", CHARACTERS)
def test_a_password_with_any_character_is_masked_everywhere(char: str) -> None:
    secret = f"Pw{char}SECRET{ord(char)}x"
    raw = compose_raw(SERVED)
    raw["model"]["base_url"] = f"http://alice:{secret}@127.0.0.1:8000/v1"
    raw["tracking"]["db_url"] = f"postgresql+psycopg://bob:{secret}@db:5432/runs"
    if char in "/?#":  # they end a URL's host part: refused in one line that holds no part of it
        with pytest.raises(ConfigError, match="percent-encoded") as err:
            eval_config_from_dict(raw)
        assert "SECRET" not in str(err.value)
        assert "Pw" not in str(err.value)
        raw["model"]["base_url"] = "http://alice:fine-pass-1@127.0.0.1:8000/v1"
    cfg = eval_config_from_dict(raw)
    stored = json.dumps(to_dict(cfg))  # results.json, the SQL row, MLflow's params and config artifact
    assert f"SECRET{ord(char)}" not in stored
    assert "alice:***@127.0.0.1:8000" in stored
    said = redact_text(f"cannot reach http://alice:{secret}@127.0.0.1:8000/v1; store {cfg.tracking.db_url}")
    assert f"SECRET{ord(char)}" not in said
    basic = base64.b64encode(f"alice:{secret}".encode()).decode()
    assert basic not in redact_text(f"the server says: Authorization: Basic {basic}")


def test_a_percent_encoded_password_is_masked_in_both_forms() -> None:
    raw = compose_raw(SERVED)
    raw["model"]["base_url"] = "http://alice:p%40ss%27SECRETpct@127.0.0.1:8000/v1"
    eval_config_from_dict(raw)
    assert "SECRETpct" not in redact_text("p%40ss%27SECRETpct and p@ss'SECRETpct")


def test_an_api_key_a_server_echoes_is_masked() -> None:
    Client(
        "http://127.0.0.1:9/v1", api_key="sk-planted-KEY-4821", timeout_s=1, max_retries=0, max_in_flight=1
    ).close()
    echoed = '{"version": "0.9", "headers": {"authorization": "Bearer sk-planted-KEY-4821"}}'
    assert "sk-planted-KEY-4821" not in redact_text(echoed)


def test_hydras_own_files_lose_a_password_with_a_quote(cli: Cli, tmp_path: Path) -> None:
    """`.hydra/config.yaml` and `overrides.yaml` (written by Hydra before the tool runs) held it."""
    kept = tmp_path / "run"
    kept.mkdir()  # a folder that was there: a refused run leaves it, with Hydra's files
    uri = "http://alice:Pw'SECRETq@127.0.0.1:1"
    got = cli(
        "eval", "model=tiny", "k=9", f'tracking.mlflow_uri="{uri}"', f"hydra.run.dir={kept}", cwd=tmp_path
    )
    assert got.code == 2
    assert "SECRETq" not in got.err + got.out
    written = [p.read_text() for p in (kept / ".hydra").glob("*.yaml")]
    assert written
    assert not [text for text in written if "SECRETq" in text]
