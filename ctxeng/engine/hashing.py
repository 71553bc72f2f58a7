"""Canonical JSON and sha256 digests: one serialization for every hash the engine records.

Each candidate's content is hashed once, at inventory (`Candidate.digest`); the candidate-set
digest, the token-count key and the structural-integrity gate all read that one digest.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def fence_safe_json(value: Any) -> str:
    """Canonical JSON with `<` and `>` written as `\\u003c` / `\\u003e`: it parses to the same value,
    and no string inside it (an item id, a source ref, a tool argument) can spell a ctxeng fence
    (`<<<ctxeng:`) or end a fence header (`>>>`). Used for every JSON placed in the model's input
    next to fences: block headers, tool call arguments, synthetic results."""
    return canonical_json(value).replace("<", "\\u003c").replace(">", "\\u003e")


def sha256_text(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_json(value: Any) -> str:
    return sha256_text(canonical_json(value))
