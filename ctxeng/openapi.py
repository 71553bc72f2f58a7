"""OpenAPI post-processing: every operation documents the errors the API can answer with.

All errors share one shape, `{"errors": ["path: message", ...]}` (ctxeng.rest), so instead of
repeating them on each view this hook adds the `Errors` component and, per operation, the
statuses any authenticated endpoint can give (400 malformed, 401 no/invalid/revoked token,
403 tenant or role, 404 outside your tenants, 405 method, 413 too large, 429 throttled) plus 409
where the view declared it. A view's own declaration of a status wins.
"""

from __future__ import annotations

from typing import Any

ERRORS_SCHEMA = {
    "type": "object",
    "properties": {"errors": {"type": "array", "items": {"type": "string"}}},
    "required": ["errors"],
}
COMMON = {
    "400": "invalid request: malformed JSON or a field that fails validation (named by its path)",
    "401": "no valid token (missing, unknown or revoked)",
    "403": "not a member of the tenant, or missing the role",
    "404": "not found, or outside your tenants",
    "405": "method not allowed",
    "413": "body larger than CTXENG_MAX_REQUEST_BYTES",
    "429": "throttled (CTXENG_THROTTLE_AGENT); retry after the Retry-After header",
}
ERROR_RESPONSE = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}}


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    result.setdefault("components", {}).setdefault("schemas", {})["Errors"] = ERRORS_SCHEMA
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            responses = operation.setdefault("responses", {})
            for code, description in COMMON.items():
                if code not in responses:
                    responses[code] = {**ERROR_RESPONSE, "description": description}
            for code, response in responses.items():
                if code.startswith(("4", "5")) and _undocumented_object(response):
                    response["content"] = ERROR_RESPONSE["content"]
                    response["description"] = response.get("description") or COMMON.get(code, "conflict")
    return result


def _undocumented_object(response: dict[str, Any]) -> bool:
    schema = (response.get("content") or {}).get("application/json", {}).get("schema") or {}
    return schema.get("type") == "object" and "properties" not in schema and "$ref" not in schema
