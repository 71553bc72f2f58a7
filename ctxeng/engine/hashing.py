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


def sha256_text(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_json(value: Any) -> str:
    return sha256_text(canonical_json(value))
