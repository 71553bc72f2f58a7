"""Every size limit of the request formats, in one place.

The engine's pydantic models (`models.py`), the REST edge (`ctxeng/rest.py`) and the Django
models' column sizes (`manifests/models.py`, `policies/models.py`) all read these constants, so a
value the database or the engine cannot hold is refused when it is submitted (400 naming the
field), never accepted and failed later. A test walks every model column and every request field
and proves each limit holds at the API edge (`tests/service/test_validation_edge.py`); another
keeps the README's limits table equal to `LIMITS`.

Pure Python: imported by the engine, so it imports nothing from Django.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

# Structure of any JSON body, checked before it is parsed (Python's parser recurses per level).
MAX_JSON_DEPTH = 64
# Integers exact in every JSON implementation (JavaScript's Number.MAX_SAFE_INTEGER).
MAX_JSON_INTEGER = 2**53 - 1
# A column of Django's (Positive)IntegerField: PostgreSQL's `integer`.
MAX_INT32 = 2**31 - 1

MAX_CANDIDATES = 20_000

# String lengths; each is the max_length of the column that stores the value.
MAX_ID = 200  # run_id, step_id, policy id, Idempotency-Key, assembly id, writer
MAX_ITEM_ID = 300  # item_id (and every reference to one), artifact_id, artifact scope
MAX_NAME = 100  # kind, source_type, partition name, artifact revision, tenant slug
MAX_NOTE = 10_000  # a publish note

LIMITS: tuple[tuple[str, str, str], ...] = (
    ("JSON nesting depth of any body", f"{MAX_JSON_DEPTH} levels", "checked before parsing"),
    ("integers anywhere in a body", f"±{MAX_JSON_INTEGER:,} (2^53 − 1)", "JSON-safe; NaN and Infinity are refused"),
    ("`policy.revision`, usage token counts", f"{MAX_INT32:,} (2^31 − 1)", "a database integer"),
    ("candidates per assembly request", f"{MAX_CANDIDATES:,}", "fixed in the engine"),
    ("`run_id`, `step_id`, policy id, `Idempotency-Key`, artifact `writer`", f"{MAX_ID} characters", ""),
    ("`item_id` and references to items, `artifact_id`, artifact `scope`", f"{MAX_ITEM_ID} characters", ""),
    ("`kind`, `source_type`, partition names, artifact `revision`, tenant", f"{MAX_NAME} characters", ""),
    ("publish note", f"{MAX_NOTE:,} characters", ""),
)


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value: a scalar is 0, `{}` and `[]` are 1."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _bounded_depth(value: Any) -> Any:
    depth = json_depth(value)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested {depth} levels deep, more than the limit {MAX_JSON_DEPTH}")
    return value


# A free-form JSON object (source_ref, tool call arguments): any keys, bounded nesting.
JsonObject = Annotated[dict[str, Any], AfterValidator(_bounded_depth)]
