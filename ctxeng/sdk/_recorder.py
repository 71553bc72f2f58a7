"""`Recorder`: send a local session's steps to the service in the background, never in the agent's way.

    recorder = sdk.Recorder(url=URL, token=TOKEN, spool_dir="~/.ctxeng/spool")
    session = sdk.Session("chat-agent", principal={...}, record=recorder)   # local: the engine here
    ...
    session.close()          # flushes within `flush_timeout`
    recorder.status          # {"pending", "sent", "dropped", "spooled", "refused"}

Each local step (assembled in this process exactly as without recording) hands its request and
its sealed manifest to `record`, which only appends them to a bounded in-memory queue: no network,
no JSON, no disk on the step's path unless the queue is full. A daemon thread turns them into JSON
and POSTs them in batches to `/api/v1/recorded-steps/` (it sends once `batch_size` steps are queued
or the oldest has waited `batch_delay`, so a fast agent pays one request for many steps, and a
flush sends at once), each step with the idempotency key
`<run_id>/<step_id>` (the service stores a step sent twice once), where a worker re-assembles it
and records `verified`, `diverged` or `unverifiable`.

Content by reference: a candidate's content of REF_MIN characters or more, once a step that
carried it was acknowledged in its tenant, is sent as `content_ref` (its `content_hash`) instead of
`content` in later steps: the service keeps such texts by that digest and puts them back before it
reads the step. A step whose reference the service no longer has (purged) is answered 409; the
recorder forgets the tenant's references and sends that step again whole. Spooled steps are
written whole, so a spool never depends on what the service still holds.

When the service is unreachable, slow (no answer within `request_timeout`) or busy (429/503, not
before their `Retry-After`, up to `retry_cap`), the thread backs off and moves what is queued to the spool: one file per step in `spool_dir`, written
atomically (a temporary name, then a rename), sent oldest first once the service answers, also by
a new Recorder on the same directory after the agent restarts. Bounds: `max_queue` steps in memory
(a full queue moves its oldest step to the spool, or, without a spool, drops it), `max_spool`
files on disk (a full spool deletes its oldest). A dropped step is counted, per run, and the counts
are sent with the next batch so the run's page says how many steps it lacks; with a spool the
counts survive a restart (`dropped.json`). A step the service refuses (another tenant, a policy
revision it does not have, an invalid manifest) is `refused`, kept in `errors`, never sent again.

Nothing here raises into the agent: `record` catches everything and counts a step it could not
take as dropped. The light install: the stdlib and ctxeng.client, nothing of the server.
"""

from __future__ import annotations

import atexit
import bisect
import json
import logging
import os
import random
import tempfile
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client import (
    AuthError,
    Client,
    ClientError,
    ConnectionFailed,
    PayloadTooLarge,
    ProtocolError,
    RateLimited,
    ServerError,
)

logger = logging.getLogger("ctxeng.sdk.recorder")

ENDPOINT = "/api/v1/recorded-steps/"
SPOOL_SUFFIX = ".step"
DROPPED_FILE = "dropped.json"
# What the service refuses in one batch (manifests.api.MAX_RECORDED_BATCH); a batch is also cut at
# `max_batch_bytes`, below the service's default body limit (CTXENG_MAX_REQUEST_BYTES, 16 MiB).
MAX_BATCH = 50
ERRORS_KEPT = 20
# The service keeps a string of this many characters or more as a blob of its own, by the digest
# of its UTF-8 bytes (ctxeng.content.packing.TEXT_MIN): a candidate's `content_hash`.
REF_MIN = 256
KNOWN_MAX = 100_000  # digests remembered per tenant; beyond it the tenant's are forgotten (sent whole again)

# Failures after which the same steps may well be accepted later: kept (spooled) and retried.
_TRANSIENT = (ConnectionFailed, RateLimited, ServerError, ProtocolError, AuthError)


