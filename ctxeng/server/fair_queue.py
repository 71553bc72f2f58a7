"""Fair dispatch of queued jobs between tenants: one tenant's backlog cannot starve another's job.

Celery's Redis queue is first in, first out: 16 heavy jobs of one tenant ahead of another's small
one made it wait for all 16 (issue 40, finding 5). So a Celery message no longer decides which job
runs, it is a turn on a worker. Beside it, in the broker's Redis:

- `q:<tenant>`   the tenant's pending entries (`<kind>:<id>`, kind `assembly`, `preview` or
                 `verification` of a recorded step) in
                 submit order, deduplicated by `pending:<tenant>`;
- `ring`         the tenants with pending entries, each once, in turn order (`inring` its set);
- `run:<tenant>` the entries the tenant has on workers, each with a lease (expiry, Redis time in
                 ms), and `leases` the same leases of every tenant, by expiry;
- `holders`      `<tenant>|<entry>` -> the process holding that lease (`holder_of`).

Each app's enqueue `push`es the entry (and the tenant on the ring if it was not there), then
sends the entry's Celery message. `take`, run by whichever message a worker receives, gives the
turn to the waiting tenant with the fewest entries on workers, the first in the ring among equals:
its oldest entry is leased to this process, and the tenant goes to the back of the ring. So
a tenant with nothing running goes before one whose jobs fill the workers, and with T tenants
waiting a tenant's next entry starts within T turns, whatever the others have queued. A tenant
with CTXENG_FAIR_TENANT_MAX_RUNNING entries leased is passed over; when every tenant waiting is,
the turn is requeued (the message is sent again after CTXENG_FAIR_REQUEUE_SECONDS).

Impact previews run in a lane of their own within their tenant: at most
CTXENG_FAIR_TENANT_MAX_PREVIEWS (1) of a tenant's previews are on workers at once; meanwhile its
turn goes to its oldest entry that is not a preview, or, with none, it is passed over like a
capped tenant. A preview replays a tenant's history for up to CTXENG_IMPACT_TIME_LIMIT_SECONDS;
two of them held both workers of a 2-worker deployment and another tenant's 0.5 s job waited
119 s (issue 51, N3). With the lane a tenant's previews hold one worker, and the rest stay free
for every tenant's jobs (the tenant's own included).

Nothing is lost: each push comes with a message, and a message takes an entry while there is one
(or, when every waiting tenant is capped, is sent again), so every entry is taken. A lease is renewed while its process runs the entry
(`holding`); a lease not renewed for CTXENG_FAIR_LEASE_SECONDS (a worker killed after `take`) is
reaped by the next `take`: its entry goes back to the front of its tenant's queue with a new
message, and the tenant's slot is free again. Each lease also names its holder (`holders`: host,
worker main process, pool process), so when a pool process dies mid-run the worker's main process
frees its slots at once (`TurnRequest`, `release_lost`), as soon as the pool reports it lost,
instead of after the lease (issue 51, N9). The job rows stay the source of truth: the claim
guards every run (a second run of an entry is a no-op), and the stale-job sweep re-sends a queued
assembly whose entry the broker lost (a Redis restart). A message that finds no entry queues the
item it was sent for again, if it still waits and is not on a worker, and takes a turn: nothing
runs outside the leases, so no tenant passes its cap that way.

Off (CTXENG_FAIR_DISPATCH=0), or without Redis (jobs run in the submitting process), messages run
their own entry, first in, first out. The scripts name their keys themselves (a tenant's keys are
known only inside them), so the broker must be one Redis, not a cluster, as Celery's is. A run that
stalls longer than a lease (no renewal reached Redis) loses its slot while it still runs: its
entry is queued again (that second claim is refused) and its tenant may pass the cap meanwhile.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from billiard.einfo import ExceptionWithTraceback
from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery.worker.request import Request
from django.conf import settings

from ctxeng.server.celery import app

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

PREFIX = "ctxeng:fair:"

# The Celery task that runs each kind of entry, by name (sent without importing the app's tasks).
TASKS = {"assembly": "manifests.run_assembly_job", "preview": "policies.run_impact_preview",
         "verification": "manifests.verify_recorded_step"}

# kind -> run(item_id, traceparent), and kind -> waiting_tenant(item_id) (the tenant of an item still
# waiting to run, None when it is not: done, running or gone): registered by each app's tasks
# module (manifests.tasks, policies.tasks), in the worker that imports both; this module imports
# neither app.
_runners: dict[str, Callable[[str, str | None], Any]] = {}
_waiting_tenants: dict[str, Callable[[str], int | None]] = {}


def register(kind: str, run: Callable[[str, str | None], Any], waiting_tenant: Callable[[str], int | None]) -> None:
    if kind not in TASKS:
        raise ValueError(f"kind: {kind!r} is not one of {sorted(TASKS)}")
    _runners[kind] = run
    _waiting_tenants[kind] = waiting_tenant


# Every script reads the clock from Redis, so leases do not depend on the workers' clocks agreeing.
_LUA_PUSH = """
local function push(p, tenant, entry, front)
  if redis.call('SADD', p .. 'pending:' .. tenant, entry) == 1 then
    if front then redis.call('LPUSH', p .. 'q:' .. tenant, entry)
    else redis.call('RPUSH', p .. 'q:' .. tenant, entry) end
  end
  if redis.call('SADD', p .. 'inring', tenant) == 1 then redis.call('RPUSH', p .. 'ring', tenant) end
