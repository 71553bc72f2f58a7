"""A Redis-backed `SharedTokenCache`: token counts shared by every worker process.

The engine caches counts per process; an agent's next step often lands on another worker, and a
restarted worker starts cold. Attach one of these to each of the worker's tokenizers (one per
encoding: a model picks its encoding, `ctxeng.engine.estimators`) and every process reuses every
count any of them made:

    from ctxeng.server.token_cache import share_through_redis
    share_through_redis(settings.REDIS_URL)       # what ctxeng.server.celery does in each pool process

Keys are `ctxeng:tok:<encoding>:<content digest>` (so counts of two encodings never mix), values
the decimal count, each with a TTL
(refreshed on write, not on read: a count never goes stale, the TTL only bounds memory). One MGET
per assembly for the digests the process lacks, one pipelined SET per assembly for the counts it
made. Redis being down never fails an assembly: the cache answers "nothing known" and the engine
counts locally, as it would without Redis.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

DEFAULT_TTL = 7 * 24 * 3600
_CHUNK = 5000


def share_through_redis(url: str, *, ttl: int = DEFAULT_TTL) -> None:
    """Every tokenizer of this process, of every encoding, shares its counts through Redis at `url`
    under its own encoding's keys (one connection pool for all of them)."""
    import redis

    from ctxeng.engine.tokens import share_counts

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    share_counts(lambda encoding: RedisTokenCache(url, encoding=encoding, ttl=ttl, client=client))


class RedisTokenCache:
    def __init__(self, url: str, *, encoding: str = "cl100k_base", ttl: int = DEFAULT_TTL, client=None) -> None:
        import redis

        self.prefix = f"ctxeng:tok:{encoding}:"
        self.ttl = ttl
        self.client = client or redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.errors = 0

    def get_many(self, keys: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        try:
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i : i + _CHUNK]
                values = self.client.mget([self.prefix + k for k in chunk])
                for key, value in zip(chunk, values, strict=True):
                    if value is not None:
                        out[key] = int(value)
        except Exception as exc:  # noqa: BLE001 - an unreachable cache must not fail an assembly
            self._failed("get", exc)
        return out

    def set_many(self, values: dict[str, int]) -> None:
        if not values:
            return
        try:
            pipe = self.client.pipeline(transaction=False)
            for key, n in values.items():
                pipe.set(self.prefix + key, n, ex=self.ttl)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001
            self._failed("set", exc)

    def _failed(self, op: str, exc: Exception) -> None:
        self.errors += 1
        if self.errors == 1 or self.errors % 100 == 0:
            log.warning("token cache %s failed (%s errors so far): %s", op, self.errors, exc)