@dataclass
class _Entry:
    """One step to send. `body` is its JSON text, made by the sending thread (or when spilled);
    `offered`: the digests of the long contents it carries whole (known to the service once it is
    acknowledged); `referenced`: it names some by `content_ref` (then its request and manifest are
    kept until it is settled, to send it whole if the service lacks one)."""

    key: str
    tenant: str
    run_id: str
    queued_at: float = 0.0
    order: str = ""  # its place among the steps recorded (time, process, sequence): its spool file's name
    request: dict[str, Any] | None = None
    manifest: Any = None
    body: str | None = None
    spool_name: str | None = None
    offered: tuple[str, ...] = ()
    referenced: bool = False

    def text(self, known: set[str] | frozenset[str] = frozenset()) -> str:
        """The step's JSON, made once: each long content in `known` sent by reference."""
        if self.body is None:
            manifest = self.manifest
            sealed = manifest if isinstance(manifest, str) else (
                json.dumps(manifest, ensure_ascii=False) if isinstance(manifest, dict) else manifest.model_dump_json())
            request, self.offered, self.referenced = _by_reference(self.request, known)
            self.body = (f'{{"idempotency_key":{json.dumps(self.key, ensure_ascii=False)},'
                         f'"request":{json.dumps(request, ensure_ascii=False)},"manifest":{sealed}}}')
            if not self.referenced:
                self.request = self.manifest = None  # the text is all that is kept
        return self.body

    def whole(self) -> str:
        """The step's JSON with every content in it (a step sent by reference, made again)."""
        if self.referenced and self.request is not None:
            self.body, self.referenced = None, False
        return self.text()


def _by_reference(request: Any, known: set[str] | frozenset[str]) -> tuple[Any, tuple[str, ...], bool]:
    """(`request` with each candidate's long content whose digest is in `known` as `content_ref`,
    in the place of `content`; the digests of the long contents left whole; whether any was
    replaced). The request itself is not changed: the candidates replaced are new dicts."""
    candidates = request.get("candidates") if isinstance(request, dict) else None
    if not isinstance(candidates, list):
        return request, (), False
    out, offered, referenced = [], [], False
    for candidate in candidates:
        content = candidate.get("content") if isinstance(candidate, dict) else None
        digest = candidate.get("content_hash") if content is not None else None
        if isinstance(content, str) and len(content) >= REF_MIN and isinstance(digest, str):
            if digest in known:
                candidate = {("content_ref" if k == "content" else k): (digest if k == "content" else v)
                             for k, v in candidate.items()}
                referenced = True
            else:
                offered.append(digest)
        out.append(candidate)
    return ({**request, "candidates": out} if referenced else request), tuple(offered), referenced


@dataclass
class _Counts:
    sent: int = 0
    dropped: int = 0
    refused: int = 0
    dropped_by_run: dict[tuple[str, str], int] = field(default_factory=dict)
    reported: dict[tuple[str, str], int] = field(default_factory=dict)