end
"""

PUSH = _LUA_PUSH + """
push(ARGV[1], ARGV[2], ARGV[3], false)
return 1
"""

# ARGV: prefix, tenant, entry. PUSH, unless the entry is on a worker now (leased): a message
# re-sent for a running entry must not queue it a second time.
PUSH_UNLESS_LEASED = _LUA_PUSH + """
if redis.call('ZSCORE', ARGV[1] .. 'run:' .. ARGV[2], ARGV[3]) then return 0 end
push(ARGV[1], ARGV[2], ARGV[3], false)
return 1
"""

# ARGV: prefix, lease ms, cap (0: none), most leases reaped per call, previews a tenant may run
# at once (0: no bound), how far into a tenant's queue to look past its waiting previews, the
# holder (the taking process, `holder_of`). Returns {tenant or false, entry or false, capped 0/1,
# reaped entries as tenant|entry...}.
TAKE = _LUA_PUSH + """
local p, lease, cap, most = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local lane, look, holder = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local function is_preview(entry) return string.sub(entry, 1, 8) == 'preview:' end
-- The entry a tenant runs next: its oldest; with `lane` of its previews running, its oldest that
-- is not a preview (false: none within `look`).
local function next_entry(tenant)
  local queue = p .. 'q:' .. tenant
  if lane > 0 then
    local previews = 0
    for _, held in ipairs(redis.call('ZRANGE', p .. 'run:' .. tenant, 0, -1)) do
      if is_preview(held) then previews = previews + 1 end
    end
    if previews >= lane then
      for _, entry in ipairs(redis.call('LRANGE', queue, 0, look - 1)) do
        if not is_preview(entry) then return entry end
      end
      return false
    end
  end
  return redis.call('LINDEX', queue, 0)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local result = {false, false, 0}
for _, held in ipairs(redis.call('ZRANGEBYSCORE', p .. 'leases', '-inf', now, 'LIMIT', 0, most)) do
  local bar = string.find(held, '|', 1, true)
  local tenant, entry = string.sub(held, 1, bar - 1), string.sub(held, bar + 1)
  redis.call('ZREM', p .. 'leases', held)
  redis.call('ZREM', p .. 'run:' .. tenant, entry)
  redis.call('HDEL', p .. 'holders', held)
  push(p, tenant, entry, true)
  table.insert(result, held)
