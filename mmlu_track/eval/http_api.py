"""JSON over HTTP to an OpenAI-compatible server: keep-alive connections, bounded retries, one-line errors.

`Client.post(path, body)` / `get(path)` return the decoded JSON object. Transient failures are
retried up to `max_retries` times after the first try, waiting `min(60, 2**attempt)` seconds (1, 2,
4, ... 60; a `Retry-After` header of seconds or an HTTP date wins, capped at 60; from the second
retry on, each is one warning line): HTTP 408, 429, 500, 502, 503, 504, a refused or reset
connection, a timed-out request, a 200 whose body is not whole JSON (cut off on the way). Anything
else (401, 403, 404, 400 for an unknown model or an unsupported parameter), or a transient failure
that outlasts the retries, is a `ModelError` of one line naming the request and the server's own
message.

`model.timeout_s` is the deadline of one whole try: connecting, sending and every read (a server
that drips its answer a byte at a time is cut at the deadline, not once per read). A try cut there
is abandoned, but the server goes on computing it: retried at the same concurrency it would queue
behind its own abandoned twin. So each timeout halves the requests let in flight at once (down to
one, for the rest of the run; said once), and the retry waits its back-off. The abandoned tries
and the seconds spent on them are counted (`Traffic`) and recorded in the run's timing.

Secrets: the key travels in the `Authorization` header only, `user:password@` in the base URL is
taken out of it (sent as HTTP basic auth) and never printed; every message is passed through
`credentials.redact_text` and has the key masked.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import http.client
import json
import socket
import threading
import time
import urllib.parse
from typing import Any

from mmlu_track.eval.backend import ModelError, Traffic
from mmlu_track.support.console import warn
from mmlu_track.support.credentials import MASK, redact_text, remember_secret, strip_userinfo

TRANSIENT = frozenset({408, 429, 500, 502, 503, 504})
MAX_WAIT_S = 60.0


class PermanentError(ModelError):
    """The server refused the request for good (its status is `status`)."""

    def __init__(self, message: str, status: int) -> None:
        """The one-line `message` shown to the user and the HTTP `status` the server answered."""
        super().__init__(message)
        self.status = status


def _retry_after(value: str | None, now: float) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError):
        return None


def backoff_s(attempt: int, retry_after: str | None, now: float) -> float:
    """Seconds to wait before try `attempt + 1` (attempt 0 is the first retry)."""
    asked = _retry_after(retry_after, now)
    return min(MAX_WAIT_S, asked if asked is not None else 2.0**attempt)


def _server_message(raw: bytes) -> str:
    """The server's own words: OpenAI's `{"error": {"message": ...}}`, FastAPI's `detail`, or text."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:300]
    if isinstance(doc, dict):
        err = doc.get("error", doc.get("detail", doc.get("message", doc)))
        if isinstance(err, dict):
            err = err.get("message", err)
        return " ".join(str(err).split())[:300]
    return " ".join(text.split())[:300]


