"""A server that echoes what it was sent (issue 39, item 3): the API key and the Basic credential
the client sends, and any `Authorization` value, never reach a record, a log or an error line,
whether the server says them in its `/version` answer or in a 401's body. Through a proxy in
front of the real llama-cpp-python server (`tests/serve.py`)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..conftest import CliResult
from ..serve import API_KEY, FaultProxy, LlamaServer
from ..test_failures_secrets import _nowhere
from .test_openai_api import _eval, _served

Cli = Callable[..., CliResult]
PASSWORD = "pw'Echo-71c"  # a quote in it: legal in a URL's userinfo


def _echo_headers(path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
    if path == "/version":
        return 200, {"version": "9.9-echo", "you_sent": headers, "proxy": "Authorization: Token tok-3a9f1"}
    return None


@pytest.mark.usefixtures("mlflow_store")
def test_a_servers_echoed_headers_are_recorded_without_the_key(
    server: LlamaServer, cli: Cli, tmp_path: Path
) -> None:
    proxy = FaultProxy(server.port, answer=_echo_headers)
    try:
        got = _eval(cli, tmp_path, *_served(proxy.base_url, "k=0", subjects="[anatomy]", limit=1))
    finally:
        proxy.close()
    assert got.code == 0, got.err
    (results,) = (tmp_path / "out").rglob("results.json")
    assert "9.9-echo" in results.read_text()  # what the server said of itself is kept
    for secret in (API_KEY, "tok-3a9f1"):
        assert secret not in got.out + got.err
        _nowhere(tmp_path, secret)  # results, Hydra's files, the SQL store, MLflow's store and artifacts


def test_a_401_echoing_the_credential_is_one_line_without_it(
    server: LlamaServer, cli: Cli, tmp_path: Path
) -> None:
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()

    def refuse(path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
        sent = headers.get("Authorization", "")
        message = f"bad credentials: Authorization: {sent}; x-api-key: k-77e1; Authorization: Token tok-3a9f1"
        return 401, {"error": {"message": message}}

    proxy = FaultProxy(server.port, answer=refuse)
    url = proxy.base_url.replace("http://", f"http://alice:{PASSWORD}@")
    try:
        args = [a for a in _served(url) if not a.startswith(("model.api_key_env=", "model.base_url="))]
        args.append(f'model.base_url="{url}"')  # quoted for Hydra's grammar; sent as Basic, no key
        got = _eval(cli, tmp_path, *args, key=None)
    finally:
        proxy.close()
    assert got.code == 2, got.out + got.err
    (line,) = got.errors
    assert "was refused: HTTP 401: bad credentials: Authorization: Basic ***" in line
    for secret in (basic, PASSWORD, "k-77e1", "tok-3a9f1"):
        assert secret not in got.out + got.err
        _nowhere(tmp_path, secret)