end
-- The turn goes to the waiting tenant with the fewest entries on workers; among equals, the one
-- first in the ring (the longest since its last turn). A tenant at the cap, or with only
-- previews waiting while its previews fill their lane, is passed over.
local best, fewest, best_entry = nil, nil, nil
for _, tenant in ipairs(redis.call('LRANGE', p .. 'ring', 0, -1)) do
  if redis.call('LLEN', p .. 'q:' .. tenant) == 0 then
    redis.call('LREM', p .. 'ring', 1, tenant)
    redis.call('SREM', p .. 'inring', tenant)
  else
    local running = redis.call('ZCARD', p .. 'run:' .. tenant)
    if cap > 0 and running >= cap then
      result[3] = 1
    elseif fewest == nil or running < fewest then
      local entry = next_entry(tenant)
      if entry then best, fewest, best_entry = tenant, running, entry else result[3] = 1 end
    end
  end
end
if best then
  local queue = p .. 'q:' .. best
  local entry = best_entry
  redis.call('LREM', queue, 1, entry)
  redis.call('SREM', p .. 'pending:' .. best, entry)
  redis.call('ZADD', p .. 'run:' .. best, now + lease, entry)
  redis.call('ZADD', p .. 'leases', now + lease, best .. '|' .. entry)
  redis.call('HSET', p .. 'holders', best .. '|' .. entry, holder)
  redis.call('LREM', p .. 'ring', 1, best)
  if redis.call('LLEN', queue) > 0 then redis.call('RPUSH', p .. 'ring', best)
  else redis.call('SREM', p .. 'inring', best) end
  result[1], result[2], result[3] = best, entry, 0
end
return result
"""

# ARGV: prefix, lease ms, then tenant, entry pairs. Only a lease still held is extended (one
# reaped meanwhile is not brought back: its entry is queued again).
RENEW = """
local p, lease = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 3, #ARGV, 2 do
  local tenant, entry = ARGV[i], ARGV[i + 1]
  if redis.call('ZSCORE', p .. 'run:' .. tenant, entry) then
    redis.call('ZADD', p .. 'run:' .. tenant, now + lease, entry)
    redis.call('ZADD', p .. 'leases', now + lease, tenant .. '|' .. entry)
  end
end
return 1
"""

RELEASE = """
redis.call('ZREM', ARGV[1] .. 'run:' .. ARGV[2], ARGV[3])
redis.call('ZREM', ARGV[1] .. 'leases', ARGV[2] .. '|' .. ARGV[3])
redis.call('HDEL', ARGV[1] .. 'holders', ARGV[2] .. '|' .. ARGV[3])
return 1
"""

# ARGV: prefix, holder. The leases `holder` holds, reaped now as an expired one is (its process is
# gone): the slot freed, the entry back at the front of its tenant's queue. Returns them as
# tenant|entry. `holders` has one field per lease held, a few per worker process at most.
RELEASE_HOLDER = _LUA_PUSH + """
local p, holder = ARGV[1], ARGV[2]
local released = {}
local fields = redis.call('HGETALL', p .. 'holders')
for i = 1, #fields, 2 do
  local held, by = fields[i], fields[i + 1]
  if by == holder then
    local bar = string.find(held, '|', 1, true)
    local tenant, entry = string.sub(held, 1, bar - 1), string.sub(held, bar + 1)
    redis.call('HDEL', p .. 'holders', held)
    if redis.call('ZREM', p .. 'run:' .. tenant, entry) == 1 then
      redis.call('ZREM', p .. 'leases', held)
      push(p, tenant, entry, true)
      table.insert(released, held)
    end
  end