class Client:
    """One server's base URL (its `/v1`); safe to share between threads (a connection per request in
    flight, kept alive for the next)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        timeout_s: float,
        max_retries: int,
        max_in_flight: int,
    ) -> None:
        """A client of `base_url` (http or https with a host, else `ModelError`), authenticated by
        `api_key` (a bearer token) or else the URL's `user:password@` (basic auth), both masked in
        every text from now on; each try is cut at `timeout_s` seconds, retried `max_retries` times,
        with at most `max_in_flight` requests on the wire at once. Connects to nothing yet."""
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ModelError(f"model.base_url={redact_text(base_url)!r} is not an http(s) URL with a host")
        self.shown = strip_userinfo(base_url).rstrip("/")  # what messages and records say
        self._origin = strip_userinfo(f"{parts.scheme}://{parts.netloc}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = parts.path.rstrip("/")
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        self._secrets = [s for s in (api_key, parts.password) if s]
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        elif parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            pw = urllib.parse.unquote(parts.password or "")
            self._headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
        # The key and the credential sent are masked in every text from now on (a server that
        # echoes headers in its version or an error body); the URL's password by `remember_urls`.
        remember_secret(api_key)
        remember_secret(self._headers.get("Authorization", "").partition(" ")[2])
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.after_failure = ""  # what the final error adds: how to go on (a run set it once scoring)
        self._interrupted = threading.Event()  # set: back-offs end and no attempt starts
        # Kept-alive connections not in use: one per request in flight at most, reused after.
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.requests = 0  # sent, retries included (the benchmark's count)
        # Requests let onto the wire at once: model.max_concurrency, halved by each timeout.
        self.max_in_flight = max_in_flight
        self._in_flight = 0
        self._slot = threading.Condition(self._lock)
        self._abandoned = 0
        self._abandoned_s = 0.0

    @property
    def root(self) -> str:
        """The server's root path: the base URL without its trailing `/v1` (vLLM's `/tokenize`)."""
        return self._path[: -len("/v1")] if self._path.endswith("/v1") else self._path

    def _clean(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return redact_text(text)

    def _connection(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self.timeout_s)

    def _once(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes, str | None]:
        """One try, within `timeout_s` from connecting to the last byte read (`TimeoutError` past it):
        a timer shuts the socket at the deadline, which ends a read blocked in any thread."""
        conn = self._connection()
        with self._lock:
            self.requests += 1
        expired = threading.Event()

        def cut() -> None:
            expired.set()
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):  # already closed: nothing left to end
                    sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(self.timeout_s, cut)
        timer.daemon = True
        timer.start()
        try:
            if conn.sock is None:
                conn.connect()
            if expired.is_set():  # the deadline passed while connecting: the timer found no socket
                raise TimeoutError
            conn.request(method, path, body=body, headers=self._headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()  # a half-read connection cannot be reused
            if expired.is_set():
                raise TimeoutError from None
            raise
        finally:
            timer.cancel()
        # Cut just as the last byte came, the connection is no use any more either.
        if expired.is_set() or resp.getheader("Connection", "").lower() == "close":
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        return resp.status, data, resp.getheader("Retry-After")

    def _enter(self, what: str) -> None:
        """Wait for a place among the requests in flight (`max_in_flight`)."""
        with self._slot:
            while self._in_flight >= self.max_in_flight and not self._interrupted.is_set():
                self._slot.wait(0.5)
            if self._interrupted.is_set():
                raise ModelError(f"{what}: interrupted")
            self._in_flight += 1

    def _leave(self) -> None:
        with self._slot:
            self._in_flight -= 1
            self._slot.notify()

    def _timed_out(self, seconds: float) -> None:
        """A try abandoned at the deadline: counted, and fewer requests in flight from now on."""
        with self._slot:
            self._abandoned += 1
            self._abandoned_s += seconds
            first, before, busy = self._abandoned == 1, self.max_in_flight, self._in_flight
            self.max_in_flight = max(1, min(before, busy) // 2)
        if first and before > 1:
            warn(
                f"{self.shown}: a request got no complete answer within model.timeout_s={self.timeout_s:g} s "
                f"with {busy} in flight; from now on at most {self.max_in_flight} at a time (halved at "
                "each timeout: the server still computes the abandoned ones), retries backing off"
            )

    def traffic(self) -> Traffic:
        """The requests sent so far, those abandoned at the deadline and the seconds spent on them."""
        with self._lock:
            return Traffic(self.requests, self._abandoned, round(self._abandoned_s, 3))

    def interrupt(self) -> None:
        """Requests waiting to retry give up now, and none starts, until `resume()`: a Ctrl-C must
        not wait out other threads' back-offs (up to a minute each). One on the wire still ends
        when the server answers or `timeout_s` passes."""
        self._interrupted.set()
        with self._slot:
            self._slot.notify_all()

    def resume(self) -> None:
        """Undo `interrupt()`: requests may start and retry again."""
        self._interrupted.clear()

    def close(self) -> None:
        """Close the kept-alive connections (a later request opens new ones)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, full: bool = False
    ) -> Any:
        """The decoded JSON answer of `method path` (below the base URL; from the host's root if `full`)."""
        where = path if full else f"{self._path}{path}"
        payload = json.dumps(body).encode() if body is not None else None
        what = f"{method} {self._origin}{where}"
        last = ""
        for attempt in range(self.max_retries + 1):
            if self._interrupted.is_set():
                raise ModelError(f"{what}: interrupted")
            retry_after = None
            self._enter(what)
            began = time.monotonic()
            try:
                status, data, retry_after = self._once(method, where, payload)
            except TimeoutError:
                self._timed_out(time.monotonic() - began)
                last = f"no complete answer within model.timeout_s={self.timeout_s:g} s"
            except (OSError, http.client.HTTPException) as err:
                last = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
            else:
                if status == 200:
                    try:
                        return json.loads(data)
                    except ValueError:  # cut off on the way (a proxy, a dropped stream): asked again
                        last = f"the answer is not JSON ({self._clean(_server_message(data))})"
                else:
                    message = self._clean(_server_message(data))
                    if status not in TRANSIENT:
                        raise PermanentError(
                            f"{what} was refused: HTTP {status}: {message}{self.after_failure}", status
                        )
                    last = f"HTTP {status}: {message}"
            finally:
                self._leave()
            if attempt < self.max_retries:
                wait = backoff_s(attempt, retry_after, time.time())
                if attempt >= 1:  # a blip retries quietly; a server down or starting up is said so
                    nth = f"try {attempt + 2} of {self.max_retries + 1}"
                    warn(f"{what}: {self._clean(last)}; {nth} in {wait:.0f} s")
                self._interrupted.wait(wait)
        tries = self.max_retries + 1
        raise ModelError(
            f"{what} failed {tries} time{'s' * (tries > 1)} (last: {self._clean(last)}); is the server up?"
            f"{self.after_failure}"
        )

    def post(self, path: str, body: dict[str, Any], *, full: bool = False) -> Any:
        """`request("POST", ...)`: the decoded JSON answer to `body` sent as JSON, retried as any request."""
        return self.request("POST", path, body, full=full)

    def get(self, path: str, *, full: bool = False) -> Any:
        """`request("GET", ...)`: the decoded JSON answer, retried as any request."""
        return self.request("GET", path, full=full)


def probe(client: Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any | None:
    """An optional endpoint's answer (from the host's root), or None when the server refuses it for
    good (404, 405, 400: it has no such endpoint); transient failures are retried as any request."""
    try:
        return client.request(method, path, body, full=True)
    except PermanentError:
        return None
