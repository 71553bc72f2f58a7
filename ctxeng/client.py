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
    assembly.report_usage(response)   # the SDK's usage -> the assembly's usage/ endpoint

`traceparent=` on `assemble`/`submit` (a W3C trace context header value) makes the assembly a
child span of the agent's own span when the server exports OpenTelemetry traces.

Errors are typed: InvalidRequest (400, `.errors` with field paths), AuthError (401/403),
NotFound (404), Conflict (409), PayloadTooLarge (413), AssemblyFailed (the job ended `failed`),
Timeout (not final within `timeout`). All derive from ClientError.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

FINAL = ("ready", "blocked", "failed")


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


class AssemblyFailed(ClientError):
    """The job ended `failed` (an engine error, or its worker died CTXENG_MAX_ATTEMPTS times)."""


class Timeout(ClientError):
    """The job was not final within the timeout; it is still queued or running on the server."""


_BY_STATUS = {400: InvalidRequest, 401: AuthError, 403: AuthError, 404: NotFound, 409: Conflict, 413: PayloadTooLarge}


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
        """The adapter that serialized `input` (`openai_chat` | `anthropic_messages`), from the manifest."""
        return ((self.manifest or {}).get("assembly") or {}).get("adapter", {}).get("name")

    def openai_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """`openai.OpenAI().chat.completions.create(**kwargs)` takes these as they are.

        A copy of the payload (`model`, `messages`, `tools` when any); `overrides` are added on
        top (`temperature=0`, `max_completion_tokens=...`), never merged into the messages.
        """
        return {**self._payload("openai_chat"), **overrides}

    def anthropic_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """`anthropic.Anthropic().messages.create(**kwargs)` takes these as they are.

        A copy of the payload (`model`, `max_tokens`, `system`, `messages`, `tools` when any).
        """
        return {**self._payload("anthropic_messages"), **overrides}

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
    `completion_tokens`. Anthropic: `input_tokens` counts only the uncached part, so the prompt
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
    def __init__(self, base_url: str, token: str, *, request_timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.request_timeout = request_timeout

    # ------------------------------------------------------------------ transport

    def _call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        url = path if path.startswith("http") else f"{self.base_url}{path}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Token {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as response:  # noqa: S310
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as exc:
            payload = _decode(exc.read())
            errors = payload.get("errors") if isinstance(payload, dict) else None
            errors = errors or [f"HTTP {exc.code}"]
            error_class = _BY_STATUS.get(exc.code, ServerError)
            raise error_class("; ".join(errors), status=exc.code, errors=errors) from None
        except urllib.error.URLError as exc:
            raise ClientError(f"cannot reach {url}: {exc.reason}") from None

    # ------------------------------------------------------------------ API

    def submit(
        self, request: dict[str, Any], *, idempotency_key: str | None = None, traceparent: str | None = None
    ) -> dict[str, Any]:
        headers = {}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        if traceparent:
            headers["traceparent"] = traceparent
        return self._call("POST", "/api/v1/assemblies/", request, headers)[1]

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/assemblies/{job_id}/")[1]

    def manifest(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/assemblies/{job_id}/manifest/")[1]

    def input(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/assemblies/{job_id}/input/")[1]

    def report_usage(self, job_id: str, *, input_tokens: int, cached_tokens: int = 0, output_tokens: int = 0) -> dict:
        body = {"input_tokens": input_tokens, "cached_tokens": cached_tokens, "output_tokens": output_tokens}
        return self._call("POST", f"/api/v1/assemblies/{job_id}/usage/", body)[1]

    def close_run(self, run_id: str, *, tenant: str | None = None) -> dict[str, Any]:
        """Close a run and its task: later steps of the run are blocked with a task_closed event."""
        body = {"tenant": tenant} if tenant else {}
        return self._call("POST", f"/api/v1/runs/{urllib.parse.quote(run_id, safe='')}/close/", body)[1]

    def assemble(
        self,
        request: dict[str, Any],
        *,
        wait: bool = True,
        timeout: float = 120.0,
        poll_interval: float = 0.5,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> Assembly:
        """Submit, and with `wait`, poll until final and fetch the manifest and input."""
        submitted = self.submit(request, idempotency_key=idempotency_key, traceparent=traceparent)
        job_id = submitted["id"]
        if not wait:
            return Assembly(id=job_id, status=submitted["status"], job=submitted, client=self)
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while job["status"] not in FINAL:
            if time.monotonic() >= deadline:
                raise Timeout(f"assembly {job_id} still {job['status']} after {timeout} s", errors=[job["status"]])
            time.sleep(poll_interval)
            job = self.job(job_id)
        if job["status"] == "failed":
            raise AssemblyFailed(f"assembly {job_id} failed: {job.get('error')}", errors=[job.get("error") or "failed"])
        manifest = self.manifest(job_id)
        provider_input = self.input(job_id) if job["status"] == "ready" else None
        return Assembly(id=job_id, status=job["status"], job=job, manifest=manifest, input=provider_input, client=self)


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"errors": [raw[:200].decode("utf-8", "replace")]}
