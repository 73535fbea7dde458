"""A slow server meets `model.timeout_s` as a deadline for the whole request, and timed-out
requests are retried without a storm (issue 39, item 4), against scripted servers on 127.0.0.1."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mmlu_track.eval import openai_connect
from mmlu_track.eval.backend import LetterRequest, ModelError
from mmlu_track.eval.http_api import Client

from ..conftest import CliResult
from ..serve import API_KEY, FaultProxy, LlamaCppServer, LlamaServer
from .test_openai_api import KEY_ENV, _config, _eval, _served

Cli = Callable[..., CliResult]


@contextmanager
def dripping(gap_s: float, chunks: int) -> Iterator[str]:
    """A server that answers every request with a 200 whose body comes one byte per `gap_s`
    (`chunks` bytes, then it hangs up): each read gets something in time, the answer never whole."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 999\r\n\r\n"
                )
                for _ in range(chunks):
                    if stop.wait(gap_s):
                        return
                    conn.sendall(b" ")
            except OSError:
                return  # the client hung up: what the deadline does

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_a_dripping_answer_is_cut_at_the_deadline_not_per_read() -> None:
    with dripping(gap_s=0.2, chunks=40) as url:  # 8 s of drip; every gap well inside the 1 s limit
        client = Client(url, api_key=None, timeout_s=1, max_retries=0, max_in_flight=1)
        began = time.monotonic()
        with pytest.raises(ModelError, match=r"no complete answer within model\.timeout_s=1 s"):
            client.get("/models")
        took = time.monotonic() - began
        client.close()
    assert took < 3, f"held {took:.1f} s with model.timeout_s=1"
    assert client.traffic().abandoned == 1


class OneSlot:
    """A server that computes one request at a time (`service_s` each) and goes on computing a
    request whose client has left, as an inference engine does."""

    def __init__(self, service_s: float) -> None:
        self.computed = 0
        slot = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                with slot:
                    time.sleep(service_s)
                    server.computed += 1
                data = json.dumps({"ok": True}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # abandoned by its client

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def test_timed_out_requests_are_retried_fewer_at_a_time_and_said_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ten requests at once at a server that takes 0.3 s for each, one at a time, with a 1 s limit:
    seven time out while the server still computes them. Retried all together they would queue
    behind their abandoned twins and time out again (as they did: 31 requests sent, 12 warnings,
    20 s); with the in-flight cap halved at each timeout they are answered."""
    server = OneSlot(service_s=0.3)
    client = Client(server.url, api_key=None, timeout_s=1, max_retries=4, max_in_flight=10)
    answers: list[Any] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            answers.append(client.get("/models"))
        except ModelError as err:
            errors.append(err)

    threads = [threading.Thread(target=ask) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    client.close()
    server.close()
    assert not errors
    assert len(answers) == 10
    traffic = client.traffic()
    assert 1 <= traffic.abandoned <= 8, traffic
    assert traffic.abandoned_s >= traffic.abandoned * 0.9, traffic
    assert traffic.requests <= 10 + traffic.abandoned, traffic  # each abandoned try retried once at most
    assert client.max_in_flight == 1
    said = [line for line in capsys.readouterr().err.splitlines() if "at a time" in line]
    assert len(said) == 1, said
    assert "model.timeout_s=1 s" in said[0]


def test_a_run_counts_the_requests_it_abandoned(cpp_server: LlamaCppServer, cli: Cli, tmp_path: Path) -> None:
    """One scoring request held past model.timeout_s by a proxy: asked again, the run finishes, and
    its record says what the slow answer cost (behind the proxy llama.cpp's C++ server: the engine is
    incidental, and it answers log-probs several times faster than llama-cpp-python's)."""
    server = cpp_server
    seen = {"n": 0}

    def hold_one(path: str) -> None:
        if path == "/v1/completions":
            seen["n"] += 1
            if seen["n"] == 4:  # past the load-time probes: a question's request
                time.sleep(3.5)

    proxy = FaultProxy(server.port, hook=hold_one)
    try:
        args = _served(
            proxy.base_url,
            "model.timeout_s=2",
            "model.max_concurrency=1",
            "tracking.mlflow=false",
            "k=0",
            limit=2,
        )
        got = _eval(cli, tmp_path, *args)
    finally:
        proxy.close()
    assert got.code == 0, got.err
    (results,) = (tmp_path / "out").rglob("results.json")
    timing = json.loads(results.read_text())["timing"]
    assert timing["abandoned_requests"] == 1
    assert timing["abandoned_s"] >= 1.9
    assert timing["requests"] >= seen["n"]
    assert f"1 of {timing['requests']} requests got no complete answer within model.timeout_s" in got.out


def test_a_cut_off_answer_is_asked_again_and_a_refusal_mid_run_says_resume(
    server: LlamaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 200 whose JSON is cut off (a proxy, a dropped stream) is transient: asked again, scored
    when whole, one line when it stays cut. A 400 once scoring started names how to go on."""
    monkeypatch.setenv(KEY_ENV, API_KEY)
    cut = {"times": 0}

    def truncate(path: str, doc: dict[str, Any]) -> dict[str, Any] | bytes:
        if path.endswith("/completions") and cut["times"] > 0:
            cut["times"] -= 1
            return json.dumps(doc).encode()[:40]
        return doc

    proxy = FaultProxy(server.port, rewrite=truncate, status=400)
    texts = [LetterRequest("Question: 2 + 2 = ?\nA. 3\nB. 4\nC. 5\nD. 22\nAnswer:")]
    try:
        served = openai_connect.connect(_config(proxy.base_url, max_retries=1))  # type: ignore[arg-type]
        cut["times"] = 1
        assert served.score_letters(texts, lambda n: None)[0].scored_by == "top_logprobs"
        assert cut["times"] == 0
        cut["times"] = 10
        with pytest.raises(ModelError, match=r"failed 2 times \(last: the answer is not JSON"):
            served.score_letters(texts, lambda n: None)
        cut["times"] = 0
        proxy.fail_first = 10**6  # every request from now on: HTTP 400
        with pytest.raises(
            ModelError, match=r"HTTP 400.*committed so far are kept: run the same command to resume"
        ):
            served.score_letters(texts, lambda n: None)
        served.close()
    finally:
        proxy.close()