end
return released
"""

REAP_AT_MOST = 100
# How far into a tenant's queue a turn looks for an entry that is not a preview, when the tenant's
# previews fill their lane (CTXENG_FAIR_TENANT_MAX_PREVIEWS).
LOOK_PAST_PREVIEWS = 100


def enabled() -> bool:
    """Fair dispatch applies: jobs go through Celery (REDIS_URL set) and CTXENG_FAIR_DISPATCH is on."""
    return settings.CTXENG_FAIR_DISPATCH and not settings.CTXENG_JOBS_INLINE


_clients: dict[tuple[int, str], redis.Redis] = {}


def _redis() -> redis.Redis:
    """A client of the broker's Redis, one per process (a connection must not cross a fork).
    Imported here: importing redis-py loads OpenTelemetry, which a process without OTEL_* set
    must not (tests/service/test_telemetry.py)."""
    import redis

    url = app.conf.broker_url
    key = (os.getpid(), url)
    if key not in _clients:
        _clients.clear()
        _clients[key] = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
    return _clients[key]


def _script(source: str, *args: Any) -> Any:
    return _redis().eval(source, 0, PREFIX, *args)


def _lease_ms() -> int:
    return max(1, round(settings.CTXENG_FAIR_LEASE_SECONDS * 1000))


def entry_of(kind: str, item_id: str) -> str:
    return f"{kind}:{item_id}"


def push(*, kind: str, item_id: str, tenant_id: int | str) -> None:
    """Queue an entry at the back of its tenant's queue (a no-op while it is queued already); the
    caller then sends its message. Raises what Redis raises: the callers' enqueue never raises,
    and leaves a job it could not hand over to the stale-job sweep."""
    _script(PUSH, str(tenant_id), entry_of(kind, item_id))


@dataclass(frozen=True)
class Turn:
    """What `take` gave this message: an entry (with its tenant), or none; `capped`: entries are
    waiting, but each of their tenants is at its cap of running entries."""

    tenant: str | None
    kind: str | None
    item_id: str | None
    capped: bool


def holder_of(pid: int, parent_pid: int) -> str:
    """Who holds a lease: the process by host, its parent's pid and its own. A pool process and its
    worker's main process both know this name of it (the main process by the request's
    worker_pid); the parent's pid tells apart the pools of two workers on one host."""
    return f"{socket.gethostname()}:{parent_pid}:{pid}"


def _send_again(released: list[bytes], why: str) -> None:
    for held in released:
        lost_tenant, _, lost = held.decode().partition("|")
        kind, _, item_id = lost.partition(":")
        logger.warning("fair dispatch: %s held by tenant %s %s; queued again", lost, lost_tenant, why)
        app.send_task(TASKS[kind], args=[item_id])


def take() -> Turn:
    """The next entry in turn (its lease now held by this process); reaped leases are re-sent."""
    tenant, entry, capped, *reaped = _script(
        TAKE, _lease_ms(), settings.CTXENG_FAIR_TENANT_MAX_RUNNING, REAP_AT_MOST,
        settings.CTXENG_FAIR_TENANT_MAX_PREVIEWS, LOOK_PAST_PREVIEWS, holder_of(os.getpid(), os.getppid()))
    _send_again(reaped, "expired (its lease was not renewed)")
    if not tenant:
        return Turn(tenant=None, kind=None, item_id=None, capped=bool(capped))
    kind, _, item_id = entry.decode().partition(":")
    return Turn(tenant=tenant.decode(), kind=kind, item_id=item_id, capped=False)


class _Leases:
    """One thread per process renews the leases of the entries the process is running, every
    third of a lease, so a live run keeps its slot and a killed one loses it within a lease."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[tuple[str, str], int] = {}
        self.pid: int | None = None

    def add(self, tenant: str, entry: str) -> None:
        with self.lock:
            self.held[(tenant, entry)] = self.held.get((tenant, entry), 0) + 1
            if self.pid != os.getpid():
                self.pid = os.getpid()
                threading.Thread(target=self._run, name="fair-leases", daemon=True).start()

    def remove(self, tenant: str, entry: str) -> None:
        with self.lock:
            if self.held.get((tenant, entry), 0) > 1:
                self.held[(tenant, entry)] -= 1
            else:
                self.held.pop((tenant, entry), None)

    def _run(self) -> None:
        while True:
            threading.Event().wait(settings.CTXENG_FAIR_LEASE_SECONDS / 3)
            with self.lock:
                held = [value for pair in self.held for value in pair]
            if not held:
                continue
            try:
                _script(RENEW, _lease_ms(), *held)
            except Exception:  # noqa: BLE001 - a missed renewal must not stop the thread
                logger.warning("fair dispatch: lease renewal failed", exc_info=True)


_leases = _Leases()


@contextmanager
def holding(turn: Turn) -> Iterator[None]:
    """Keep the turn's lease while the body runs its entry; free the tenant's slot after."""
    entry = entry_of(turn.kind or "", turn.item_id or "")
    _leases.add(turn.tenant or "", entry)
    try:
        yield
    finally:
        _leases.remove(turn.tenant or "", entry)
        try:
            _script(RELEASE, turn.tenant, entry)
        except Exception:  # noqa: BLE001 - an unreleased lease expires by itself
            logger.warning("fair dispatch: could not release %s; its lease will expire", entry, exc_info=True)


def release_lost(*, pid: int) -> list[str]:
    """Free at once the slots held by the pool process `pid` of this worker, which is gone (killed,
    or stopped at its hard time limit), and queue their entries again, first in their tenants'
    queues: as an expired lease is, without waiting CTXENG_FAIR_LEASE_SECONDS for it. Called by
    the worker's main process (TurnRequest). Returns the released entries as tenant|entry."""
    released = _script(RELEASE_HOLDER, holder_of(pid, os.getpid()))
    _send_again(released, f"was on pool process {pid}, which is gone")
    return [held.decode() for held in released]


