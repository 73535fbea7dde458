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

from mmlu_track.eval.http_api import Client
from mmlu_track.settings.checks import eval_config_from_dict
from mmlu_track.settings.config import to_dict
from mmlu_track.settings.typed import ConfigError
from mmlu_track.support.credentials import redact_text

from ..conftest import CliResult, compose_raw

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


@pytest.mark.parametrize(
    "typed",
    [
        "model.api_key_env=sk-typed-KEY-77aa19",  # not a variable's name
        "model.api_key_env=3f9c1e7a44b0d2c9e1f5a7b3",  # a name, but shaped as a key
        "+model.api_key=sk-typed-KEY-77aa19",  # no such setting
    ],
)
def test_a_key_typed_where_a_name_goes_is_refused_unshown(cli: Cli, tmp_path: Path, typed: str) -> None:
    kept = tmp_path / "run"
    kept.mkdir()  # a folder that was there: a refused run leaves it, with Hydra's files
    got = cli("eval", *SERVED, typed, f"hydra.run.dir={kept}", cwd=tmp_path)
    assert got.code == 2
    (line,) = got.errors
    assert ("model.api_key_env takes the name" if "env" in typed else "unknown key model.api_key") in line
    secret = typed.split("=", 1)[1]
    assert secret not in got.err + got.out
    assert not [p for p in (kept / ".hydra").glob("*.yaml") if secret in p.read_text()]


def test_a_variable_name_is_taken_as_one() -> None:
    for name in ("OPENAI_API_KEY", "my_key", "HF_TOKEN_2", "K"):
        assert (
            eval_config_from_dict(compose_raw([*SERVED, f"model.api_key_env={name}"])).model.api_key_env
            == name
        )


def test_a_system_message_from_the_environment_is_refused(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its value would be recorded with the prompt (it may be a secret) and differ by machine."""
    monkeypatch.setenv("MMLU_TEST_SYSTEM", "env-value-9d2")
    for system in ("${oc.env:MMLU_TEST_SYSTEM}", "Be brief. ${oc.env:MMLU_TEST_SYSTEM,x}"):
        args = [*SERVED, "chat=single_turn", "model.tokenizer=t", f"chat.system={system}"]
        got = cli("eval", *args, cwd=tmp_path)
        assert got.code == 2
        (line,) = got.errors
        assert "chat.system takes its text from the environment (${oc.env:...})" in line
        assert "env-value-9d2" not in got.err + got.out
    assert not list(tmp_path.iterdir())  # refused before any folder or store


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Authorization: Token tok-1", "Authorization: Token ***"),
        (
            '{"authorization": "Basic dXNlcjpwYXNz", "host": "h"}',
            '{"authorization": "Basic ***", "host": "h"}',
        ),
        ('{"Authorization":"Custom-Scheme xyz.987"}', '{"Authorization":"Custom-Scheme ***"}'),
        ("proxy-authorization: Negotiate YII=", "proxy-authorization: Negotiate ***"),
        ("X-Api-Key: k-1234; next", "X-Api-Key: ***; next"),
        ("authorization=rawvalue&b=2", "authorization=***&b=2"),
        ("model.api_key_env=MY_KEY", "model.api_key_env=MY_KEY"),  # a variable's name, no secret
        ("the Authorization header is missing", "the Authorization header is missing"),
    ],
)
def test_any_authorization_value_in_a_text_is_masked(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_hydras_grammar_error_prints_no_password(cli: Cli, tmp_path: Path) -> None:
    """An unquoted `'` in a password is a Hydra grammar error, which prints the override as typed."""
    got = cli("eval", *SERVED[:1], "model.base_url=http://al:pw'Lex-33@h:1/v1", cwd=tmp_path)
    assert got.code == 2
    assert "LexerNoViableAltException" in got.err
    assert "Lex-33" not in got.err + got.out


def test_hydras_saved_files_are_read_with_every_string_omegaconf_reads() -> None:
    """`redact_hydra_files` reads the saved files with PyYAML's C parser and rewrites a file only
    when a string in it holds a secret: every string OmegaConf reads there must be a string in that
    reading too, or a secret would stay (a password that looks like a date or a number)."""
    from omegaconf import OmegaConf

    from mmlu_track.commands.launchers import _strings_of

    text = (
        "a: 2024-01-01\nb: '2024-01-01 10:00:00'\nc: 1e5\nd: 12345\ne: 'x y'\nf: >-\n  folded long\n  line\n"
        "g: [2001-12-14t21:59:43.10-05:00, .5, 1_000, 'true', true, null, ~]\nh: {i: 0x1F, j: 6.8523015e+5}\n"
    )

    def strings(doc: object) -> set[str]:
        if isinstance(doc, dict):
            return set().union(*map(strings, doc.values())) if doc else set()
        if isinstance(doc, list):
            return set().union(*map(strings, doc)) if doc else set()
        return {doc} if isinstance(doc, str) else set()

    omegaconf_reads = strings(OmegaConf.to_container(OmegaConf.create(text), resolve=False))
    assert {"2024-01-01", "x y", "folded long line"} <= omegaconf_reads  # what the check is about
    assert omegaconf_reads <= strings(_strings_of(text))
    assert _strings_of("a: [unclosed") is None  # then read as before, by OmegaConf
