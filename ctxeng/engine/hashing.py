"""Canonical JSON and sha256 digests: one serialization for every hash the engine records.

Each candidate's content is hashed once, at inventory (`Candidate.digest`); the candidate-set
digest, the token-count key and the structural-integrity gate all read that one digest.

`sha256_text_kept`, `canonical_json_kept` and `sha256_json_kept` give the same text and digest as `canonical_json` and
`sha256_json`, keeping them per process by the value's whole JSON (`memo.freeze`): an agent's step
repeats nearly every message, call and rendered block of the step before, byte for byte (issue 48).
`canonical_json_composed` builds a large document's text from its parts' kept texts: canonical JSON
is compact and key-sorted, so an object's text is its sorted `"key":value` pairs joined by commas in
braces and a list's its items' texts joined by commas in brackets, whatever made each part's text.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .memo import Memo, kept_by_value


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


# Texts and digests kept by the value's frozen JSON: at most 16,384 of each, and the texts at most
# 16 M characters in all (a kept text is about as long as the value it was made from).
_TEXTS: Memo[str] = Memo(16_384, max_chars=16_000_000)
_DIGESTS: Memo[str] = Memo(16_384)


# Digests of texts, by the text itself (an agent's history holds the same message strings from step
# to step, whose Python hash is kept on the string): at most 32,768, holding 16 M characters.
_TEXT_DIGESTS: Memo[str] = Memo(32_768, max_chars=16_000_000)


def sha256_text_kept(text: str) -> str:
    """`sha256_text(text)`, made once per distinct text in this process."""
    if type(text) is not str:
        return sha256_text(text)
    return _TEXT_DIGESTS.kept(text, lambda: sha256_text(text))


def canonical_json_kept(value: Any) -> str:
    """`canonical_json(value)`, made once per distinct value in this process."""
    return kept_by_value(_TEXTS, value, lambda: canonical_json(value))


def sha256_json_kept(value: Any) -> str:
    """`sha256_json(value)`, made once per distinct value in this process."""
    return kept_by_value(_DIGESTS, value, lambda: sha256_json(value))


def canonical_json_composed(value: Any, levels: int) -> str:
    """`canonical_json(value)`, composed: the objects and lists of the top `levels` levels are
    joined from their parts' texts, and each part below them is `canonical_json_kept`."""
    if levels > 0 and type(value) is dict and all(type(k) is str for k in value):
        return "{" + ",".join(canonical_json(k) + ":" + canonical_json_composed(value[k], levels - 1) for k in sorted(value)) + "}"
    if levels > 0 and type(value) is list:
        return "[" + ",".join(canonical_json_composed(v, levels - 1) for v in value) + "]"
    return canonical_json_kept(value)


# sha256 states after a prefix of a list's texts, keyed by (the digest of the prefix before, the next
# text): a history that grew extends the states its previous step made instead of hashing every
# byte again. A kept state is never updated (copied first), so it stays the prefix's.
_STATES: Memo[tuple[str, Any]] = Memo(32_768)



def sha256_chain(texts: list[str], *, start: str = "", separator: str = "", terminator: str = "") -> tuple[list[str], Any]:
    """The digest of each prefix of `start + separator.join(texts)` that ends after a text (with
    `terminator` after each text, inside the digest: `sha256(start + t0 + terminator)`,
    `sha256(start + t0 + terminator + separator + t1 + terminator)` ...), and a sha256 object for the
    whole, which the caller may update further. Each digest is `"sha256:" + hexdigest`, the same as
    hashing the prefix's bytes at once (hashlib's update is incremental)."""
    state = _STATES.get(("", start))
    if state is None:
        first = hashlib.sha256(start.encode("utf-8"))
        state = _STATES.put(("", start), ("sha256:" + first.hexdigest(), first))
    digest, running = state
    digests = []
    for n, text in enumerate(texts):
        before = separator if n else ""
        key = (digest, before, text, terminator)  # the text itself, whose Python hash the string keeps
        kept = _STATES.get(key)
        if kept is None:
            running = running.copy()
            running.update((before + text + terminator).encode("utf-8"))
            kept = _STATES.put(key, ("sha256:" + running.hexdigest(), running))
        digest, running = kept
        digests.append(digest)
    return digests, running.copy()


def sha256_object_growing(before: list[str], key: str, texts: list[str], after: list[str]) -> str:
    """The digest of a canonical JSON object whose `"key":value` pair texts are `before`, then `key`
    holding the list whose item texts are `texts`, then `after` (the caller keeps the sorted key
    order), the list hashed through the kept sha256 states (`sha256_chain`): an object whose list
    only grew since it was last hashed hashes its new items, not all of them. The same bytes as
    `sha256_text` of the whole text, so the same digest."""
    _, running = sha256_chain(texts, start="{" + "".join(part + "," for part in before) + canonical_json(key) + ":[",
                              separator=",")
    running.update(("]" + "".join("," + part for part in after) + "}").encode("utf-8"))
    return "sha256:" + running.hexdigest()
