"""Every surface a test can reach, enumerated from the product itself (issue 31).

A new endpoint or page is covered by the tests that walk these lists by construction, with no
list of URLs kept by hand:

- `api_operations(schema)`: every operation of the served OpenAPI document, with its path, query
  and header parameters (name, location, enum) and the JSON schema of its request body.
- `dashboard_routes()`: every route of the URL conf outside the API, the schema views and the
  admin, with its path parameters (name and converter) and the view function behind it.
- `view_inputs(view)`: the query and form parameters a view reads, found by reading its source
  (`request.GET.get("x")`, `request.POST["x"]`, `params.get("x")`, `"x" in request.POST`, ...)
  and the source of the module-level helpers it calls, transitively; and whether it answers htmx
  requests differently (`request.htmx`, `HX-Request`).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
from dataclasses import dataclass, field
from functools import cache
from typing import Any

# Prefixes that are not the product's own pages: the REST API (walked from the OpenAPI document
# instead), the schema and its docs, Django's admin.
NOT_DASHBOARD = ("api/", "admin/")

# The names a view reads its query string and form through. `params` is the inspector's QueryDict
# argument; `data`/`form` cover the same idiom in a new view.
_READERS = {"GET", "POST", "params", "query_params", "data", "form"}


@dataclass(frozen=True)
class Parameter:
    name: str
    location: str  # path, query, header
    enum: tuple[str, ...] = ()
    kind: str = "string"


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # with {name} placeholders
    operation_id: str
    parameters: tuple[Parameter, ...]
    body_schema: dict[str, Any] | None = None


def api_operations(schema: dict[str, Any]) -> list[Operation]:
    operations = []
    for path, item in sorted(schema.get("paths", {}).items()):
        shared = item.get("parameters") or []
        for method in ("get", "post", "put", "patch", "delete"):
            op = item.get(method)
            if op is None:
                continue
            params = []
            for raw in [*shared, *(op.get("parameters") or [])]:
                raw = resolve(schema, raw)
                sch = resolve(schema, raw.get("schema") or {})
                params.append(Parameter(raw["name"], raw["in"], tuple(str(v) for v in sch.get("enum") or ()),
                                        sch.get("type") or "string"))
            body = None
            content = (op.get("requestBody") or {}).get("content") or {}
            if "application/json" in content:
                body = resolve(schema, content["application/json"].get("schema") or {})
            operations.append(Operation(method.upper(), path, op.get("operationId", f"{method} {path}"),
                                        tuple(params), body))
    return operations


def resolve(schema: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        target: Any = schema
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node = target
    return node


@dataclass(frozen=True)
class Route:
    pattern: str  # "assemblies/<str:job_id>/"
    name: str | None
    view: Any
    converters: dict[str, str] = field(default_factory=dict)  # path parameter -> converter name

    @property
    def parameters(self) -> list[str]:
        return list(self.converters)

    def url(self, values: dict[str, Any]) -> str:
        path = self.pattern
        for name in self.converters:
            path = re.sub(r"<(?:\w+:)?" + name + ">", str(values[name]), path)
        return "/" + path


def dashboard_routes() -> list[Route]:
    from django.urls import URLPattern, URLResolver, get_resolver

    routes: list[Route] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            text = str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + text)
            elif isinstance(entry, URLPattern):
                full = prefix + text
                if full.startswith(NOT_DASHBOARD):
                    continue
                converters = {m.group(2): m.group(1) or "str" for m in re.finditer(r"<(?:(\w+):)?(\w+)>", full)}
                routes.append(Route(full, entry.name, entry.callback, converters))

    walk(get_resolver().url_patterns, "")
    return routes


@dataclass(frozen=True)
class ViewInputs:
    query: frozenset[str]
    form: frozenset[str]
    htmx: bool


def view_inputs(view: Any) -> ViewInputs:
    """The query string and form parameters a function view reads (a class-based view: none)."""
    func = inspect.unwrap(view)
    if not inspect.isfunction(func):
        return ViewInputs(frozenset(), frozenset(), False)
    return _function_inputs(sys.modules[func.__module__].__name__, func.__name__)


@cache
def _module_functions(module_name: str) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(inspect.getsource(sys.modules[module_name]))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


@cache
def _function_inputs(module_name: str, name: str, _seen: frozenset[str] = frozenset()) -> ViewInputs:
    functions = _module_functions(module_name)
    node = functions.get(name)
    if node is None:
        return ViewInputs(frozenset(), frozenset(), False)
    query: set[str] = set()
    form: set[str] = set()
    htmx = False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr == "htmx":
            htmx = True
        if isinstance(sub, ast.Constant) and sub.value == "HX-Request":
            htmx = True
        reader, key = _read(sub)
        if key is not None:
            (form if reader == "POST" else query).add(key)
            if reader not in ("GET", "POST", "query_params"):
                form.add(key)  # a helper reading `params` may be handed either
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in functions:
            if sub.func.id not in _seen and sub.func.id != name:
                inner = _function_inputs(module_name, sub.func.id, _seen | {name})
                query |= inner.query
                form |= inner.form
                htmx |= inner.htmx
    return ViewInputs(frozenset(query), frozenset(form), htmx)


def _reader_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and node.attr in _READERS:
        return node.attr
    if isinstance(node, ast.Name) and node.id in _READERS:
        return node.id
    # (request.POST if ... else request.GET).get("x")
    if isinstance(node, ast.IfExp):
        return _reader_name(node.body) or _reader_name(node.orelse)
    return None


def _read(node: ast.AST) -> tuple[str | None, str | None]:
    """('GET' | 'POST' | ..., key) when `node` reads one parameter by a literal name."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "getlist"):
        reader = _reader_name(node.func.value)
        if reader and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            return reader, node.args[0].value
    if isinstance(node, ast.Subscript):
        reader = _reader_name(node.value)
        if reader and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            return reader, node.slice.value
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In):
        reader = _reader_name(node.comparators[0])
        if reader and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            return reader, node.left.value
    return None, None


def source_of(view: Any) -> str:
    return textwrap.dedent(inspect.getsource(inspect.unwrap(view)))