class Recorder:
    """Records local steps to the service at `url` with an agent `token` (see the module docstring).

    `spool_dir`: where steps wait while the service cannot take them (None: memory only, and a step
    that cannot wait there is dropped). `max_queue` (1000 steps) bounds memory, `max_spool` (10,000
    files) the spool; `batch_size` (at most 50) and `max_batch_bytes` (4 MiB) bound one request;
    `batch_delay` (0.5 s) is how long a step may wait in memory for others to share its request;
    `request_timeout` (10 s) is how long a send may take before the service counts as slow;
    `flush_timeout` (10 s) is how long `flush()`, `Session.close()` and interpreter exit wait.
    Backoff between failed sends: full jitter from `retry_base` (0.5 s) up to `retry_cap` (30 s), and
    at least the `Retry-After` of a 429 or 503 (up to `retry_cap`).
    """

    def __init__(self, url: str, token: str, *, spool_dir: str | os.PathLike[str] | None = None, max_queue: int = 1000,
                 max_spool: int = 10_000, batch_size: int = MAX_BATCH, max_batch_bytes: int = 4 * 1024 * 1024,
                 batch_delay: float = 0.5, request_timeout: float = 10.0, flush_timeout: float = 10.0, retry_base: float = 0.5,
                 retry_cap: float = 30.0) -> None:
        if max_queue < 1 or max_spool < 1:
            raise ValueError("max_queue and max_spool: at least 1")
        self._client = Client(url, token, request_timeout=request_timeout, max_retries=0)
        self.url = self._client.base_url
        self.max_queue, self.max_spool = max_queue, max_spool
        self.batch_size = max(1, min(batch_size, MAX_BATCH))
        self.max_batch_bytes = max_batch_bytes
        self.batch_delay = batch_delay
        self.flush_timeout = flush_timeout
        self.retry_base, self.retry_cap = retry_base, retry_cap
        self.errors: deque[str] = deque(maxlen=ERRORS_KEPT)  # the service's refusals and the last failures, newest last
        self._cond = threading.Condition()
        self._queue: deque[_Entry] = deque()
        self._inflight = 0
        self._counts = _Counts()
        self._spool: deque[str] = deque()  # file names, oldest first
        self._known: dict[str, set[str]] = {}  # tenant -> digests of long contents the service acknowledged
        self._spool_dir = Path(spool_dir).expanduser() if spool_dir is not None else None
        self._failures = 0
        self._retry_at = 0.0
        self._flushing = 0  # flush() calls waiting: the thread sends what is queued without waiting for more
        self._closed = False
        self._thread: threading.Thread | None = None
        if self._spool_dir is not None:
            self._spool_dir.mkdir(parents=True, exist_ok=True)
            self._spool.extend(sorted(n for n in os.listdir(self._spool_dir) if n.endswith(SPOOL_SUFFIX)))
            self._load_dropped()
            if self._spool:
                self._start()  # what an earlier process left is sent now
        _open.add(self)

    # ------------------------------------------------------------------ the agent's side

    def record(self, request: dict[str, Any], manifest: Any) -> None:
        """Queue one sealed step (its request and manifest: the engine's or its JSON form). Never
        raises, never waits on the network; a full queue spills its oldest step (see the class)."""
        try:
            principal = request.get("principal") or {}
            entry = _Entry(key=f"{request['run_id']}/{request['step_id']}", tenant=str(principal.get("tenant", "")),
                           run_id=str(request["run_id"]), queued_at=time.monotonic(), order=_order(),
                           request=request, manifest=manifest)
            with self._cond:
                if self._closed:
                    self._drop(entry)
                    return
                self._queue.append(entry)
                overflow = self._queue.popleft() if len(self._queue) > self.max_queue else None
                if len(self._queue) in (1, self.batch_size):  # the thread's wait starts, or may end
                    self._cond.notify()
            if overflow is not None:
                self._spill([overflow])
            self._start()
        except Exception:  # noqa: BLE001 - recording never breaks the agent's step
            logger.warning("ctxeng recorder: a step could not be queued", exc_info=True)
            with self._cond:
                self._counts.dropped += 1

    @property
    def status(self) -> dict[str, Any]:
        """`pending`: steps not yet acknowledged by the service (queued, in flight or spooled);
        `spooled`: of those, on disk; `sent`: acknowledged (stored, or stored before);
        `dropped`: lost to a bound (or to closing without a spool; with a spool, every process's
        on it); `refused`: the service said no."""
        with self._cond:
            spooled = len(self._spool)
            return {"pending": len(self._queue) + self._inflight + spooled, "sent": self._counts.sent,
                    "dropped": self._counts.dropped, "spooled": spooled, "refused": self._counts.refused}

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every step recorded so far is acknowledged, at most `timeout` s (default
        `flush_timeout`); True when nothing is pending. Retries a failing service at once."""
        deadline = time.monotonic() + (self.flush_timeout if timeout is None else timeout)
        with self._cond:
            self._retry_at = 0.0
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._queue or self._inflight or self._spool or self._unreported():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self._thread is None or not self._thread.is_alive():
                        return False
                    self._cond.wait(min(remaining, 0.5))
                return True
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> dict[str, Any]:
        """Flush within `timeout`, then stop: what is left goes to the spool (sent by the next
        Recorder on it), or without a spool is dropped and counted. Returns `status`."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            left = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(1.0)  # a send under way ends (its steps settled, spooled or dropped) unless it is slow
        if self._spool_dir is not None:
            self._spill(left)
        else:
            with self._cond:
                for entry in left:
                    self._drop(entry)
        _open.discard(self)
        return self.status

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ counting

    def _drop(self, entry: _Entry) -> None:
        """Count a lost step against its run (under the lock)."""
        self._counts.dropped += 1
        run = (entry.tenant, entry.run_id)
        self._counts.dropped_by_run[run] = self._counts.dropped_by_run.get(run, 0) + 1
        self._save_dropped()

    def _load_dropped(self) -> None:
        try:
            saved = json.loads((self._spool_dir / DROPPED_FILE).read_text(encoding="utf-8"))  # type: ignore[operator]
            for row in saved:
                self._counts.dropped_by_run[(row["tenant"], row["run_id"])] = int(row["count"])
            self._counts.dropped = sum(self._counts.dropped_by_run.values())  # the spool's, across restarts
        except (OSError, ValueError, KeyError, TypeError):
            return

    def _save_dropped(self) -> None:
        if self._spool_dir is None:
            return
        rows = [{"tenant": t, "run_id": r, "count": n} for (t, r), n in sorted(self._counts.dropped_by_run.items())]
        _write_atomically(self._spool_dir, DROPPED_FILE, json.dumps(rows))

    def _unreported(self) -> list[dict[str, Any]]:
        """Each run's total of dropped steps that the service has not acknowledged yet (a total,
        not an increment: a report sent twice counts once)."""
        return [{"tenant": t, "run_id": r, "count": n} for (t, r), n in self._counts.dropped_by_run.items()
                if self._counts.reported.get((t, r)) != n]

    # ------------------------------------------------------------------ the spool

    def _spill(self, entries: list[_Entry]) -> None:
        """Write `entries` to the spool (oldest first), deleting the spool's oldest beyond
        `max_spool`; without a spool they are dropped. Each file: a line of what the count of a
        dropped step needs, then the step's JSON."""
        if not entries:
            return
        if self._spool_dir is None:
            with self._cond:
                for entry in entries:
                    self._drop(entry)
            return
        for entry in entries:
            if entry.spool_name is not None:
                continue  # already on disk
            try:
                head = json.dumps({"key": entry.key, "tenant": entry.tenant, "run_id": entry.run_id}, ensure_ascii=False)
                # Named by when it was recorded, not spilled: the sending thread may spill an older
                # batch after the agent's thread spilled newer steps, and the oldest go first.
                name = f"{entry.order or _order()}{SPOOL_SUFFIX}"
                _write_atomically(self._spool_dir, name, head + "\n" + entry.whole())  # never by reference
            except Exception:  # noqa: BLE001 - a full disk must not break the agent either
                logger.warning("ctxeng recorder: could not spool step %s", entry.key, exc_info=True)
                with self._cond:
                    self._drop(entry)
                continue
            with self._cond:
                bisect.insort(self._spool, name)
                while len(self._spool) > self.max_spool:
                    self._drop_spooled(self._spool.popleft())
                self._cond.notify_all()

    def _drop_spooled(self, name: str) -> None:
        path = self._spool_dir / name  # type: ignore[operator]
        try:
            head = json.loads(path.read_text(encoding="utf-8").split("\n", 1)[0])
            path.unlink()
        except FileNotFoundError:
            return  # sent meanwhile (another Recorder on the same spool)
        except (OSError, ValueError):
            head = {}
            path.unlink(missing_ok=True)
        self._drop(_Entry(key=str(head.get("key", "")), tenant=str(head.get("tenant", "")), run_id=str(head.get("run_id", ""))))

    def _read_spooled(self, name: str) -> _Entry | None:
        try:
            head, body = (self._spool_dir / name).read_text(encoding="utf-8").split("\n", 1)  # type: ignore[operator]
            meta = json.loads(head)
            return _Entry(key=meta["key"], tenant=meta["tenant"], run_id=meta["run_id"], body=body, spool_name=name)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError):
            logger.warning("ctxeng recorder: unreadable spool file %s dropped", name)
            (self._spool_dir / name).unlink(missing_ok=True)  # type: ignore[operator]
            return None

    # ------------------------------------------------------------------ the sending thread

    def _start(self) -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="ctxeng-recorder", daemon=True)
                self._thread.start()

    def _take(self) -> list[_Entry]:
        """The next batch, oldest first: the spool's (older than anything queued), else the queue's."""
        batch: list[_Entry] = []
        with self._cond:
            names = list(self._spool)[: self.batch_size]
        for name in names:
            entry = self._read_spooled(name)
            if entry is None:
                with self._cond:
                    if name in self._spool:
                        self._spool.remove(name)
                continue
            batch.append(entry)
        if batch:
            return batch
        with self._cond:
            while self._queue and len(batch) < self.batch_size:
                batch.append(self._queue.popleft())
            self._inflight = len(batch)
        return batch

    def _wait(self) -> float | None:
        """Under the lock: 0 when a batch is to be sent now, else how long the thread may sleep
        (None: until notified): nothing to send, a backoff, or a short batch that may still grow."""
        if not (self._queue or self._spool or self._unreported()):
            return None
        now = time.monotonic()
        if now < self._retry_at:
            return self._retry_at - now
        if self._spool or self._flushing or len(self._queue) >= self.batch_size:
            return 0.0
        return max(0.0, self._queue[0].queued_at + self.batch_delay - now) if self._queue else 0.0

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (wait := self._wait()) != 0.0:
                    self._cond.wait(wait)
                if self._closed:
                    return
            try:
                self._send_next()
            except Exception:  # noqa: BLE001 - the thread must outlive any surprise
                logger.warning("ctxeng recorder: send failed unexpectedly", exc_info=True)
                self._back_off("unexpected error")

    def _send_next(self) -> None:
        batch = self._take()
        texts, size = [], 0
        for n, entry in enumerate(batch):
            text = entry.text(self._known.get(entry.tenant, frozenset()))
            if n and size + len(text) > self.max_batch_bytes:
                self._give_back(batch[n:])
                batch = batch[:n]
                break
            texts.append(text)
            size += len(text)
        with self._cond:
            dropped = self._unreported()
        body = (f'{{"steps":[{",".join(texts)}],"dropped":{json.dumps(dropped, ensure_ascii=False)}}}').encode()
        try:
            answer = self._client.record_steps(body)
        except PayloadTooLarge:
            if len(batch) > 1:  # one at a time, so only a step too large for the service is refused
                self.batch_size = 1
                self._give_back(batch)
                return
            self._settle(batch, [{"outcome": "refused", "errors": ["the step is larger than the service accepts (413)"]}])
            return
        except _TRANSIENT as exc:
            self._failed(batch, exc)
            return
        except ClientError as exc:  # the batch as a whole refused (400): nothing in it will be accepted later
            self._settle(batch, [{"outcome": "refused", "errors": exc.errors}] * len(batch))
            return
        with self._cond:
            for row in dropped:
                self._counts.reported[(row["tenant"], row["run_id"])] = row["count"]
        results = answer.get("results") if isinstance(answer, dict) else None
        if not isinstance(results, list) or len(results) != len(batch):
            self._failed(batch, ProtocolError(f"{ENDPOINT}: expected one result per step"))
            return
        self._settle(batch, results)

    def _settle(self, batch: list[_Entry], results: list[Any]) -> None:
        """The service answered for each step: acknowledged or refused, either way done."""
        if len(results) == 1 and len(batch) > 1:
            results = results * len(batch)
        again = []
        with self._cond:
            for entry, result in zip(batch, results, strict=True):
                outcome = result.get("outcome") if isinstance(result, dict) else None
                if outcome in ("stored", "duplicate"):
                    self._counts.sent += 1
                    known = self._known.setdefault(entry.tenant, set())
                    if len(known) + len(entry.offered) > KNOWN_MAX:
                        known.clear()
                    known.update(entry.offered)
                elif entry.referenced and entry.request is not None and _lacks_content(result):
                    self._known.pop(entry.tenant, None)  # what the service purged: sent whole from now on
                    entry.body = None  # made again when next sent, with none of the tenant's references
                    again.append(entry)
                    continue
                else:
                    self._counts.refused += 1
                    errors = result.get("errors") if isinstance(result, dict) else None
                    self.errors.append(f"{entry.key}: {'; '.join(map(str, errors or ['refused']))}")
                if entry.spool_name is not None:
                    (self._spool_dir / entry.spool_name).unlink(missing_ok=True)  # type: ignore[operator]
                    if entry.spool_name in self._spool:
                        self._spool.remove(entry.spool_name)
            self._inflight = 0
            self._failures = 0
            self._retry_at = 0.0
            self._queue.extendleft(reversed(again))
            self._cond.notify_all()

    def _give_back(self, entries: list[_Entry]) -> None:
        """Unsent entries of a batch go back where they came from (the spool's stay on disk)."""
        with self._cond:
            queued = [e for e in entries if e.spool_name is None]
            self._queue.extendleft(reversed(queued))
            self._inflight = max(0, self._inflight - len(queued))
            self._cond.notify_all()

    def _failed(self, batch: list[_Entry], exc: Exception) -> None:
        """The service cannot take steps now: what was sent and everything queued waits in the
        spool (so an agent that exits meanwhile loses nothing), or without one back in memory,
        within `max_queue`."""
        self.errors.append(f"{type(exc).__name__}: {exc}")
        with self._cond:
            queued = [e for e in batch if e.spool_name is None] + list(self._queue)
            self._queue.clear()
            self._inflight = 0
        if self._spool_dir is not None:
            self._spill(queued)
        else:
            with self._cond:
                if self._closed:  # closed meanwhile: nothing will send them
                    for entry in queued:
                        self._drop(entry)
                    queued = []
                self._queue.extend(queued)
                while len(self._queue) > self.max_queue:
                    self._drop(self._queue.popleft())
        self._back_off(str(exc), getattr(exc, "retry_after", None))

    def _back_off(self, reason: str, retry_after: float | None = None) -> None:
        """Wait before the next send: full jitter, and never less than the service's Retry-After (a
        429 or 503 says when it can take the batch: a large one waits for its tenant's slot)."""
        with self._cond:
            self._failures += 1
            delay = random.uniform(self.retry_base, min(self.retry_cap, self.retry_base * 2 ** min(self._failures, 16)))
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.retry_cap))
            self._retry_at = time.monotonic() + delay
            self._cond.notify_all()
        logger.info("ctxeng recorder: service unavailable (%s); retrying in %.1f s", reason[:200], delay)


def _lacks_content(result: Any) -> bool:
    """The service refused the step because a content it names by reference is not stored (409)."""
    errors = result.get("errors") if isinstance(result, dict) else None
    return result.get("status") == 409 and any("content_ref" in str(e) for e in errors or ())


def _write_atomically(directory: Path, name: str, text: str) -> None:
    """`name` appears whole or not at all: written under a temporary name, synced, renamed."""
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, directory / name)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _counter():
    n = 0
    while True:
        n += 1
        yield n


_sequence = _counter()


def _order() -> str:
    """A name that sorts as the steps were recorded, across the processes sharing a spool."""
    return f"{time.time_ns():020d}-{os.getpid()}-{next(_sequence):08d}"
_open: weakref.WeakSet[Recorder] = weakref.WeakSet()


@atexit.register
def _close_open_recorders() -> None:
    """At interpreter exit each open recorder flushes (within its `flush_timeout`) and spools the rest."""
    for recorder in list(_open):
        try:
            recorder.close()
        except Exception:  # noqa: BLE001 - exit must not fail for recording
            logger.warning("ctxeng recorder: close at exit failed", exc_info=True)
