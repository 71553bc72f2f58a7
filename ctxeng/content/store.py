"""The content store: blobs once per tenant by sha256, written and read by reference.

    content_save(tenant=..., packer=...)   inside the holder's transaction: every blob the packer
                                           collected exists for the tenant, at the current epoch
    content_read(tenant_id=..., skeleton=...)  the document a skeleton packs (packing.unpack)
    content_purge(tenant=...)              delete the blobs no kept holder refers to

Holders are the rows that keep skeletons or digests (a job's request, a manifest's document and
payload, an artifact's body, an item decision's record); each app registers its own with
`register_holder`, and the purge marks what they refer to, following JSON blobs to their children
as Git's gc follows trees.

Race safety without clocks: a writer reads the purge epoch holding its row shared (PostgreSQL
`FOR SHARE`; SQLite serializes writers with its write lock) and brings each blob it refers to up
to that epoch in its own transaction, inserting the blobs that are missing (a writer always holds
the bytes it refers to). A purge first bumps the epoch, which waits for every writer in flight, so
their holders are committed before it marks; after the bump, every blob a new writer refers to is
at the new epoch, and the purge deletes only blobs of an older epoch, re-checked under each row's
lock. A purge racing a submit that reuses a blob therefore loses nothing.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import OperationalError, connection, models, transaction
from django.utils import timezone

from . import packing
from .models import Content, ContentEpoch, Location

logger = logging.getLogger(__name__)

BATCH = 500  # digests per IN list (SQLite's variable limit and PostgreSQL's plan size)
COMPRESS_MIN = 128  # bytes; smaller bodies are stored as they are
TEXT_LEVEL = 1  # bodies: within 2% of level 9's size, at ~75% of its time
RECORD_LEVEL = 6  # records are small: level 6 with the dictionary is 13% smaller than level 1
RECORDS_V1_DIGEST = "sha256:cffa6271cb35cf59551449e83334078600d9979e9888293964b5c8d80ca0f945"


def _records_dictionary() -> bytes:
    """A zlib preset dictionary of typical records (one of each kind, from the worked example,
    never the benchmark's workload): a record of ~1 KB shares its keys and common values with it,
    so it compresses ~3x instead of ~1.8x alone. Stored bodies name the dictionary by encoding, so
    this file never changes: a better one is records-v2 with an encoding of its own."""
    data = (Path(__file__).resolve().parent / "dictionaries" / "records-v1.txt").read_bytes()
    if packing.digest_of(data) != RECORDS_V1_DIGEST:
        raise RuntimeError("ctxeng/content/dictionaries/records-v1.txt changed; stored records need it as it was")
    return data


RECORDS_V1 = _records_dictionary()
WRITE_ATTEMPTS = 5  # reads of one batch before `settle` gives up (each retry follows a racing purge)


class ContentUnavailable(RuntimeError):
    """A blob a holder names cannot be read or purged as configured (its body is in an object store
    this process is not configured for, or stored in an encoding it does not know)."""


def namespace(tenant_id: int) -> str:
    return f"tenant-{tenant_id}"


def _rows(columns: str, tenant_id: int, digests: list[str], model: type[models.Model] = Content) -> list[tuple]:
    """`columns` of the tenant's rows of `model` named in `digests` (at most BATCH): the hot read
    of every write and read, in plain SQL (the ORM's query building cost more than the query)."""
    if not digests:
        return []
    marks = ", ".join(["%s"] * len(digests))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {model._meta.db_table} WHERE tenant_id = %s AND digest IN ({marks})",
                       [tenant_id, *digests])
        return cursor.fetchall()


def _chunks(values: list[str], size: int = BATCH) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


# --------------------------------------------------------------------------- writing


def write_epoch() -> int:
    """The current purge epoch, held shared until the caller's transaction ends."""
    lock = " FOR SHARE" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT value FROM {ContentEpoch._meta.db_table} WHERE id = 1{lock}")
        row = cursor.fetchone()
    if row is None:
        ContentEpoch.objects.get_or_create(pk=1)
        return write_epoch()
    return int(row[0])


def settle(model: type[models.Model], *, tenant: Any, digests: list[str], epoch: int,
           insert: Callable[[list[str]], Any]) -> dict[str, int]:
    """Make each of `digests` a row of `model` (digest-keyed per tenant, with an `epoch`) at
    `epoch` or later, inside the caller's transaction: the writers' half of the purge's race guard
    (module docstring), shared by content blobs and manifests' item decisions. `insert(missing)`
    writes the rows that are missing (ignoring conflicts). Returns each digest's row id."""
    ids: dict[str, int] = {}
    for chunk in _chunks(sorted(digests)):
        pending = chunk
        for _ in range(WRITE_ATTEMPTS):
            have = {digest: (pk, at) for digest, pk, at in _rows("digest, id, epoch", tenant.pk, pending, model)}
            # Each one committed at this epoch or later: no purge can take it before we commit.
            ids.update((digest, pk) for digest, (pk, at) in have.items() if at >= epoch)
            stale = [digest for digest, (_, at) in have.items() if at < epoch]
            missing = [digest for digest in pending if digest not in have]
            if not stale and not missing:
                break
            if stale:
                model.objects.filter(tenant=tenant, digest__in=stale, epoch__lt=epoch).update(epoch=epoch)
            if missing:
                insert(missing)
            pending = stale + missing
            if connection.vendor == "sqlite":
                # The write lock makes the transaction serial: nothing changed since the read.
                ids.update((digest, pk) for digest, pk, _ in _rows("digest, id, epoch", tenant.pk, pending, model))
                break
            # Otherwise whatever a purge deleted between the read and the update, or a concurrent
            # writer inserted and then rolled back, is looked at again.
        else:
            raise OperationalError(
                f"could not settle {len(pending)} {model._meta.verbose_name}(s) for tenant {tenant.pk}, e.g. {pending[0]}")
    return ids


def content_save(*, tenant: Any, packer: packing.Packer, epoch: int | None = None) -> int:
    """Make every blob `packer` collected exist for `tenant` at the current epoch. Call inside the
    transaction that writes the holder (`epoch`: the one `write_epoch` gave in it, if read).
    Returns the bytes newly stored (0 when all were there)."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("content_save must run inside the holder's transaction")
    if not packer.blobs:
        return 0
    added = 0

    def insert(missing: list[str]) -> None:
        nonlocal added
        added += _insert(tenant, {digest: packer.blobs[digest] for digest in missing}, packer.kinds, epoch)

    epoch = write_epoch() if epoch is None else epoch
    settle(Content, tenant=tenant, digests=list(packer.blobs), epoch=epoch, insert=insert)
    return added


def _insert(tenant: Any, blobs: dict[str, bytes], kinds: dict[str, str], epoch: int) -> int:
    from .objectstore import object_store

    store = object_store()
    remote = {digest: data for digest, data in blobs.items() if store is not None and kinds[digest] == packing.TEXT}
    if remote:
        # The object first: a row that says "s3" always has its object.
        store.put_many(namespace(tenant.pk), remote)
    created_at = connection.ops.adapt_datetimefield_value(timezone.now())
    rows = []
    for digest, data in blobs.items():
        body, encoding = (None, "") if digest in remote else _stored(data, kinds[digest])
        location = Location.OBJECT_STORE if digest in remote else Location.DATABASE
        rows.append((tenant.pk, digest, kinds[digest], len(data), str(location), encoding, epoch, created_at, body))
    _insert_rows(rows)
    return sum(len(data) for data in blobs.values())


INSERT_COLUMNS = ("tenant_id", "digest", "kind", "size", "location", "encoding", "epoch", "created_at", "body")
INSERT_BATCH = 100  # rows per statement: 900 parameters, within SQLite's oldest limit (999)


def _insert_rows(rows: list[tuple]) -> None:
    """INSERT the rows, skipping a digest the tenant has (a concurrent writer's), in plain SQL:
    Django's bulk_create built a model instance and compiled every value of each row, most of a
    large submit's time in its view (issue 51, N4: 0.6 s of 1.1 s for a 4 MB request of 5,000
    candidates)."""
    one = "(" + ", ".join(["%s"] * len(INSERT_COLUMNS)) + ")"
    with connection.cursor() as cursor:
        for start in range(0, len(rows), INSERT_BATCH):
            batch = rows[start:start + INSERT_BATCH]
            cursor.execute(
                f"INSERT INTO {Content._meta.db_table} ({', '.join(INSERT_COLUMNS)}) VALUES {', '.join([one] * len(batch))} "
                "ON CONFLICT (tenant_id, digest) DO NOTHING",
                [value for row in batch for value in row])


def _stored(data: bytes, kind: str) -> tuple[bytes, str]:
    """(body, encoding): compressed when that saves a tenth or more."""
    if len(data) >= COMPRESS_MIN:
        if kind == packing.JSON:
            compressor = zlib.compressobj(RECORD_LEVEL, zdict=RECORDS_V1)
            packed, encoding = compressor.compress(data) + compressor.flush(), "zlib-r1"
        else:
            packed, encoding = zlib.compress(data, TEXT_LEVEL), "zlib"
        if len(packed) * 10 <= len(data) * 9:
            return packed, encoding
    return data, ""


def _loaded(body: bytes, encoding: str) -> bytes:
    if encoding == "zlib":
        return zlib.decompress(body)
    if encoding == "zlib-r1":
        decompressor = zlib.decompressobj(zdict=RECORDS_V1)
        return decompressor.decompress(body) + decompressor.flush()
    if encoding:
        raise ContentUnavailable(f"unknown content encoding {encoding!r}")
    return bytes(body)


# --------------------------------------------------------------------------- reading


def content_fetch(*, tenant_id: int, digests: list[str]) -> dict[str, bytes]:
    """The bytes of the named blobs of one tenant (absent ones are left out)."""
    found: dict[str, bytes] = {}
    remote: list[str] = []
    for chunk in _chunks(digests):
        for digest, location, encoding, body in _rows("digest, location, encoding, body", tenant_id, chunk):
            if location == Location.OBJECT_STORE:
                remote.append(digest)
            else:
                found[digest] = _loaded(body, encoding)
    if remote:
        from .objectstore import object_store

        store = object_store()
        if store is None:
            raise ContentUnavailable(
                f"content {remote[0]} is in the object store, but CTXENG_CONTENT_STORE is 'db' (set it to the bucket)"
            )
        found.update(store.get_many(namespace(tenant_id), remote))
    return found


def content_read(*, tenant_id: int, skeleton: str, keys: Iterable[str] | None = None, remember: bool = False) -> Any:
    """The document `skeleton` packs (only the top-level `keys` when given). `remember`: blobs this
    process decoded before are taken from its read memo (`read_memo`), each confirmed present in
    the tenant's store by one query without its body, and the ones fetched are kept there: a
    worker reads the agent's next step, which repeats most of the last step's candidates, without
    reading and decoding them again."""
    fetch = lambda digests: content_fetch(tenant_id=tenant_id, digests=digests)  # noqa: E731
    if not remember:
        return packing.unpack(skeleton, fetch, keys=keys)
    return packing.unpack(skeleton, fetch, keys=keys, memo=read_memo(),
                          present=lambda digests: content_present(tenant_id=tenant_id, digests=digests))


def content_present(*, tenant_id: int, digests: list[str]) -> set[str]:
    """Which of `digests` the tenant's store holds (one query per BATCH, no bodies read)."""
    return {row[0] for chunk in _chunks(digests) for row in _rows("digest", tenant_id, chunk)}


_READ_MEMO: packing.Memo | None = None


def read_memo() -> packing.Memo:
    """This process's memo of decoded blobs, CTXENG_CONTENT_READ_MEMO_MB of blob bytes at most."""
    global _READ_MEMO
    if _READ_MEMO is None:
        from django.conf import settings

        _READ_MEMO = packing.Memo(int(settings.CTXENG_CONTENT_READ_MEMO_MB * 1024 * 1024))
    return _READ_MEMO


def content_read_many(*, tenant_id: int, digests: list[str]) -> dict[str, Any]:
    """Several JSON blobs (item records) unpacked at once: digest -> value."""
    root = [{packing.REF_JSON: digest} for digest in digests]
    values = packing.unpack(root, lambda wanted: content_fetch(tenant_id=tenant_id, digests=wanted))
    return dict(zip(digests, values, strict=True))


# --------------------------------------------------------------------------- holders and the purge


@dataclass(frozen=True)
class Holder:
    """Rows that refer to content: `rows(tenant_id)` yields, per row, the (kind, digest) pairs it
    names directly (a skeleton's references, or a digest column)."""

    name: str
    rows: Callable[[int], Iterable[Iterable[tuple[str, str]]]]
    # Deletes the holder's own rows nothing uses any more (epoch older than the purge's), before
    # the mark; returns how many. None: its rows are removed by their owners.
    prune: Callable[[Any, int], int] | None = None


HOLDERS: dict[str, Holder] = {}


def register_holder(holder: Holder) -> None:
    HOLDERS[holder.name] = holder


def skeleton_references(skeleton: str | None) -> Iterable[tuple[str, str]]:
    if not skeleton:
        return ()
    return packing.references(json.loads(skeleton))


@dataclass
class PurgeReport:
    epoch: int
    referenced: int
    deleted: int
    deleted_bytes: int
    pruned: dict[str, int]
    orphan_objects: int = 0


def _bump_epoch() -> int:
    with transaction.atomic():
        ContentEpoch.objects.get_or_create(pk=1)
        # An UPDATE of the row waits for every writer holding it shared, so each writer in flight
        # has committed (its holder is visible to the mark) before the new epoch exists.
        epoch = ContentEpoch.objects.select_for_update().get(pk=1)
        epoch.value += 1
        epoch.save(update_fields=["value"])
        return epoch.value


def referenced_digests(tenant_id: int) -> set[str]:
    """Every blob a holder of the tenant refers to, directly or through JSON blobs (a mark)."""
    marked: set[str] = set()
    frontier: list[str] = []
    for holder in HOLDERS.values():
        for refs in holder.rows(tenant_id):
            for kind, digest in refs:
                if digest not in marked:
                    marked.add(digest)
                    if kind == packing.JSON:
                        frontier.append(digest)
    while frontier:
        following: list[str] = []
        for chunk in _chunks(frontier):
            for body in content_fetch(tenant_id=tenant_id, digests=chunk).values():
                for kind, digest in packing.references(json.loads(packing.decode(body))):
                    if digest not in marked:
                        marked.add(digest)
                        if kind == packing.JSON:
                            following.append(digest)
        frontier = following
    return marked


def content_purge(*, tenant: Any, after_mark: Callable[[], None] | None = None) -> PurgeReport:
    """Delete the tenant's blobs that no holder refers to. `after_mark` runs between the mark and
    the sweep (the race test submits there)."""
    from .objectstore import object_store

    epoch = _bump_epoch()
    pruned = {holder.name: holder.prune(tenant, epoch) for holder in HOLDERS.values() if holder.prune is not None}
    marked = referenced_digests(tenant.pk)
    if after_mark is not None:
        after_mark()
    unmarked = [
        pk for pk, digest in Content.objects.filter(tenant=tenant, epoch__lt=epoch).values_list("pk", "digest")
        if digest not in marked
    ]
    deleted = deleted_bytes = 0
    store = object_store()
    for start in range(0, len(unmarked), BATCH):
        with transaction.atomic():
            # Re-checked under the row locks: a writer since the bump has raised the epoch.
            rows = list(Content.objects.select_for_update().filter(pk__in=unmarked[start:start + BATCH], epoch__lt=epoch)
                        .values_list("pk", "digest", "size", "location"))
            remote = [digest for _, digest, _, location in rows if location == Location.OBJECT_STORE]
            if remote:
                if store is None:
                    raise ContentUnavailable("content in the object store cannot be purged while CTXENG_CONTENT_STORE is 'db'")
                store.delete_many(namespace(tenant.pk), remote)
            Content.objects.filter(pk__in=[pk for pk, *_ in rows]).delete()
            deleted += len(rows)
            deleted_bytes += sum(size for _, _, size, _ in rows)
    orphans = _delete_orphan_objects(tenant, store) if store is not None else 0
    logger.info("content purge of tenant %s: epoch %s, %s referenced, %s deleted (%s bytes), pruned %s, %s orphan objects",
                tenant.pk, epoch, len(marked), deleted, deleted_bytes, pruned, orphans)
    return PurgeReport(epoch=epoch, referenced=len(marked), deleted=deleted, deleted_bytes=deleted_bytes, pruned=pruned,
                       orphan_objects=orphans)


def _delete_orphan_objects(tenant: Any, store: Any) -> int:
    """Objects of the tenant's namespace that no row names: a writer uploads before its
    transaction commits, so one that rolled back leaves its objects behind. Only objects older
    than CTXENG_CONTENT_ORPHAN_GRACE_SECONDS go: a younger one may belong to a writer in flight."""
    from django.conf import settings

    cutoff = timezone.now() - timedelta(seconds=settings.CTXENG_CONTENT_ORPHAN_GRACE_SECONDS)
    listed = [digest for digest, modified in store.listing(namespace(tenant.pk)) if modified < cutoff]
    orphans = []
    for chunk in _chunks(listed):
        named = {digest for (digest,) in _rows("digest", tenant.pk, chunk)}
        orphans += [digest for digest in chunk if digest not in named]
    if orphans:
        store.delete_many(namespace(tenant.pk), orphans)
    return len(orphans)
