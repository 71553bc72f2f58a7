"""Every size limit of the request formats, in one place.

The engine's pydantic models (`models.py`), the REST edge (`ctxeng/server/rest.py`) and the Django
models' column sizes (`manifests/models.py`, `policies/models.py`) all read these constants, so a
value the database or the engine cannot hold is refused when it is submitted (400 naming the
field), never accepted and failed later. A test walks every model column and every request field
and proves each limit holds at the API edge (`tests/service/test_validation_edge.py`); another
keeps the README's limits table equal to `LIMITS`.

Pure Python: imported by the engine, so it imports nothing from Django.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

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

# Policy YAML, checked by a pre-scan before the loader builds anything (`errors.load_yaml_text`):
# PyYAML's pure-Python loader spends ~50 µs per node, so 200,000 keys held a worker for 30 s.
# The largest starter is 8 KB and ~600 nodes; each bound leaves two orders of magnitude.
MAX_POLICY_BYTES = 1024 * 1024  # the text, UTF-8
MAX_YAML_NODES = 20_000  # scalars, mappings and sequences
MAX_YAML_SCALAR = 100_000  # characters in one key or value

# The README's "Limits" table: (limit, value, when exceeded); a test keeps the two equal.
LIMITS: tuple[tuple[str, str, str], ...] = (
    ("JSON nesting depth of any body", f"{MAX_JSON_DEPTH} levels",
     "400 `body: nested N levels deep, more than the limit 64`, before the body is parsed"),
    ("numbers anywhere in a body", f"integers within ±{MAX_JSON_INTEGER:,} (2^53 − 1); finite",
     "400 `path: N is outside ±...`; NaN, Infinity, `1e999`: 400 `path: NaN is not a JSON number ...`"),
    ("`policy.revision`, usage token counts", f"{MAX_INT32:,} (2^31 − 1)",
     "400 `policy.revision: Input should be less than or equal to 2147483647`"),
    ("candidates per assembly request", f"{MAX_CANDIDATES:,}", "400 `candidates: N candidates, more than the limit 20000`"),
    ("`run_id`, `step_id`, policy id, `Idempotency-Key`, artifact `writer`", f"{MAX_ID} characters",
     "400 `run_id: String should have at most 200 characters`"),
    ("`item_id`, `result_item_id`, `checkpoint.summary_id`, `artifact_id`, artifact `scope`",
     f"{MAX_ITEM_ID} characters", "400 `candidates[3].item_id: String should have at most 300 characters`"),
    ("`kind`, `source_type`, partition names, artifact `revision`, tenant", f"{MAX_NAME} characters",
     "400 `candidates[3].kind: String should have at most 100 characters`"),
    ("nesting inside `source_ref`, tool call `arguments` and `parameters` (engine and CLI too)",
     f"{MAX_JSON_DEPTH} levels", "400 `candidates[3].source_ref: nested N levels deep, more than the limit 64`"),
    ("publish note", f"{MAX_NOTE:,} characters", "400 `note: String should have at most 10000 characters`"),
    ("policy YAML text (REST, editor, impact preview, CLI)", f"{MAX_POLICY_BYTES:,} bytes",
     "413 (400 in the CLI) `body: N bytes of YAML, more than the limit 1048576`, before it is parsed"),
    ("nodes in a policy's YAML (keys, values, lists, mappings)", f"{MAX_YAML_NODES:,}",
     "400 `body: line N: more than 20000 YAML nodes`, before the policy is built"),
    ("one scalar (key or value) in a policy's YAML", f"{MAX_YAML_SCALAR:,} characters",
     "400 `body: line N: a scalar of N characters, more than the limit 100000`"),
    ("integers in a policy's YAML", f"within ±{MAX_JSON_INTEGER:,}, as in JSON",
     "400 `policy.revision: 99999999999... (5000 characters) is outside ±9007199254740991 ...`"),
    ("`model.context_limit`", f"{MAX_INT32:,} (2^31 − 1), and at least the policy's response_reserve + "
     "protocol_overhead + safety_margin at that size",
     "400 `model.context_limit: N leaves no input under policy P/R: ...` at submit (exactly the reserves: "
     "accepted, blocked `required_partition_missing`: budget_exhausted)"),
    ("every integer and number of a request or a policy", "a JSON number: `true` is not 1, `\"3\"` not 3",
     "400 `model.context_limit: Input should be a valid integer`"),
    ("every id (`run_id`, `step_id`, `item_id`, `call_id`, `artifact_id`, policy and principal ids, every "
     "reference to one, `Idempotency-Key`, `?run_id=` and other id parameters)",
     "printable characters: no control (Cc), format (Cf), surrogate or line/paragraph separator; not `.` or `..`; "
     "a policy id without `/`",
     "400 `run_id: contains U+0001 (a control character); an id holds printable characters only ...`"),
    ("every string and key of a JSON body or a policy's YAML", "no NUL, no lone surrogate (`\"\\ud800\"`)",
     "400 `candidates[3].content: contains a lone surrogate (\\ud800), which is no Unicode character; ...`"),
    ("keys of a JSON object", "each named once", "400 `candidates[3].source_ref.url: duplicate key 'url' ...`"),
    ("`tool_calls[].completed_seq`", "distinct", "400 `tool_calls[1].completed_seq: 2 is also the completed_seq of tool_calls[0]; ...`"),
)


def limits_table_rows() -> list[str]:
    """LIMITS as the README's Markdown table rows."""
    return [f"| {limit} | {value} | {exceeded} |" for limit, value, exceeded in LIMITS]


