"""Canonical JSON and sha256 digests: one serialization for every hash the engine records.

Several stages need the digest of the same candidate content (the candidate-set digest, the
token-count key, the structural-integrity gate). `sha256_text` remembers the digests of the most
recent large texts by object identity, so one assembly hashes each content once. The memo holds a
reference to each text it remembers (so an id cannot be reused while it is in the memo), is
bounded in entries and in characters, and is emptied when an assembly starts (`forget`), so it
keeps nothing alive past the assembly that filled it; a text that is not in it is simply hashed.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

_MEMO_MIN_CHARS = 2048
_MEMO_MAX_ENTRIES = 25_000
_MEMO_MAX_CHARS = 64 * 1024 * 1024

_memo: OrderedDict[int, tuple[str, str]] = OrderedDict()
_memo_chars = 0
_memo_lock = threading.Lock()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_text(text: str) -> str:
    if len(text) < _MEMO_MIN_CHARS:
        return _digest(text)
    entry = _memo.get(id(text))
    if entry is not None and entry[0] is text:
        return entry[1]
    digest = _digest(text)
    global _memo_chars
    with _memo_lock:
        old = _memo.pop(id(text), None)
        if old is not None:
            _memo_chars -= len(old[0])
        _memo[id(text)] = (text, digest)
        _memo_chars += len(text)
        while len(_memo) > _MEMO_MAX_ENTRIES or _memo_chars > _MEMO_MAX_CHARS:
            _, (dropped, _) = _memo.popitem(last=False)
            _memo_chars -= len(dropped)
    return digest


def forget() -> None:
    global _memo_chars
    with _memo_lock:
        _memo.clear()
        _memo_chars = 0


def sha256_json(value: Any) -> str:
    return _digest(canonical_json(value))
