"""OpenAPI post-processing: every operation documents the errors the API can answer with.

All errors share one shape, `{"errors": ["path: message", ...]}` (ctxeng.server.rest), so instead of
repeating them on each view this hook adds the `Errors` component and, per operation, the
statuses any authenticated endpoint can give (400 malformed, 401 no/invalid/revoked token,
403 tenant or role, 404 outside your tenants, 405 method, 413 too large, 429 throttled or a large
body beyond its tenant's bound, 503 database outage or large bodies beyond the service's bound), 415 on
operations that take a body, plus 409 where the view declared it. A view's own declaration of a
status wins.

Operation ids are `<resource>_<action>` (`assemblies_submit`, `assemblies_get`,
`assemblies_manifest`, `policies_revisions_publish`, ...), set on each view; every response the
API gives has a declared shape (the views' pydantic `*Out` models, the engine's JSON Schemas), so
a generated client is typed end to end.

`add_links` adds OpenAPI links from what an operation creates to the operations that read or act
on it (a submitted assembly to its job, manifest, input and usage; a created revision to its
detail, edit, publish and diff), for clients and for schemathesis's stateful tests.
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
    "413": "body larger than CTXENG_MAX_REQUEST_BYTES, or a write past a tenant's stored-bytes quota (CTXENG_QUOTA_*)",
    "429": "throttled (CTXENG_THROTTLE_AGENT), past a tenant's rate quota (CTXENG_QUOTA_*), or a body over "
           "CTXENG_LARGE_BODY_BYTES while the tenant's large requests are at CTXENG_LARGE_REQUESTS_MAX_PER_TENANT "
           "(refused unread); retry after the Retry-After header",
    "503": "the database is unavailable, or a body over CTXENG_LARGE_BODY_BYTES while the service's large requests "
           "are at CTXENG_LARGE_REQUESTS_MAX_TOTAL; nothing was applied: retry after the Retry-After header",
}
UNSUPPORTED_MEDIA_TYPE = "a body sent with a Content-Type other than application/json"
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
            if "requestBody" in operation and "415" not in responses:
                responses["415"] = {**ERROR_RESPONSE, "description": UNSUPPORTED_MEDIA_TYPE}
            for code, response in responses.items():
                if code.startswith(("4", "5")) and _undocumented_object(response):
                    response["content"] = ERROR_RESPONSE["content"]
                    response["description"] = response.get("description") or COMMON.get(code, "conflict")
    return result


def _undocumented_object(response: dict[str, Any]) -> bool:
    schema = (response.get("content") or {}).get("application/json", {}).get("schema") or {}
    return schema.get("type") == "object" and "properties" not in schema and "$ref" not in schema


def _link(operation_id: str, **parameters: str) -> dict[str, Any]:
    return {"operationId": operation_id, "parameters": parameters}


_JOB = {"job_id": "$response.body#/id"}
_REVISION = {"policy_id": "$response.body#/policy_id", "revision": "$response.body#/revision"}
LINKS: dict[tuple[str, str], dict[str, dict[str, Any]]] = {
    ("assemblies_submit", "202"): {
        "GetAssembly": _link("assemblies_get", **_JOB),
        "GetManifest": _link("assemblies_manifest", **_JOB),
        "GetInput": _link("assemblies_input", **_JOB),
        "ReportUsage": _link("assemblies_usage", **_JOB),
    },
    ("assemblies_get", "200"): {
        "GetManifest": _link("assemblies_manifest", **_JOB),
        "GetInput": _link("assemblies_input", **_JOB),
        "CloseRun": _link("runs_close", run_id="$response.body#/run_id"),
    },
    ("artifacts_create", "201"): {
        "ListArtifact": _link("artifacts_list", **{"query.artifact_id": "$response.body#/artifact_id"}),
    },
    ("policies_revisions_create", "201"): {
        "GetRevision": _link("policies_revisions_get", **_REVISION),
        "UpdateRevision": _link("policies_revisions_update", **_REVISION),
        "PublishRevision": _link("policies_revisions_publish", **_REVISION),
        "ListRevisions": _link("policies_revisions_list", policy_id="$response.body#/policy_id"),
        "DiffRevision": _link(
            "policies_diff",
            policy_id="$response.body#/policy_id",
            **{"query.from": "$response.body#/revision", "query.to": "$response.body#/revision"},
        ),
    },
}


def add_links(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """The LINKS above, on the responses that create what they follow (an operation that is not
    published, e.g. in a partial schema, is skipped)."""
    operations = {
        operation.get("operationId"): operation
        for path_item in result.get("paths", {}).values()
        for operation in path_item.values()
        if isinstance(operation, dict)
    }
    for (operation_id, code), links in LINKS.items():
        response = operations.get(operation_id, {}).get("responses", {}).get(code)
        present = {name: link for name, link in links.items() if link["operationId"] in operations}
        if response is not None and present:
            response["links"] = present
    return result


# --------------------------------------------------------------------------- id rules

# The id parameters of paths, queries and headers, with the length limits the server holds them
# to (ctxeng.engine.limits), and the id properties of bodies (their maxLength comes from the models).
ID_PARAMETERS = {"run_id": "MAX_ID", "step_id": "MAX_ID", "policy_id": "MAX_ID", "Idempotency-Key": "MAX_ID",
                 "item_id": "MAX_ITEM_ID", "artifact_id": "MAX_ITEM_ID"}
ID_PROPERTIES = frozenset({"run_id", "step_id", "item_id", "call_id", "artifact_id", "result_item_id", "summary_id"})


def id_pattern() -> str:
    """The id rule (ctxeng.engine.limits.id_problem) as a JSON Schema pattern: not `.` or `..`, and
    no character of the unprintable categories. Basic Multilingual Plane only, written as \\uXXXX
    ranges, so ECMA-262 and Python read it alike; a surrogate is refused in every string anyway."""
    import unicodedata

    from ctxeng.engine.limits import UNPRINTABLE_CATEGORIES

    ranges: list[list[int]] = []
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF or unicodedata.category(chr(code)) not in UNPRINTABLE_CATEGORIES:
            continue
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    excluded = "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges)
    return rf"^(?!\.\.?$)[^{excluded}]*$"


def declare_id_rules(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Every id parameter and id property says what the server accepts: the pattern, and for a
    parameter its maxLength (a body's comes from its model)."""
    from ctxeng.engine import limits

    pattern = id_pattern()
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
                limit = ID_PARAMETERS.get(parameter.get("name"))
                schema = parameter.get("schema", {})
                if limit and schema.get("type") == "string":
                    schema.update(pattern=pattern, maxLength=getattr(limits, limit))
    for schema in result.get("components", {}).get("schemas", {}).values():
        _declare_properties(schema, pattern)
    return result


def _declare_properties(schema: Any, pattern: str) -> None:
    if isinstance(schema, dict):
        for name, prop in (schema.get("properties") or {}).items():
            if name in ID_PROPERTIES and isinstance(prop, dict) and prop.get("type") == "string":
                prop["pattern"] = pattern
        for value in schema.values():
            if isinstance(value, dict | list):
                _declare_properties(value, pattern)
    elif isinstance(schema, list):
        for value in schema:
            _declare_properties(value, pattern)
