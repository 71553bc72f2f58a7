"""The shared token cache reaches every count and bound an assembly makes (issue 13).

In the service each Celery pool process has its own tokenizer and all of them share Redis
(`ctxeng.server.token_cache`). Since the budget counts only what a decision needs, most counts are made
one at a time, late in the walk; they must still reach the shared cache, and the agent's next
step in another process must find them (and the lower bounds of the items left uncounted) in one
batch, instead of counting again. Here two tokenizers stand for two worker processes and a
dictionary for Redis (the same protocol; tests/service/test_worker_token_cache.py runs the real
one under a real worker). Whatever the cache holds, the sealed result is the same.
"""

from __future__ import annotations

import copy

import pytest

from bench import workload
from ctxeng.engine import assemble, bounds, parse_policy, parse_request
from ctxeng.engine.tokens import TiktokenTokenizer

CREATED_AT = "2026-01-01T00:00:00Z"
POLICY = parse_policy(workload.make_policy(16_000))


class DictCache:
    """A SharedTokenCache in a dictionary, recording each batch it is asked for."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self.asked: list[list[str]] = []
        self.told: list[dict[str, int]] = []

    def get_many(self, keys: list[str]) -> dict[str, int]:
        self.asked.append(list(keys))
        return {k: self.values[k] for k in keys if k in self.values}

    def set_many(self, values: dict[str, int]) -> None:
        self.told.append(dict(values))
        self.values.update(values)


class Process(TiktokenTokenizer):
    """A worker process's tokenizer: its own in-memory caches, the shared one attached, and a
    count of the texts it had to encode."""

    def __init__(self, shared: DictCache | None) -> None:
        super().__init__()
        self.shared = shared
        self.encoded = 0
        self.missed: set[str] = set()  # keys count_keyed found in neither cache

    def encode_count(self, text: str) -> int:
        self.encoded += 1
        return super().encode_count(text)

    def count_keyed(self, key: str, text: str) -> int:
        if key not in self._cache:
            self.missed.add(key)
        return super().count_keyed(key, text)


def sealed(body: dict, tokenizer):
    return assemble(parse_request(copy.deepcopy(body)), POLICY, tokenizer=tokenizer, created_at=CREATED_AT)


@pytest.fixture(scope="module")
def step():
    return workload.make_request(n_items=300, total_bytes=1_200_000, n_tool_pairs=6, seed=33)


@pytest.fixture(scope="module")
def next_step(step):
    return workload.next_step(step, seed=34)


@pytest.fixture(scope="module")
def two_processes(step, next_step):
    """Process A assembles the step; process B, which shares only the cache with A, the next one."""
    cache = DictCache()
    a = Process(cache)
    first = sealed(step, a)
    told_by_a = {k: v for batch in cache.told for k, v in batch.items()}
    cache.asked.clear()
    b = Process(cache)
    second = sealed(next_step, b)
    return cache, a, first, told_by_a, b, second


def test_every_count_a_process_makes_reaches_the_shared_cache(two_processes):
    cache, a, first, told_by_a, _b, _second = two_processes
    assert a.encoded > 0
    # Every count A holds was told to the shared cache (those made one at a time too, at the end).
    assert set(a._cache) <= set(told_by_a)
    assert all(told_by_a[k] == n for k, n in a._cache.items())
    # And the lower bounds of the items A left uncounted, by content digest.
    uncounted = [c["item_id"] for c in first.manifest_dict()["candidate_items"] if c["token_count"] == "lower_bound"]
    assert len(uncounted) > 50
    runs = [k for k in told_by_a if k.startswith(bounds.SHARED_PREFIX)]
    assert len(runs) >= len(uncounted)


def test_the_next_step_in_another_process_asks_once_and_counts_only_what_is_new(two_processes, next_step):
    cache, _a, _first, told_by_a, b, second = two_processes
    assert second.manifest_dict()["assembly"]["status"] == "ready"
    # B asked the shared cache in one batch for its counts, and in one for its items' bounds.
    counts_asked = [batch for batch in cache.asked if batch and not batch[0].startswith(bounds.SHARED_PREFIX)]
    runs_asked = [batch for batch in cache.asked if batch and batch[0].startswith(bounds.SHARED_PREFIX)]
    assert len(runs_asked) == 1 and len(runs_asked[0]) > 50
    assert len(counts_asked[0]) > 100
    # Nothing the shared cache held for that batch was counted again...
    held = set(counts_asked[0]) & set(told_by_a)
    assert len(held) > 100
    assert not held & b.missed
    # ...so B encodes less than a process with nothing shared (reduced windows, which a process
    # remembers for itself, are still counted again).
    alone = Process(None)
    sealed(next_step, alone)
    assert b.encoded < 0.8 * alone.encoded, (b.encoded, alone.encoded)
    # B told what it counted in turn when its assembly ended, as A did.
    assert b._unpublished == {}
    assert set(b._cache) <= set(cache.values)


def test_what_the_shared_cache_holds_changes_nothing_sealed(two_processes, next_step):
    _cache, _a, _first, _told, _b, second = two_processes
    alone = sealed(next_step, Process(None))
    assert second.serialized_input == alone.serialized_input
    assert second.manifest_dict() == alone.manifest_dict()


def test_a_shared_bound_is_the_bound_of_that_content(two_processes, step):
    cache, *_ = two_processes
    from ctxeng.engine.render import escape

    contents = {workload.sha256(c["content"]): c["content"] for c in step["candidates"] if c.get("content")}
    checked = 0
    for key, runs in cache.values.items():
        if key.startswith(bounds.SHARED_PREFIX):
            digest = key.removeprefix(bounds.SHARED_PREFIX)
            content = contents.get(digest) or contents.get(digest.removeprefix("sha256:"))
            if content is not None:
                assert runs == bounds.runs_floor(escape(content)[0])
                checked += 1
    assert checked > 50


def test_without_a_shared_cache_nothing_is_asked_or_kept():
    tok = Process(None)
    tok.share_later({"k": 1})
    tok.prefetch(["k"])
    tok.publish()
    assert tok._unpublished == {} and tok.shared_get(["k"]) == {}
