"""A stdlib-only Python client for the ctxeng REST API (agents need no extra dependency).

    from ctxeng.client import Client
    client = Client("http://127.0.0.1:8000", token="...")
    assembly = client.assemble(request_dict, wait=True, timeout=60)
    assembly.status      # "ready" | "blocked"
    assembly.input       # the provider payload (None when blocked)
    assembly.manifest    # the sealed manifest document
    client.report_usage(assembly.id, input_tokens=..., cached_tokens=..., output_tokens=...)
    client.close_run("run-42")   # later steps of the run are blocked (task_closed)

With a provider SDK (neither is imported here; install the one you use):

    response = openai.OpenAI().chat.completions.create(**assembly.openai_kwargs())
    response = anthropic.Anthropic().messages.create(**assembly.anthropic_kwargs())
    response = openai.OpenAI().responses.create(**assembly.responses_kwargs())
    assembly.report_usage(response)   # the SDK's usage -> the assembly's usage/ endpoint

`traceparent=` on `assemble`/`submit` (a W3C trace context header value) makes the assembly a
child span of the agent's own span when the server exports OpenTelemetry traces.

`assemble(wait=True)` takes two requests when the job is final within 30 s: the submit, and one
long-poll of the job (`GET assemblies/{id}/?wait=30&include=manifest,input`) that returns as
soon as the job is final, carrying the manifest and the provider input. When the server's
long-poll caps are reached it answers the job at once with `Retry-After`; `assemble` waits that
long (within its timeout) before polling again, rather than polling in a loop.

Retries (`Client(max_retries=4, backoff_base=0.5, backoff_cap=30.0)`):

- 429 and 503 are retried on every call (the server refused the request before acting on it),
  after the response's `Retry-After` (seconds or an HTTP-date) plus up to `backoff_base` s of
  jitter, or without the header after a full-jitter exponential backoff: a random wait up to
  `min(backoff_cap, backoff_base * 2**attempt)`. A `Retry-After` longer than `backoff_cap` is not
  waited for: the error is raised at once.
- A connection error (refused, reset, closed without a response, timed out) and a 504 (the
  server's database broke off in a commit and cannot say whether it applied) are retried only on
  an idempotent call. Every call this client makes is one: the GETs; `submit`, because it always
  sends an Idempotency-Key (a uuid4 when the caller gives none, the same one on every retry), so
  a repeat returns the job the first attempt created; `report_usage`, because the server keeps
  one report per assembly and replaces it (the same body twice stores the same report);
  `close_run`, which the server makes idempotent.
- After `max_retries` retries the last error is raised: RateLimited (429) and ServiceUnavailable
  (503) carry `.retry_after` (seconds, or None), ConnectionFailed the connection error.

Errors are typed: InvalidRequest (400, `.errors` with field paths), AuthError (401/403),
NotFound (404), Conflict (409), PayloadTooLarge (413), RateLimited (429), ServiceUnavailable
(503, a ServerError), OutcomeUnknown (504, a ServerError), ServerError (other 5xx), ConnectionFailed (no response; RequestTimedOut
when no whole response came within the deadline), ProtocolError (an answer that is not the API's:
not JSON, not an object, a status the API never sends, a redirect elsewhere; ResponseTooLarge past
`max_response_bytes`), AssemblyFailed (the job ended `failed`), Timeout (not final within
`timeout`). All derive from ClientError; nothing a server sends raises anything else.

Against a server that misbehaves (issue 40): each request has one deadline for the whole exchange
(connect, send, status, headers and every byte of the body: `request_timeout`, plus a long-poll's
wait), however slowly the bytes come; `assemble` starts no request or retry after its `timeout` and
so returns or raises within `timeout + request_timeout`. A response is read up to
`max_response_bytes` (64 MiB), refused from its Content-Length when that says more. Redirects
are followed only for a GET to the same origin (scheme, host and port) as `base_url`; any other is
refused, so the token is never sent to another host or over another scheme.
"""

from __future__ import annotations

import copy
import email.utils
import http.client
import json
import math
import random
import socket
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

