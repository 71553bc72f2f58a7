"""Per-content memoization: what an assembly computes from an item's content alone is computed once
per process, not at every step of an agent's run (issue 48, incremental assembly).

An agent sends its whole history at every step; nearly every message is one it sent before, byte
for byte. A value computed from such a message alone (its canonical JSON, its digest, its
secret findings) is kept here, keyed by exactly what it was computed from, so the next
step finds it instead of computing it again. Three rules keep a kept value the value a fresh
computation gives:

- **The key is the whole input.** `freeze` turns a JSON value into a hashable key that two values
  share only when a computation over JSON cannot tell them apart: every scalar is tagged with its
  exact type (`True`, `1` and `1.0` are equal in Python but are three JSON texts, and three
  outcomes under strict validation), `-0.0` keeps its sign, and anything that is not plain JSON
  (a `str` or `int` subclass such as an enum, a tuple, an object) is refused with `Unfreezable`:
  the caller then computes without the memo. Where an outcome also depends on facts outside the
  value (a policy, a scope), those facts are part of the key, by the caller.
- **Kept values are immutable**, or handed out as copies: a caller that changes what it was given
  cannot change what the next step is given.
- **Bounded.** Each memo keeps its newest `size` entries (least recently used first out) and, when
  given `max_chars`, at most that many characters of text keys and values; a lock guards it.

Every memo registers itself: `clear_all()` empties them, and `off()` runs a block of code as if
there were no memos, then gives the kept entries back (a test's fresh engine, beside a session's).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class Unfreezable(TypeError):
    """A value that is not plain JSON: computed without the memo."""


_DICT, _LIST, _FLOAT, _BOOL = object(), object(), object(), object()


def freeze(value: Any) -> Hashable:
    """A hashable key for a JSON value (dicts, lists, str, int, float, bool, None; exact types only)
    that is equal for two values only when they are the same JSON: same types, same scalars, same
    keys with the same values in the same order. An object is its marker and its keys and values
    alternating (a key is a str, a value a scalar or a tagged tuple, so the positions cannot shift)."""
    t = type(value)
    if t is str or t is int or value is None:
        return value
    if t is dict:
        flat: list[Hashable] = [_DICT]
        for k, v in value.items():
            if type(k) is not str:
                raise Unfreezable(f"a JSON object's key is a string, not {type(k).__name__}")
            tv = type(v)
            flat.append(k)
            flat.append(v if tv is str or tv is int or v is None else freeze(v))
        return tuple(flat)
    if t is list:
        return (_LIST, *[v if type(v) is str or type(v) is int or v is None else freeze(v) for v in value])
    if t is bool:
        return (_BOOL, value)
    if t is float:
        return (_FLOAT, repr(value))  # repr keeps -0.0 apart from 0.0 (and nan is no JSON: refused later)
    raise Unfreezable(f"not plain JSON: {t.__name__}")


# Every memo made, so `clear_all` can empty them (a test's fresh engine computes without them).
_ALL: list[Memo[Any]] = []


def clear_all() -> None:
    """Empty every memo of this process."""
    for memo in _ALL:
        memo.clear()


class _Forgetting(OrderedDict):
    """The entries of a memo while `off()`: nothing put is kept."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


@contextmanager
def off() -> Iterator[None]:
    """Within it, every memo is empty and keeps nothing, so each value is computed as if there were
    no memo at all; after it, each holds what it held before (tests: the oracle of a fresh engine,
    made beside a session's without touching what the session kept). For one thread at a time."""
    saved = []
    for memo in _ALL:
        with memo._lock:
            saved.append((memo, memo._entries, memo._chars))
            memo._entries, memo._chars = _Forgetting(), 0
    try:
        yield
    finally:
        for memo, entries, chars in saved:
            with memo._lock:
                memo._entries, memo._chars = entries, chars


class Memo(Generic[V]):
    """A bounded, thread-safe least-recently-used map from a key to a computed value."""

    def __init__(self, size: int, *, max_chars: int | None = None) -> None:
        _ALL.append(self)
        self.size = size
        self.max_chars = max_chars
        self._chars = 0
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> V | None:
        # acquire/release rather than `with`: an assembly makes thousands of lookups, and the
        # context manager's own calls were a third of each one's cost.
        lock = self._lock
        lock.acquire()
        try:
            entries = self._entries
            value = entries.get(key)
            if value is not None:
                entries.move_to_end(key)
            return value
        finally:
            lock.release()

    def put(self, key: Hashable, value: V) -> V:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._chars -= _chars(key) + _chars(old)
            self._entries[key] = value
            self._chars += _chars(key) + _chars(value)
            while len(self._entries) > self.size or (self.max_chars is not None and self._chars > self.max_chars and len(self._entries) > 1):
                dropped_key, dropped = self._entries.popitem(last=False)
                self._chars -= _chars(dropped_key) + _chars(dropped)
        return value

    def kept(self, key: Hashable, make: Callable[[], V]) -> V:
        """The value kept under `key`, or `make()` kept under it (never None: a miss)."""
        value = self.get(key)
        return self.put(key, make()) if value is None else value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0


def kept_by_value(memo: Memo[V], value: Any, make: Callable[[], V], *facts: Hashable) -> V:
    """`make()` kept in `memo` by `value`'s frozen JSON (and the further `facts` its answer
    depends on, such as a field path); computed without the memo when the value is not plain JSON."""
    try:
        key = freeze(value)
    except Unfreezable:
        return make()
    return memo.kept((key, *facts) if facts else key, make)


def _chars(value: Any) -> int:
    """What an entry weighs against `max_chars`: the characters of a text key or value."""
    return len(value) if isinstance(value, str) else 0