def json_depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value: a scalar is 0, `{}` and `[]` are 1.

    Level by level, keeping only the containers: every request validates each candidate's
    source_ref and each call's arguments at every step, and nearly all of them are flat: an object
    holding no object or list is answered at once (the request's models and the manifest's records
    ask it of every item's source_ref, twice per item and step)."""
    if isinstance(value, dict):
        for v in value.values():
            if isinstance(v, (dict, list)):
                break
        else:
            return 1
    depth, level = 0, [value] if isinstance(value, (dict, list)) else []
    while level:
        depth += 1
        deeper: list[Any] = []
        for node in level:
            deeper += [c for c in (node.values() if isinstance(node, dict) else node) if isinstance(c, (dict, list))]
        level = deeper
    return depth


def _bounded_depth(value: Any) -> Any:
    depth = json_depth(value)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested {depth} levels deep, more than the limit {MAX_JSON_DEPTH}")
    return value


# A free-form JSON object (source_ref, tool call arguments): any keys, bounded nesting.
JsonObject = Annotated[dict[str, Any], AfterValidator(_bounded_depth)]


# Characters no id may hold, by Unicode category: controls (Cc: NUL, ESC, DEL, U+0085 ...),
# invisible format characters (Cf: U+FEFF, U+200B, bidi overrides ...), surrogates (Cs) and the
# line and paragraph separators (Zl, Zp: U+2028, U+2029). An id is shown in pages, logs and URLs:
# such a character is invisible there, breaks a line, or is refused by the URL edge
# (`ctxeng.server.middleware`), so an id holding one could be submitted but never viewed or closed.
UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# "." and ".." are path segments every HTTP client collapses: `/runs/../` never reaches the run.
DOT_SEGMENTS = frozenset({".", ".."})


def id_problem(value: str) -> str | None:
    """Why `value` cannot be an id (the one rule for every id field), or None."""
    if value in DOT_SEGMENTS:
        return f"{value!r} is a URL path segment (. or ..), which an id cannot be"
    if value.isascii():
        found = _ASCII_CONTROL.search(value)
        bad = found.group() if found else None
    else:
        bad = next((ch for ch in value if unicodedata.category(ch) in UNPRINTABLE_CATEGORIES), None)
    if bad is None:
        return None
    what = unicodedata.name(bad, None) or ("a lone surrogate" if unicodedata.category(bad) == "Cs" else "a control character")
    return (f"contains U+{ord(bad):04X} ({what}); an id holds printable "
            "characters only (no control, format or line-separator characters)")


def is_blank(value: str) -> bool:
    """Does `value` show nothing: empty, or only whitespace and invisible characters (control,
    format, separators)? Such a string names nobody and locates nothing, so it is no producer
    identity, no producer a policy can bind, and no source_ref locator."""
    return all(ch.isspace() or unicodedata.category(ch) in UNPRINTABLE_CATEGORIES for ch in value)


def _printable_id(value: Any) -> Any:
    problem = id_problem(value) if isinstance(value, str) else None  # not a string: the str type says so
    if problem:
        raise ValueError(problem)
    return value


# Every id of the formats (run, step, item, call, artifact, policy ...): what a page, a URL and a
# filter can all show and find again. A before-validator, so a field's own length bound stays
# the str type's (`String should have at most 300 characters`).
Id = Annotated[str, BeforeValidator(_printable_id)]


def _one_segment(value: Any) -> Any:
    if isinstance(value, str) and "/" in value:
        raise ValueError("contains '/'; a policy id is one URL path segment (/policies/<id>/ and the policy API address it so)")
    return value


# A policy id: an id that is also one path segment (a run or item id may hold '/': its URLs take
# the rest of the path).
PolicyId = Annotated[str, BeforeValidator(_one_segment), BeforeValidator(_printable_id)]
# An optional id with a length bound (`Id | None = Field(max_length=...)` would report the bound
# in pydantic's generic words, "Value should have at most 300 items").
ItemIdRef = Annotated[str, Field(max_length=MAX_ITEM_ID), BeforeValidator(_printable_id)]