FINAL = ("ready", "blocked", "failed")
# The server's longest long-poll (manifests.api.MAX_WAIT_SECONDS); a longer wait is clamped to it.
MAX_WAIT = 30.0
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_REDIRECTS = 5
# The statuses the API answers a success with; any other 2xx is not the API speaking.
SUCCESS = (200, 201, 202)
REDIRECTS = (301, 302, 303, 307, 308)


class ClientError(Exception):
    def __init__(self, message: str, *, status: int | None = None, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors or [message]


class InvalidRequest(ClientError):
    """400: the body was refused; `.errors` name field paths (`candidates[3].item_id: field required`)."""


class AuthError(ClientError):
    """401 (no or bad token) or 403 (no membership or role in the tenant)."""


class NotFound(ClientError):
    pass


class Conflict(ClientError):
    """409: e.g. an Idempotency-Key reused for another body, or the input of a blocked assembly."""


class PayloadTooLarge(ClientError):
    pass


class ServerError(ClientError):
    pass


class RateLimited(ClientError):
    """429 after every retry: the token's rate (CTXENG_THROTTLE_AGENT) is spent; `.retry_after` s."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ServiceUnavailable(ServerError):
    """503 after every retry: the service cannot take the request now; `.retry_after` s (or None)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class OutcomeUnknown(ServerError):
    """504 after every retry: the server's database broke off during a write's commit and could not
    be asked whether it applied; `.retry_after` s. Retried only on an idempotent call (a submit
    always carries its Idempotency-Key, so the retry returns the job if it was saved)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ConnectionFailed(ClientError):
    """No response: the server could not be reached, or the connection broke or timed out."""


class RequestTimedOut(ConnectionFailed):
    """No whole response within the request's deadline (a server too slow, or one dripping bytes)."""


class ProtocolError(ClientError):
    """The answer is not the API's: not JSON, not a JSON object, nested too deep, missing a field
    the API always sends, a status the API never answers with, or a redirect to another origin."""


class ResponseTooLarge(ProtocolError):
    """The response is larger than the client's `max_response_bytes`; it was not read whole."""


class AssemblyFailed(ClientError):
    """The job ended `failed` (an engine error, or its worker died CTXENG_MAX_ATTEMPTS times)."""


class Timeout(ClientError):
    """The job was not final within the timeout; it is still queued or running on the server."""


_BY_STATUS = {400: InvalidRequest, 401: AuthError, 403: AuthError, 404: NotFound, 409: Conflict, 413: PayloadTooLarge}
_RETRY_STATUS = {429: RateLimited, 503: ServiceUnavailable, 504: OutcomeUnknown}
# A connection that fails before a whole response: refused, reset, closed early (IncompleteRead),
# timed out, a malformed status line or header (http.client's HTTPException, LineTooLong).
_CONNECTION_ERRORS = (OSError, http.client.HTTPException)


@dataclass
class Assembly:
    id: str
    status: str
    job: dict[str, Any]
    manifest: dict[str, Any] | None = None
    input: dict[str, Any] | None = field(default=None)
    client: Client | None = field(default=None, repr=False, compare=False)

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    @property
    def adapter(self) -> str | None:
        """The adapter that serialized `input` (`openai_chat` | `anthropic_messages` |
        `openai_responses`), from the manifest."""
        return ((self.manifest or {}).get("assembly") or {}).get("adapter", {}).get("name")

    def openai_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """`openai.OpenAI().chat.completions.create(**kwargs)` takes these as they are.

        A copy of the payload (`model`, `messages`, `tools` when any); `overrides` are added on
        top (`temperature=0`, `max_completion_tokens=...`), never merged into the messages.
        """
        return {**self._payload("openai_chat"), **overrides}

    def anthropic_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """`anthropic.Anthropic().messages.create(**kwargs)` takes these as they are.

        A copy of the payload (`model`, `max_tokens`, `system`, `messages`, `tools` when any);
        `system` is a list of text blocks when the stable prefix carries a cache breakpoint.
        """
        return {**self._payload("anthropic_messages"), **overrides}

    def responses_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """`openai.OpenAI().responses.create(**kwargs)` takes these as they are (adapter
        `openai_responses`).

        A copy of the payload (`model`, `instructions`, `input`, `tools` when any,
        `max_output_tokens`, `prompt_cache_key` when the policy opts in); `overrides` on top.
        """
        return {**self._payload("openai_responses"), **overrides}

    def report_usage(self, response: Any) -> dict[str, Any]:
        """Report the usage of the provider's response (an SDK object or its dict) to `usage/`."""
        if self.client is None:
            raise ClientError("this Assembly has no client; use Client.report_usage(job_id, ...)")
        return self.client.report_usage(self.id, **usage_from_response(response))

    def _payload(self, adapter: str) -> dict[str, Any]:
        if self.input is None:
            raise Conflict(f"assembly {self.id} is {self.status}; there is no model input", status=409)
        if self.adapter is not None and self.adapter != adapter:
            raise ClientError(f"assembly {self.id} was serialized by {self.adapter}, not {adapter}: "
                              f"set the request's adapter (or the policy's serialization.adapter)")
        return copy.deepcopy(self.input)


def usage_from_response(response: Any) -> dict[str, int]:
    """`input_tokens`, `cached_tokens`, `output_tokens` from an OpenAI or Anthropic response.

    OpenAI chat: `prompt_tokens` (cached included), `prompt_tokens_details.cached_tokens`,
    `completion_tokens`. OpenAI Responses: `input_tokens` (cached included),
    `input_tokens_details.cached_tokens`, `output_tokens`. Anthropic: `input_tokens` counts only the uncached part, so the prompt
    is `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`, and the cached
    part is `cache_read_input_tokens`; `output_tokens`. Both are what the estimate is set against.
    """
    usage = _field(response, "usage")
    if usage is None:
        raise ValueError("the response carries no usage (a streamed response needs usage enabled)")
    if _field(usage, "prompt_tokens") is not None:
        details = _field(usage, "prompt_tokens_details")
        return {
            "input_tokens": int(_field(usage, "prompt_tokens")),
            "cached_tokens": int(_field(details, "cached_tokens") or 0),
            "output_tokens": int(_field(usage, "completion_tokens") or 0),
        }
    if _field(usage, "input_tokens") is not None and _field(usage, "input_tokens_details") is not None:
        return {
            "input_tokens": int(_field(usage, "input_tokens")),
            "cached_tokens": int(_field(_field(usage, "input_tokens_details"), "cached_tokens") or 0),
            "output_tokens": int(_field(usage, "output_tokens") or 0),
        }
    if _field(usage, "input_tokens") is not None:
        cache_read = int(_field(usage, "cache_read_input_tokens") or 0)
        cache_write = int(_field(usage, "cache_creation_input_tokens") or 0)
        return {
            "input_tokens": int(_field(usage, "input_tokens")) + cache_read + cache_write,
            "cached_tokens": cache_read,
            "output_tokens": int(_field(usage, "output_tokens") or 0),
        }
    raise ValueError(f"unknown usage shape: {usage!r}")


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


class Client:
    """The REST API with retries (see the module docstring).

    `request_timeout` (30 s) bounds one HTTP exchange whole (a long-poll gets its wait on top);
    `max_retries` (4) retries after the first attempt; `backoff_base` (0.5 s) and `backoff_cap`
    (30 s) shape the waits between them; `max_response_bytes` (64 MiB) caps what is read of one
    response.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        request_timeout: float = 30.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        origin = _origin(self.base_url)
        if origin is None:
            raise ValueError(f"base_url: expected http://host[:port] or https://host[:port], got {base_url!r}")
        self._origin = origin
        self.token = token
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.max_response_bytes = max_response_bytes

    # ------------------------------------------------------------------ transport

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        idempotent: bool,
        timeout: float | None = None,
        stop_at: float | None = None,
        meta: dict[str, Any] | None = None,
    ) -> tuple[int, Any]:
        """One API call, retried as the module docstring says; `idempotent` allows retrying a
        connection error (the request may have reached the server). No retry waits past `stop_at`
        (a `time.monotonic()` value): the last error is raised instead."""
        attempt = 0
        while True:
            try:
                return self._send(method, path, body, headers, timeout or self.request_timeout, meta)
            except (RateLimited, ServiceUnavailable) as exc:
                retry_after = exc.retry_after
                if attempt >= self.max_retries or (retry_after is not None and retry_after > self.backoff_cap):
                    raise
                delay = self._backoff(attempt) if retry_after is None else retry_after + random.uniform(0, self.backoff_base)
                last = exc
            except (ConnectionFailed, OutcomeUnknown) as exc:
                if not idempotent or attempt >= self.max_retries:
                    raise
                retry_after = getattr(exc, "retry_after", None)
                delay = self._backoff(attempt) if retry_after is None else min(retry_after, self.backoff_cap)
                last = exc
            if stop_at is not None and time.monotonic() + delay >= stop_at:
                raise last
            time.sleep(delay)
            attempt += 1

    def _backoff(self, attempt: int) -> float:
        """Full jitter: a uniform wait up to the capped exponential step."""
        return random.uniform(0, min(self.backoff_cap, self.backoff_base * 2**attempt))

    def _send(self, method: str, path: str, body: Any, headers: dict[str, str] | None, timeout: float,
              meta: dict[str, Any] | None = None) -> tuple[int, Any]:
        """One request (and the same-origin GET redirects it meets) within one deadline; the JSON
        object of a success, or the typed error of anything else. `meta` (when given) gets the
        success's `retry_after` (seconds or None)."""
        deadline = time.monotonic() + timeout
        url = path if path.startswith(("http://", "https://")) else f"{self.base_url}{path}"
        data = None if body is None else body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        sent = {"Authorization": f"Token {self.token}", "Accept": "application/json", **(headers or {})}
        if data is not None:
            sent["Content-Type"] = "application/json"
        for _ in range(MAX_REDIRECTS + 1):
            if _origin(url) != self._origin:
                # Checked before anything is sent: the token goes to base_url's origin only.
                raise ProtocolError(f"{url}: not the origin of base_url {self.base_url}; not requested, so the token "
                                    "stays with it")
            status, response_headers, raw = self._exchange(method, url, data, sent, deadline)
            if status not in REDIRECTS:
                answer = status, _interpret(status, response_headers, raw, url)
                if meta is not None:
                    meta["retry_after"] = retry_after_seconds(response_headers.get("Retry-After"))
                return answer
            location = response_headers.get("Location")
            target = urllib.parse.urljoin(url, location) if location else None
            if method != "GET" or target is None or _origin(target) != self._origin:
                raise ProtocolError(f"HTTP {status} from {url} to {(location or '(no Location)')[:200]!r}: not followed "
                                    "(only a GET to the same origin is), so the token is not sent there", status=status)
            url = target
        raise ProtocolError(f"more than {MAX_REDIRECTS} redirects from {path}")

    def _exchange(self, method: str, url: str, data: bytes | None, headers: dict[str, str],
                  deadline: float) -> tuple[int, http.client.HTTPMessage, bytes]:
        """Status, headers and body (at most max_response_bytes) of one HTTP exchange, all before
        `deadline`: a watchdog shuts the socket down then, whatever recv it is blocked in."""
        parts = urllib.parse.urlsplit(url)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimedOut(f"{url}: no time left for the request", errors=["deadline"])
        connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = connection_class(parts.hostname, parts.port, timeout=remaining)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            if connection.sock is not None:
                try:
                    connection.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        watchdog = threading.Timer(remaining, expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=data,
                               headers=headers)
            response = connection.getresponse()
            declared = response.getheader("Content-Length")
            if declared and declared.strip().isdigit() and int(declared) > self.max_response_bytes:
                raise ResponseTooLarge(f"{url}: Content-Length {declared.strip()[:20]} is more than max_response_bytes "
                                       f"{self.max_response_bytes}", status=response.status)
            chunks, size = [], 0
            while chunk := response.read(min(1 << 16, self.max_response_bytes + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_response_bytes:
                    raise ResponseTooLarge(f"{url}: the response is more than max_response_bytes "
                                           f"{self.max_response_bytes}", status=response.status)
            if expired.is_set():  # a shutdown can read as a clean end of a body without a length
                raise TimeoutError("deadline")
            if response.length:  # read(amt) ends quietly at a close short of the Content-Length
                raise http.client.IncompleteRead(b"".join(chunks), response.length)
            return response.status, response.headers, b"".join(chunks)
        except _CONNECTION_ERRORS as exc:
            if expired.is_set() or time.monotonic() >= deadline:
                raise RequestTimedOut(f"{url}: no whole response within the request's deadline "
                                      f"({self.request_timeout} s, plus a long-poll's wait)", errors=["timed out"]) from None
            reason = getattr(exc, "reason", None) or str(exc)[:200] or exc.__class__.__name__
            raise ConnectionFailed(f"cannot reach {url}: {reason}") from None
        finally:
            watchdog.cancel()
            connection.close()

    # ------------------------------------------------------------------ API

    def submit(
        self, request: dict[str, Any], *, idempotency_key: str | None = None, traceparent: str | None = None
    ) -> dict[str, Any]:
        """POST the request (202 a new job, 200 the job an earlier submit with this key made).

        Without `idempotency_key` a uuid4 is sent, the same on every retry of this call.
        """
        return self._submit(request, idempotency_key=idempotency_key, traceparent=traceparent)

    def _submit(self, request: dict[str, Any], *, idempotency_key: str | None, traceparent: str | None,
                stop_at: float | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key or f"ctxeng-client-{uuid.uuid4()}"}
        if traceparent:
            headers["traceparent"] = traceparent
        return self._call("POST", "/api/v1/assemblies/", request, headers, idempotent=True, stop_at=stop_at)[1]

    def job(self, job_id: str, *, wait: float = 0, include: tuple[str, ...] = ()) -> dict[str, Any]:
        """The job; with `wait` (s, at most 30) the server answers once it is final or the wait
        ends; `include` ("manifest", "input") adds those documents to a final job."""
        return self._job(job_id, wait=wait, include=include)

    def _job(self, job_id: str, *, wait: float, include: tuple[str, ...], stop_at: float | None = None,
             meta: dict[str, Any] | None = None) -> dict[str, Any]:
        query = {}
        wait = round(min(wait, MAX_WAIT), 1)
        if wait > 0:
            query["wait"] = f"{wait:g}"
        if include:
            query["include"] = ",".join(include)
        path = f"/api/v1/assemblies/{urllib.parse.quote(job_id, safe='')}/" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        return self._call("GET", path, idempotent=True, timeout=self.request_timeout + wait, stop_at=stop_at,
                          meta=meta)[1]

    def manifest(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/assemblies/{job_id}/manifest/", idempotent=True)[1]

    def input(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/assemblies/{job_id}/input/", idempotent=True)[1]

    def report_usage(self, job_id: str, *, input_tokens: int, cached_tokens: int = 0, output_tokens: int = 0) -> dict:
        """Retried like a GET: the server replaces the assembly's one report, so a repeat is harmless."""
        body = {"input_tokens": input_tokens, "cached_tokens": cached_tokens, "output_tokens": output_tokens}
        return self._call("POST", f"/api/v1/assemblies/{job_id}/usage/", body, idempotent=True)[1]

    def record_steps(self, body: dict[str, Any] | bytes) -> dict[str, Any]:
        """POST steps assembled in the agent's process (`{"steps": [{idempotency_key, request,
        manifest}], "dropped": [...]}`, or that body already encoded as JSON); one result per step.
        Retried like a GET: the service stores each step once per idempotency key."""
        return self._call("POST", "/api/v1/recorded-steps/", body, idempotent=True)[1]

    def close_run(self, run_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """Close a run and its task: later steps of the run are blocked with a task_closed event."""
        body = {"tenant": tenant} if tenant else {}
        return self._call("POST", f"/api/v1/runs/{urllib.parse.quote(run_id, safe='')}/close/", body, idempotent=True)[1]

    def assemble(
        self,
        request: dict[str, Any],
        *,
        wait: bool = True,
        timeout: float = 120.0,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> Assembly:
        """Submit, and with `wait`, long-poll until final (`timeout` s in all) with the manifest
        and input in the final answer: two requests when the job is final within 30 s."""
        deadline = time.monotonic() + timeout
        submitted = self._submit(request, idempotency_key=idempotency_key, traceparent=traceparent, stop_at=deadline)
        job_id = _field_of(submitted, "id", "submit")
        if not wait:
            return Assembly(id=job_id, status=_field_of(submitted, "status", "submit"), job=submitted, client=self)
        while True:
            if time.monotonic() >= deadline:
                raise Timeout(f"assembly {job_id} not final after {timeout} s", errors=["timeout"])
            meta: dict[str, Any] = {}
            job = self._job(job_id, wait=max(deadline - time.monotonic(), 0), include=("manifest", "input"),
                            stop_at=deadline, meta=meta)
            status = _field_of(job, "status", f"assembly {job_id}")
            if status in FINAL:
                break
            if time.monotonic() >= deadline:
                raise Timeout(f"assembly {job_id} still {status} after {timeout} s", errors=[status])
            if meta.get("retry_after") is not None:  # the server's long-poll caps: answered at once, not waited
                time.sleep(min(meta["retry_after"], max(deadline - time.monotonic(), 0)))
        if job["status"] == "failed":
            raise AssemblyFailed(f"assembly {job_id} failed: {job.get('error')}", errors=[job.get("error") or "failed"])
        manifest = job.pop("manifest", None)
        provider_input = job.pop("input", None)
        return Assembly(id=job_id, status=job["status"], job=job, manifest=manifest, input=provider_input, client=self)


def retry_after_seconds(value: str | None) -> float | None:
    """A `Retry-After` header in seconds from now: delta-seconds or an HTTP-date (RFC 9110 10.2.3);
    None when absent or unreadable, 0 for a date already past."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # an HTTP-date is GMT; a date without a zone is read as such
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL, with the scheme's default port; None otherwise."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


def _decode(raw: bytes) -> tuple[Any, str | None]:
    """The JSON value of a body, or None and what is wrong with it."""
    if not raw:
        return None, "an empty body"
    try:
        return json.loads(raw.decode("utf-8")), None
    except UnicodeDecodeError:
        return None, "a body that is not UTF-8"
    except RecursionError:
        return None, "JSON nested deeper than this Python parses"
    except ValueError as exc:
        snippet = raw[:120].decode("utf-8", "replace")
        return None, f"not JSON ({getattr(exc, 'msg', exc)}): {snippet!r}"


def _interpret(status: int, headers: http.client.HTTPMessage, raw: bytes, url: str) -> dict[str, Any]:
    """A success's JSON object, or the typed error for the status (module docstring)."""
    payload, problem = _decode(raw)
    if status in SUCCESS:
        if problem is not None:
            raise ProtocolError(f"HTTP {status} from {url}: {problem}", status=status)
        if not isinstance(payload, dict):
            raise ProtocolError(f"HTTP {status} from {url}: a JSON {type(payload).__name__}, not an object", status=status)
        return payload
    errors = _errors_of(payload, raw, status)
    if status in _RETRY_STATUS:
        raise _RETRY_STATUS[status]("; ".join(errors), status=status, errors=errors,
                                    retry_after=retry_after_seconds(headers.get("Retry-After")))
    if status in _BY_STATUS:
        raise _BY_STATUS[status]("; ".join(errors), status=status, errors=errors)
    if 400 <= status < 500:
        raise ClientError("; ".join(errors), status=status, errors=errors)
    if 500 <= status < 600:
        raise ServerError("; ".join(errors), status=status, errors=errors)
    raise ProtocolError(f"HTTP {status} from {url}: a status the API does not answer with", status=status, errors=errors)


def _errors_of(payload: Any, raw: bytes, status: int) -> list[str]:
    """The `errors` of an error body as strings, whatever shape the server gave them."""
    errors = payload.get("errors") if isinstance(payload, dict) else None
    if isinstance(errors, list) and errors and all(isinstance(error, str) for error in errors):
        return errors
    if errors is not None:
        return [json.dumps(errors)[:500]]
    text = raw[:200].decode("utf-8", "replace").strip()
    return [f"HTTP {status}" + (f": {text}" if text else "")]


def _field_of(payload: dict[str, Any], name: str, what: str) -> str:
    """A string field the API always sends (`id`, `status`); ProtocolError when it is missing."""
    value = payload.get(name)
    if not isinstance(value, str):
        raise ProtocolError(f"{what}: the answer has no string {name!r}: {json.dumps(payload)[:200]}")
    return value
