"""Structural diff of two policy bodies: pure, shared by the REST API and the dashboard.

`diff(a, b)` returns `[{"path": "budget.partitions.state.minimum", "from": 1500, "to": 2000}, ...]`
in a stable order: dict keys sorted, list positions in order. A key present on one side only has
`from` or `to` set to None and `change` "added"/"removed"; otherwise `change` is "changed". Lists
are compared position by position (policy lists are ordered: gate order, ranking order).
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _walk(path: str, a: Any, b: Any, out: list[dict[str, Any]]) -> None:
    if a is _MISSING:
        out.append({"path": path, "change": "added", "from": None, "to": b})
        return
    if b is _MISSING:
        out.append({"path": path, "change": "removed", "from": a, "to": None})
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            _walk(_join(path, key), a.get(key, _MISSING), b.get(key, _MISSING), out)
        return
    if isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            _walk(_join(path, i), a[i] if i < len(a) else _MISSING, b[i] if i < len(b) else _MISSING, out)
        return
    if a != b or type(a) is not type(b):
        out.append({"path": path, "change": "changed", "from": a, "to": b})


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    _walk("", a, b, out)
    return out