class TurnRequest(Request):
    """The request class of every fair-dispatch task, in the worker's main process: when the pool
    process running a turn dies (SIGKILL, the OOM killer, the hard time limit), the main process
    learns it from the pool (WorkerLostError, or the hard timeout) and frees the slots that process
    held before the message is requeued or acknowledged (issue 51, N9: a tenant's slot stayed held
    39 s, until its lease expired). A lease stays the guard for what the main process cannot see:
    a whole worker killed, or a host lost."""

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> Any:
        exc = exc_info.exception
        exc = exc.exc if isinstance(exc, ExceptionWithTraceback) else exc
        if isinstance(exc, WorkerLostError | TimeLimitExceeded):
            self._release_lost()
        return super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)

    def on_timeout(self, soft: bool, timeout: float) -> Any:
        if not soft:  # the pool kills the process at its hard time limit
            self._release_lost()
        return super().on_timeout(soft, timeout)

    def _release_lost(self) -> None:
        if not self.worker_pid or not enabled():
            return
        try:
            release_lost(pid=self.worker_pid)
        except Exception:  # noqa: BLE001 - the leases still expire by themselves
            logger.warning("fair dispatch: could not release the slots of pool process %s; their leases will "
                           "expire", self.worker_pid, exc_info=True)


def run_turn(*, kind: str, item_id: str, traceparent: str | None, requeue: Callable[[float], Any]) -> Any:
    """What a message does: run the entry in turn (fair dispatch), else the one it was sent for.

    `requeue(countdown)` sends this message again; called when every waiting tenant is at its cap
    (or has only previews waiting while its previews fill their lane).
    The traceparent belongs to the message's own entry; another entry's run reads its own."""
    if not enabled():
        return _runners[kind](item_id, traceparent)
    turn = take()
    if turn.capped:
        logger.info("fair dispatch: every waiting tenant is at CTXENG_FAIR_TENANT_MAX_RUNNING=%s or has only "
                    "previews waiting beyond CTXENG_FAIR_TENANT_MAX_PREVIEWS=%s; turn requeued",
                    settings.CTXENG_FAIR_TENANT_MAX_RUNNING, settings.CTXENG_FAIR_TENANT_MAX_PREVIEWS)
        requeue(settings.CTXENG_FAIR_REQUEUE_SECONDS)
        return None
    if turn.tenant is None:
        # Nothing waiting, yet this message was sent: its entry was taken by another message
        # (the sweep re-sent a job, a lease expired), or lost with the broker's data, or it was
        # sent before fair dispatch was on. Its item, if it still waits, is queued again and
        # takes a turn like any other, under a lease and the caps: run outside them it would
        # let its tenant pass its cap (issue 51, N9).
        tenant = _waiting_tenants[kind](item_id)
        if tenant is None:
            return None  # done, on a worker, or gone: its claim would refuse it anyway
        _script(PUSH_UNLESS_LEASED, str(tenant), entry_of(kind, item_id))
        turn = take()
        if turn.capped:
            requeue(settings.CTXENG_FAIR_REQUEUE_SECONDS)
            return None
        if turn.tenant is None:
            return None
    own = (turn.kind, turn.item_id) == (kind, item_id)
    with holding(turn):
        return _runners[turn.kind or ""](turn.item_id or "", traceparent if own else None)
