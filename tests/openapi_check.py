"""Every API answer a test receives is checked against the published schema (docs/openapi.yaml).

`SchemaCheckedAPIClient` is the DRF test client the `api(user)` fixture hands out: after each
request under `/api/v1/` it finds the operation by its path template and method, and fails the test
when the status code is not documented for it or a JSON body does not match the documented schema
(the schemas are strict: required keys, no unlisted keys, types, formats of ids). So a view that
renames, drops or adds a response key, or answers a status its schema does not list, fails every
test that calls it, not only a test written to read that key. The schema itself is the one the code
generates (tests/service/test_openapi_schema.py), and what it says is the contract the typed client
and users code against.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from rest_framework.test import APIClient

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "docs" / "openapi.yaml"
API_PREFIX = "/api/v1/"
ROOT = "urn:ctxeng-openapi"


@functools.cache
def _document() -> tuple[dict[str, Any], Registry, list[tuple[re.Pattern[str], str, int]]]:
    doc = yaml.safe_load(SCHEMA_FILE.read_text())
    registry = Registry().with_resource(ROOT, Resource.from_contents(doc, default_specification=DRAFT202012))
    templates = []
    for template in doc["paths"]:
        # A parameter may hold a "/" (item ids do), so it matches any text; the template with the
        # most literal text is tried first (assemblies/{id}/input/ before assemblies/{id}/).
        pattern = re.compile("^" + re.sub(r"\\{[^}]+\\}", ".+", re.escape(template)) + "$", re.DOTALL)
        templates.append((pattern, template, -len(re.sub(r"\{[^}]+\}", "", template))))
    templates.sort(key=lambda t: t[2])
    return doc, registry, templates


def _pointer(*parts: str) -> str:
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


@functools.cache
def _validator(ref: str) -> Draft202012Validator:
    """One validator per documented response, built once for the whole test session."""
    return Draft202012Validator({"$ref": ref}, registry=_document()[1], format_checker=FormatChecker())


def problems(method: str, path: str, status: int, content_type: str, body: bytes) -> list[str]:
    """What the schema does not allow in this answer ([] when it conforms or is not an API path)."""
    if not path.startswith(API_PREFIX):
        return []
    doc, _, templates = _document()
    template = next((t for pattern, t, _ in templates if pattern.match(path)), None)
    if template is None:
        return [] if status == 404 else [f"{method} {path}: no operation of the schema has this path (answered {status})"]
    operation = doc["paths"][template].get(method.lower())
    if operation is None:
        return [] if status == 405 else [f"{method} {template}: not an operation of the schema (answered {status})"]
    responses = operation.get("responses", {})
    key = str(status) if str(status) in responses else ("default" if "default" in responses else None)
    if key is None:
        return [f"{method} {template}: status {status} is not documented (documented: {', '.join(sorted(responses))})"]
    content = responses[key].get("content") or {}
    media = content.get("application/json")
    if media is None or "schema" not in media:
        return []
    if "json" not in (content_type or ""):
        return [f"{method} {template} {status}: documented as application/json, answered {content_type!r}"]
    try:
        data = json.loads(body or b"null")
    except ValueError as exc:
        return [f"{method} {template} {status}: the body is not JSON ({exc})"]
    validator = _validator(f"{ROOT}#/" + _pointer("paths", template, method.lower(), "responses", key, "content",
                                                   "application/json", "schema"))
    return [
        f"{method} {template} {status}: {'.'.join(str(p) for p in err.absolute_path) or '(body)'}: {err.message}"
        for err in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    ][:10]


class SchemaCheckedAPIClient(APIClient):
    """An APIClient whose every `/api/v1/` answer must be one the schema documents (see the module)."""

    def request(self, **kwargs: Any):
        response = super().request(**kwargs)
        if getattr(response, "streaming", False):
            return response
        found = problems(kwargs.get("REQUEST_METHOD", "GET"), kwargs.get("PATH_INFO", ""), response.status_code,
                         response.get("Content-Type", ""), response.content)
        if found:
            raise AssertionError("the answer does not match docs/openapi.yaml:\n  " + "\n  ".join(found))
        return response
