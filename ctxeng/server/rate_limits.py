"""Counters shared by every web process: sliding-window rates and bounded slots.

Both live in the `throttle` cache: Redis when REDIS_URL is set, so gunicorn's workers (and several
web hosts) count together; else this process's memory, under a lock (the single-machine default,
one process). Each check and its count are one step (a Lua script in Redis), so concurrent
requests never both see room for one.

- `windows_take([(key, limit, seconds), ...])`: count one event in every window, or in none when
  one of them already holds `limit` events of the last `seconds`; None when counted, else the
  seconds until there is room in all of them (Retry-After). All or none, so an event one window
  refuses never uses up another's room (the login throttle, ctxeng.server.login_throttle: an attempt the
  overall rate refuses does not count against its address).
- `SLIDING_WINDOW`: the one-window script of the agent token throttle (ctxeng.server.rest).
- `slots_take([(key, limit), ...], seconds)`: hold one slot in every counter, or in none when one
  of them already holds `limit`; a holder's id when held (give it back with `slots_release`), else
  None. A slot expires `seconds` after it was taken, so a process killed while holding one (no
  `finally` ran) cannot keep it: the long-poll caps (manifests.api). A cache that cannot be reached
  answers None here (no slot: the long-poll answers at once instead of holding a worker unbounded).
- `slots_try(counters, seconds)`: the same take, saying why it holds nothing: (holder, None) when
  held, (None, i) when counters[i] is full, (None, None) when the cache cannot be reached (the
  large-request bounds, ctxeng.server.large_requests, let such a request through).
- `slots_renew(counters, holder, seconds)`: a holder still working moves its slots' expiry to
  `seconds` from now (a lease: a slot whose holder stopped renewing, killed, expires soon after).
- `parse_rate("10/min")`: (10, 60), the notation of the CTXENG_THROTTLE_* and CTXENG_LOGIN_*
  settings; "" is no limit (None).

A cache that cannot be reached lets the request through (logged): a throttle must not turn a
Redis outage into an outage of everything it guards.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache

logger = logging.getLogger(__name__)

_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_local_lock = threading.Lock()

# KEYS[1]: the window; ARGV: now, window seconds, limit, a unique member for this event. Drops the
# times older than the window, then counts and (under the limit) adds, atomically (ctxeng.server.rest).
SLIDING_WINDOW = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
  redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])))
  return {1, '0'}
end
return {0, redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]}
"""


def parse_rate(rate: str) -> tuple[int, int] | None:
    """"10/min" -> (10, 60); "" -> None (no limit). The settings module has checked the notation."""
    if not rate:
        return None
    count, period = rate.split("/")
    return int(count), _SECONDS[period[0]]


# KEYS: the windows; ARGV[1]: now, ARGV[2]: a unique member for this event, then per window its
# seconds and limit. Drops what is older than each window; if any is full, answers the longest wait
# (as a string: Redis truncates Lua numbers), else adds the event to every window.
WINDOWS_TAKE = """
local now = tonumber(ARGV[1])
local wait = -1
for i, key in ipairs(KEYS) do
  local seconds, limit = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - seconds)
  if redis.call('ZCARD', key) >= limit then
    local oldest = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
    wait = math.max(wait, oldest + seconds - now)
  end
end
if wait >= 0 then return tostring(wait) end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[2])
  redis.call('EXPIRE', key, math.ceil(tonumber(ARGV[1 + 2 * i])))
end
return '-1'
"""


def windows_take(windows: list[tuple[str, int, float]]) -> float | None:
    """Count one event in every (key, limit, seconds) window or in none (module docstring)."""
    if not windows:
        return None
    cache = caches["throttle"]
    now = time.time()
    try:
        if isinstance(cache, RedisCache):
            keys = [cache.make_and_validate_key(key) for key, _, _ in windows]
            client = cache._cache.get_client(keys[0], write=True)  # noqa: SLF001 - Django's redis client
            args: list[object] = [repr(now), f"{now!r}:{uuid.uuid4().hex}"]
            for _, limit, seconds in windows:
                args += [seconds, limit]
            wait = float(client.register_script(WINDOWS_TAKE)(keys=keys, args=args))
            return None if wait < 0 else max(wait, 0.0)
        with _local_lock:
            histories = [[t for t in cache.get(key, []) if t > now - seconds] for key, _, seconds in windows]
            waits = [history[0] + seconds - now for history, (_, limit, seconds) in zip(histories, windows, strict=True)
                     if len(history) >= limit]
            if waits:
                return max(max(waits), 0.0)
            for history, (key, _, seconds) in zip(histories, windows, strict=True):
                cache.set(key, [*history, now], timeout=seconds)
            return None
    except Exception:  # noqa: BLE001 - see the module docstring
        logger.warning("throttle cache unavailable; %s allowed", [key for key, _, _ in windows], exc_info=True)
        return None


