"""The Redis token cache in this process (ctxeng.server.token_cache), against a real Redis.

tests/service/test_worker_token_cache.py shows a real worker writing its counts; here the cache's
own protocol, where a test can see each value: what one process writes another reads, under its
encoding only, in batches of any size, with a TTL; and an unreachable Redis answers "nothing
known" without failing the assembly that asked.
"""

from __future__ import annotations

import logging

import pytest


@pytest.fixture
def tok_redis(redis_url):
    import redis

    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(match="ctxeng:tok:*"):
        client.delete(key)
    yield client
    for key in client.scan_iter(match="ctxeng:tok:*"):
        client.delete(key)


def test_counts_one_process_writes_another_reads_under_the_same_encoding_only(tok_redis, redis_url, monkeypatch):
    from ctxeng.server import token_cache

    monkeypatch.setattr(token_cache, "_CHUNK", 2)  # five keys and a missing one: three MGETs
    values = {f"sha256:{i:064x}": 10 * i + 7 for i in range(5)}
    writer = token_cache.RedisTokenCache(redis_url, encoding="o200k_base", ttl=60)
    writer.set_many(values)
    reader = token_cache.RedisTokenCache(redis_url, encoding="o200k_base")
    assert reader.get_many([*values, "sha256:" + "f" * 64]) == values
    assert reader.get_many([]) == {}
    assert token_cache.RedisTokenCache(redis_url, encoding="cl100k_base").get_many(list(values)) == {}
    first = f"ctxeng:tok:o200k_base:{next(iter(values))}"
    assert tok_redis.get(first) == b"7"
    assert 0 < tok_redis.ttl(first) <= 60
    assert writer.errors == reader.errors == 0


def test_an_unreachable_redis_answers_nothing_known_and_says_so_once(caplog):
    from ctxeng.server import token_cache

    cache = token_cache.RedisTokenCache("redis://127.0.0.1:1/0")  # nothing listens on port 1
    with caplog.at_level(logging.WARNING, logger="ctxeng.server.token_cache"):
        assert cache.get_many(["sha256:" + "0" * 64]) == {}
        cache.set_many({"sha256:" + "0" * 64: 3})
        cache.set_many({})  # nothing to write: not an error
    assert cache.errors == 2
    warned = [r.getMessage() for r in caplog.records if r.name == "ctxeng.server.token_cache"]
    assert len(warned) == 1 and warned[0].startswith("token cache get failed (1 errors so far)")
