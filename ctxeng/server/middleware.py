"""Request middleware that must not import DRF (it loads before the URL conf and DRF's settings)."""

from __future__ import annotations

import io
import re

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

NUL = "\x00"
# C0 controls (NUL, newline, escape ...), DEL and the C1 controls: no path or query parameter of
# this product means one, PostgreSQL cannot store NUL at all, and the rest end up in logs and
# pages as invisible text.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _control_in(text: str) -> str | None:
    """What the first control character of `text` is, in words, if it has one."""
    found = CONTROL_CHARACTERS.search(text)
    if found is None:
        return None
    return "a NUL character" if found.group() == NUL else f"a control character (U+{ord(found.group()):04X})"


def _refusal(request: HttpRequest) -> str | None:
    """What is wrong with the request's path, query string or form fields, or None."""
    found = _control_in(request.path)
    if found:
        return f"path: contains {found}"
    for name, values in request.GET.lists():
        found = _control_in(name) or next((c for c in map(_control_in, values) if c), None)
        if found:
            return f"{name!r}: contains {found}"
    # Dashboard forms: a textarea legitimately holds newlines and tabs, so only NUL is refused
    # there (the API's JSON bodies are checked by ctxeng.server.rest.read_json).
    if (request.method == "POST" and not request.path.startswith("/api/")
            and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data")):
        for name, values in request.POST.lists():
            if NUL in name or any(NUL in v for v in values):
                return f"{name!r}: contains a NUL character"
    return None


class RejectControlCharactersMiddleware:
    """400 for a URL whose path or query holds a control character, on every path.

    Under /api/ the answer is the API's JSON error format; elsewhere the dashboard's HTML error
    page. Refused up front, the error names the parameter instead of reaching the database (500).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        problem = _refusal(request)
        if problem is None:
            return self.get_response(request)
        return problem_response(request, problem, 400)


class ChunkedBodyMiddleware:
    """A body sent with `Transfer-Encoding: chunked` and no Content-Length, read within the limit.

    Django reads a body only as far as its Content-Length, so a chunked body arrives as an empty
    one (`got an empty body`, even for 20 MB) — while gunicorn hands the WSGI app the de-chunked
    stream. This reads that stream up to CTXENG_MAX_REQUEST_BYTES: beyond it, 413 (JSON under
    /api/); within it, the request carries the body and its length as if the client had sent one.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not request.META.get("CONTENT_LENGTH"):
            limit = settings.CTXENG_MAX_REQUEST_BYTES
            body = request.META["wsgi.input"].read(limit + 1)
            if len(body) > limit:
                return too_large(request, limit)
            request.META["CONTENT_LENGTH"] = str(len(body))
            request._stream = LimitedStream(io.BytesIO(body), len(body))  # noqa: SLF001 - what Django reads
        return self.get_response(request)


def too_large(request: HttpRequest, limit: int) -> HttpResponse:
    return problem_response(request, f"body: more than the limit of {limit} bytes (CTXENG_MAX_REQUEST_BYTES)", 413)


def problem_response(request: HttpRequest, problem: str, status: int) -> HttpResponse:
    """A refusal made before any view: the API's JSON error format under /api/, elsewhere the
    dashboard's error page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"errors": [problem]}, status=status)
    return HttpResponse(render_to_string("ctxeng/bad_request.html", {"problem": problem}, request=request), status=status)