# KEYS: the counters; ARGV[1]: now, ARGV[2]: the expiry (now + seconds), ARGV[3]: the holder's id,
# then per counter its limit. Drops the expired holders; if a counter is full, holds nothing and
# answers its position (1-based), else holds one slot in every counter (0). A sorted set per
# counter, scored by expiry; the key itself lives as long as its latest holder.
SLOTS_TAKE = """
local now = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= tonumber(ARGV[3 + i]) then return i end
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, ARGV[2], ARGV[3])
  redis.call('EXPIREAT', key, math.ceil(tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])))
end
return 0
"""
# KEYS: the counters; ARGV[1]: the new expiry, ARGV[2]: the holder's id. Only a slot still held is
# moved (ZADD XX): one that expired meanwhile may have gone to another holder.
SLOTS_RENEW = """
for i, key in ipairs(KEYS) do
  if redis.call('ZADD', key, 'XX', 'CH', ARGV[1], ARGV[2]) == 1 then
    redis.call('EXPIREAT', key, math.ceil(tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])))
  end
end
return 1
"""
_local_slots: dict[str, dict[str, float]] = {}  # counter -> holder -> expiry (this process)


def slots_take(counters: list[tuple[str, int]], seconds: float) -> str | None:
    """Hold a slot in every (key, limit) counter for at most `seconds`, or in none (module docstring)."""
    holder, _ = slots_try(counters, seconds)
    return holder


def slots_try(counters: list[tuple[str, int]], seconds: float) -> tuple[str | None, int | None]:
    """`slots_take`, saying why nothing is held: (holder, None), (None, index of a full counter) or,
    when the cache cannot be reached, (None, None)."""
    holder = uuid.uuid4().hex
    now = time.time()
    cache = caches["throttle"]
    try:
        if isinstance(cache, RedisCache):
            keys = [cache.make_and_validate_key(key) for key, _ in counters]
            client = cache._cache.get_client(keys[0], write=True)  # noqa: SLF001 - Django's redis client
            args = [repr(now), repr(now + seconds), holder, *[limit for _, limit in counters]]
            full = int(client.register_script(SLOTS_TAKE)(keys=keys, args=args))
            return (holder, None) if full == 0 else (None, full - 1)
        with _local_lock:
            held = [_local_slots.setdefault(key, {}) for key, _ in counters]
            for holders in held:
                for other in [h for h, expiry in holders.items() if expiry <= now]:
                    del holders[other]
            for index, (holders, (_, limit)) in enumerate(zip(held, counters, strict=True)):
                if len(holders) >= limit:
                    return None, index
            for holders in held:
                holders[holder] = now + seconds
            return holder, None
    except Exception:  # noqa: BLE001 - see the module docstring
        logger.warning("throttle cache unavailable; no slot of %s taken", [key for key, _ in counters], exc_info=True)
        return None, None


def slots_renew(counters: list[tuple[str, int]], holder: str, seconds: float) -> None:
    """Move the expiry of `holder`'s slots (those it still holds) to `seconds` from now."""
    expiry = time.time() + seconds
    cache = caches["throttle"]
    try:
        if isinstance(cache, RedisCache):
            keys = [cache.make_and_validate_key(key) for key, _ in counters]
            client = cache._cache.get_client(keys[0], write=True)  # noqa: SLF001 - Django's redis client
            client.register_script(SLOTS_RENEW)(keys=keys, args=[repr(expiry), holder])
            return
        with _local_lock:
            for key, _ in counters:
                holders = _local_slots.get(key, {})
                if holder in holders:
                    holders[holder] = expiry
    except Exception:  # noqa: BLE001 - the slot then expires on its own
        logger.warning("throttle cache unavailable; slots of %s not renewed", [key for key, _ in counters],
                       exc_info=True)


def slots_release(counters: list[tuple[str, int]], holder: str) -> None:
    """Give back the slots `slots_take` answered `holder` for (a no-op for one already expired)."""
    cache = caches["throttle"]
    try:
        if isinstance(cache, RedisCache):
            keys = [cache.make_and_validate_key(key) for key, _ in counters]
            client = cache._cache.get_client(keys[0], write=True)  # noqa: SLF001 - Django's redis client
            pipe = client.pipeline()
            for key in keys:
                pipe.zrem(key, holder)
            pipe.execute()
            return
        with _local_lock:
            for key, _ in counters:
                _local_slots.get(key, {}).pop(holder, None)
    except Exception:  # noqa: BLE001 - the slot expires on its own
        logger.warning("throttle cache unavailable; slots of %s left to expire", [key for key, _ in counters],
                       exc_info=True)


def slots_held(key: str) -> int:
    """How many unexpired slots the counter `key` holds now (for tests and the operator)."""
    cache = caches["throttle"]
    now = time.time()
    if isinstance(cache, RedisCache):
        full = cache.make_and_validate_key(key)
        return int(cache._cache.get_client(full).zcount(full, f"({now!r}", "+inf"))  # noqa: SLF001
    with _local_lock:
        return sum(1 for expiry in _local_slots.get(key, {}).values() if expiry > now)
