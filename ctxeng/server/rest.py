"""REST plumbing shared by the apps: reading JSON bodies, the error format, the exception handler.

Every error the API returns is JSON: `{"errors": ["path: what is wrong", ...]}` with the engine's
field paths for invalid bodies (400), a plain message for auth (401/403), not-found (404), conflicts
(409), oversized bodies (413) and bodies that are not UTF-8 JSON (415: another media type or
charset). Views parse bodies with `read_json` and validate them with the engine's pydantic models,
so nothing here re-declares the engine's shapes. Integer query parameters are read by `query_int`
(pages by `BoundedPagination`), ids in paths and queries checked by `id_param`: 400 naming them.

`read_json` is the one JSON edge, bounded by `ctxeng.engine.limits`: nesting deeper than
MAX_JSON_DEPTH is refused by a scan of the raw bytes before the parser (which recurses once per
level) runs; NaN, Infinity, numbers that overflow a float and integers beyond MAX_JSON_INTEGER
(a 5,000-digit one included) are refused by field path, as are NUL (PostgreSQL cannot store it),
a lone surrogate (`"\\ud800"`: no Unicode character, so it can be neither hashed nor stored) and a
key named twice in one object; a body that is not UTF-8 is refused whole.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from typing import Any, TypeVar

from django.conf import settings
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter
from pydantic import BaseModel
from rest_framework import exceptions, status
from rest_framework.authtoken.models import Token
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle

from ctxeng.engine import InvalidInput
from ctxeng.engine.errors import InputTooLarge, validate
from ctxeng.engine.errors import loads_bounded as engine_loads_bounded
from ctxeng.engine.limits import id_problem
from ctxeng.server.errors import ServiceError
from ctxeng.server.params import MAX_QUERY_INT, BadParameter, whole_number
from ctxeng.server.rate_limits import SLIDING_WINDOW

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)


class ApiError(exceptions.APIException):
    """An error with a status and one or more messages, rendered as `{"errors": [...]}`."""

    def __init__(self, status_code: int, *errors: str) -> None:
        self.status_code = status_code
        self.errors = list(errors)
        super().__init__(detail="; ".join(errors))


class PayloadTooLarge(ApiError):
    def __init__(self, size: int | None = None) -> None:
        limit = settings.CTXENG_MAX_REQUEST_BYTES
        what = f"{size} bytes" if size is not None else "the body"
        super().__init__(
            status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            f"body: {what} exceeds the limit of {limit} bytes (CTXENG_MAX_REQUEST_BYTES)",
        )


class AgentTokenThrottle(SimpleRateThrottle):
    """At most settings.CTXENG_THROTTLE_AGENT requests per token-authenticated user (429 beyond).

    A sliding window of the request times of each user. DRF keeps that window as a list it reads,
    appends to and writes back: two processes (or threads) that read the same list each add one
    and each write theirs, so 8 threads let 634 of 700 requests through a limit of 600. Here the
    check and the count are one step: with REDIS_URL a Lua script on a sorted set in the
    `throttle` cache's Redis (one limit for every web process), else under a lock in this process.
    Session users (the dashboard) are not throttled here; an empty setting disables the limit.
    A cache outage lets requests through rather than failing them.
    """

    scope = "agent"
    _local_lock = threading.Lock()

    def __init__(self) -> None:
        from django.core.cache import caches

        self.cache = caches["throttle"]
        self.rate = settings.CTXENG_THROTTLE_AGENT or None
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self.retry_after: float | None = None

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not isinstance(request.auth, Token):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}

    def allow_request(self, request: Request, view: Any) -> bool:
        try:
            if self.rate is None or self.get_cache_key(request, view) is None:
                return True
            if isinstance(self.cache, RedisCache):
                return self._allow_in_redis(self.get_cache_key(request, view))
            with self._local_lock:
                return super().allow_request(request, view)
        except Exception:  # noqa: BLE001 - see docstring
            logger.warning("throttle cache unavailable; request allowed", exc_info=True)
            return True

    def _allow_in_redis(self, key: str) -> bool:
        full_key = self.cache.make_and_validate_key(key)
        client = self.cache._cache.get_client(full_key, write=True)  # noqa: SLF001 - Django's redis client
        script = client.register_script(SLIDING_WINDOW)
        now = self.timer()
        allowed, oldest = script(keys=[full_key],
                                 args=[repr(now), self.duration, self.num_requests, f"{now!r}:{uuid.uuid4().hex}"])
        if int(allowed):
            return True
        self.retry_after = max(float(oldest) + self.duration - now, 0.0)
        return False

    def wait(self) -> float | None:
        return self.retry_after if self.retry_after is not None else super().wait()


def query_int(request: Request, name: str, *, default: int | None = None, minimum: int = 0,
              maximum: int = MAX_QUERY_INT) -> int | None:
    """The whole-number query parameter `name` (`default` when absent); 400 naming it when it is
    not ASCII digits within [minimum, maximum] (`ctxeng.server.params.whole_number`)."""
    value = request.query_params.get(name)
    if value is None:
        return default
    try:
        return whole_number(value, name=name, minimum=minimum, maximum=maximum)
    except BadParameter as exc:
        raise ApiError(status.HTTP_400_BAD_REQUEST, str(exc)) from None


def id_param(name: str, value: str | None) -> str | None:
    """An id from a path or a query (`run_id`, `item_id` ...), held to the rule every id was held
    to at submit (`ctxeng.engine.limits.id_problem`): 400 naming it, never a lookup of what no id
    can be."""
    problem = id_problem(value) if value else None
    if problem:
        raise ApiError(status.HTTP_400_BAD_REQUEST, f"{name}: {problem}")
    return value


# A page of any list: PAGE_SIZE rows unless `limit` asks for another count, up to this.
MAX_PAGE_LIMIT = 1000


class BoundedPagination(LimitOffsetPagination):
    """`?limit=&offset=` as DRF reads them, bounded: a limit from 1 to MAX_PAGE_LIMIT, an offset
    from 0 to MAX_QUERY_INT, anything else a 400 naming the parameter (DRF ignores a value it
    cannot read and passes any number it can to the database, where a huge one is a 500)."""

    max_limit = MAX_PAGE_LIMIT

    def get_limit(self, request: Request) -> int | None:
        return query_int(request, self.limit_query_param, default=self.default_limit, minimum=1, maximum=self.max_limit)

    def get_offset(self, request: Request) -> int:
        return query_int(request, self.offset_query_param, default=0)  # type: ignore[return-value]


# What the list operations document for their pagination (the views paginate by hand, so
# drf-spectacular would not know of these).
PAGINATION_PARAMETERS = [
    OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LIMIT},
                     description=f"rows per page (default {settings.REST_FRAMEWORK['PAGE_SIZE']}, at most {MAX_PAGE_LIMIT})"),
    OpenApiParameter("offset", {"type": "integer", "minimum": 0, "maximum": MAX_QUERY_INT},
                     description="rows to skip"),
]


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _check_charset(content_type: str | None) -> None:
    """415 for a `charset` other than UTF-8: JSON is UTF-8 (RFC 8259 §8.1), and a body declared
    as Latin-1 or UTF-16 would otherwise be read as UTF-8 and stored as text the client did not send."""
    for param in (content_type or "").split(";")[1:]:
        name, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise ApiError(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                           f"Content-Type: charset {charset!r} is not accepted; send JSON encoded as UTF-8")


def loads_bounded(raw: bytes) -> Any:
    """Parse a JSON body within `ctxeng.engine.limits` (the engine's one bounded reader, which the
    CLI uses too); ApiError(400) names what is refused."""
    try:
        return engine_loads_bounded(raw, what="body")
    except InvalidInput as exc:
        raise ApiError(status.HTTP_400_BAD_REQUEST, *exc.errors) from None


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser (`request.data`) with the same bounds as `read_json`; the API's views
    read bodies with `read_json`, this keeps any view that uses `request.data` on the same edge."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        _check_charset(media_type)
        return loads_bounded(stream.read() if stream is not None else b"")


def read_json(request: Request, *, empty: Any = None) -> Any:
    """The request body as JSON, refusing bodies over the limit (413), bodies declared as another
    media type (415) and malformed or out-of-bounds JSON (400, see `loads_bounded`).

    Reads the raw body through Django so `DATA_UPLOAD_MAX_MEMORY_SIZE` applies (DRF's parsers
    stream past it). An empty body is an error unless `empty` gives its value.
    """
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > settings.CTXENG_MAX_REQUEST_BYTES:
        raise PayloadTooLarge(declared)
    try:
        raw = request._request.body  # noqa: SLF001 - the Django request enforces the size limit
    except RequestDataTooBig:
        raise PayloadTooLarge() from None
    if not raw.strip():
        if empty is not None:
            return empty
        raise ApiError(status.HTTP_400_BAD_REQUEST, "body: expected a JSON object, got an empty body")
    content_type = request.META.get("CONTENT_TYPE", "")
    if not _is_json(content_type):
        raise ApiError(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                       f"Content-Type: {content_type or 'none'!s} is not JSON; send application/json")
    _check_charset(content_type)
    if raw.startswith(b"\xef\xbb\xbf"):
        # JSON forbids it (RFC 8259 8.1); Python's decoder would read past it, other parsers not.
        raise ApiError(status.HTTP_400_BAD_REQUEST,
                       "body: starts with a UTF-8 byte-order mark (EF BB BF), which JSON does not allow; send the JSON without it")
    return loads_bounded(raw)


def read_model(request: Request, model: type[M], *, what: str) -> M:
    """Parse and validate a body with a pydantic model; errors name field paths (400)."""
    return validate(model, read_json(request), what=what)


TOKEN_HINT = ("An agent token comes from the server: `python manage.py issue_token USERNAME --tenant TENANT "
              "--role agent` prints one; send it as `Authorization: Token <token>`.")


def errors_response(status_code: int, errors: list[str]) -> Response:
    return Response({"errors": errors}, status=status_code)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    from ctxeng.server.errors import Immutable

    if isinstance(exc, InputTooLarge):
        return errors_response(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, exc.errors)
    if isinstance(exc, InvalidInput):
        return errors_response(status.HTTP_400_BAD_REQUEST, exc.errors)
    if isinstance(exc, ServiceError):
        response = errors_response(exc.status_code, exc.errors)
        if getattr(exc, "retry_after", None) is not None:  # a quota's rate: when to try again
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, Immutable):
        return errors_response(status.HTTP_409_CONFLICT, [str(exc)])
    if isinstance(exc, ApiError):
        return errors_response(exc.status_code, exc.errors)
    if isinstance(exc, RequestDataTooBig):
        return errors_response(PayloadTooLarge.status_code, PayloadTooLarge().errors)
    if isinstance(exc, exceptions.ParseError):
        return errors_response(status.HTTP_400_BAD_REQUEST, [f"body: {exc.detail}"])
    if isinstance(exc, Http404):
        return errors_response(status.HTTP_404_NOT_FOUND, [str(exc) or "not found"])
    # Imported here: rest_framework.views reads DEFAULT_PARSER_CLASSES (this module's parser) when
    # it is first imported, so importing it at the top made a cycle whenever this module loaded
    # first (DRF's pagination check in a Celery worker's start-up imports BoundedPagination).
    from rest_framework.views import exception_handler as drf_exception_handler

    response = drf_exception_handler(exc, context)
    if response is not None:
        detail = response.data
        if isinstance(detail, dict) and "detail" in detail:
            messages = [str(detail["detail"])]
        elif isinstance(detail, list):
            messages = [str(d) for d in detail]
        else:
            messages = [f"{k}: {v}" for k, v in (detail or {}).items()]
        if isinstance(exc, (exceptions.AuthenticationFailed, exceptions.NotAuthenticated)):
            # A missing or bad token: say where a token comes from, not only that this one is wrong.
            messages = [f"{' '.join(messages)} {TOKEN_HINT}"]
        response.data = {"errors": messages}
        return response
    from ctxeng.server.views import database_unavailable, service_unavailable

    if database_unavailable(exc):  # an outage, not a bug: the client should retry, and may
        logger.warning("database unavailable in %s: %s", context.get("view"), exc)
        outage = service_unavailable(context["request"])
        return Response(json.loads(outage.content), status=outage.status_code,
                        headers={"Retry-After": outage["Retry-After"]})
    # Unexpected: log the traceback for the operator, give the client JSON without one.
    logger.exception("unhandled error in %s", context.get("view"))
    return errors_response(status.HTTP_500_INTERNAL_SERVER_ERROR, ["internal error; the server log has details"])
