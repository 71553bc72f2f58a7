"""Content bodies in an S3-compatible object store, when CTXENG_CONTENT_STORE is `s3://bucket/prefix`.

A body is stored under `{prefix}/{namespace}/{hex[:2]}/{hex}`, where `hex` is the 64 hex digits of
its digest (`sha256:<hex>`, the sha256 of its bytes) and the namespace is the tenant's
(`tenant-<pk>`): a tenant's content never leaves its namespace, and a namespace that could climb
out of it (`/`, `..`) is refused. A key's bytes never change, so writing one twice is harmless:
`put_many` is idempotent, and `get_many` checks the bytes it reads hash to their digest
(ContentCorrupt) and names any digest it cannot find (ContentMissing). Each call works through a
small thread pool, one request per body (one per 1,000 keys for deletes).

Writes go through django-storages' S3Storage, configured from our settings (never from Django's
STORAGES); reads and deletes use its boto3 bucket directly, where S3Storage would cost more
requests (`open` sends a HEAD before each GET) or one request per key (`delete`).

This module imports no boto3 until a store is built, and settings.py calls `parse_content_store`
at start, so it must keep importing nothing that needs configured settings or apps.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

if TYPE_CHECKING:
    from storages.backends.s3 import S3Storage

# botocore keeps 10 connections per client by default: more workers than that would wait for one.
POOL_SIZE = 8
# The most keys one DeleteObjects request may name.
DELETE_BATCH = 1000

DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# S3's bucket naming rules: 3-63 lowercase letters, digits, dots and hyphens, alphanumeric at both ends.
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9_.-]+")
SETTINGS = ("CTXENG_CONTENT_STORE", "CTXENG_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION")

T = TypeVar("T")
R = TypeVar("R")


class ContentMissing(Exception):
    """A digest has no object in the namespace."""

    def __init__(self, namespace: str, digest: str) -> None:
        super().__init__(f"content {digest} is missing from namespace {namespace!r} of the object store")
        self.namespace = namespace
        self.digest = digest


class ContentCorrupt(Exception):
    """The bytes stored under a digest do not hash to it."""

    def __init__(self, namespace: str, digest: str, actual: str) -> None:
        super().__init__(f"content {digest} in namespace {namespace!r} of the object store reads back as {actual}")
        self.namespace = namespace
        self.digest = digest
        self.actual = actual


@dataclass(frozen=True)
class StoreLocation:
    """Where CTXENG_CONTENT_STORE puts content: a bucket and a key prefix ("" for the bucket's root)."""

    bucket: str
    prefix: str = ""


def parse_content_store(value: str) -> StoreLocation | None:
    """Read CTXENG_CONTENT_STORE: "db" (None: bodies stay in the database) or `s3://bucket[/prefix]`."""
    if value == "db":
        return None
    problem = f"CTXENG_CONTENT_STORE: expected db or s3://bucket/optional/prefix, got {value!r}"
    if not value.startswith("s3://"):
        raise ImproperlyConfigured(problem)
    bucket, _, prefix = value.removeprefix("s3://").partition("/")
    if not BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ImproperlyConfigured(f"{problem} (not a valid S3 bucket name: {bucket!r})")
    prefix = prefix.removesuffix("/")
    segments = prefix.split("/") if prefix else []
    for segment in segments:
        if not PREFIX_SEGMENT.fullmatch(segment) or segment in (".", ".."):
            raise ImproperlyConfigured(
                f"{problem} (the prefix takes segments of letters, digits, '_', '.' and '-', got {segment!r})"
            )
    return StoreLocation(bucket=bucket, prefix=prefix)


class ObjectStore:
    """Content bodies of every namespace in one bucket, under one prefix."""

    def __init__(
        self,
        location: StoreLocation,
        *,
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str | None = None,
    ) -> None:
        from boto3.s3.transfer import TransferConfig
        from storages.backends.s3 import S3Storage

        self.location = location
        self._storage: S3Storage = S3Storage(
            bucket_name=location.bucket,
            location=location.prefix,
            endpoint_url=endpoint_url or None,
            access_key=access_key or None,
            secret_key=secret_key or None,
            region_name=region or None,
            file_overwrite=True,
            default_acl=None,
            # Each body is one request of its own in our pool; boto3's per-upload threads would
            # start ten more threads for every body.
            transfer_config=TransferConfig(use_threads=False),
        )

    def put_many(self, namespace: str, blobs: Mapping[str, bytes]) -> None:
        """Store each body under its digest; storing one that is already there changes nothing."""
        from django.core.files.base import ContentFile

        names = {digest: self._name(namespace, digest) for digest in blobs}
        for digest, data in blobs.items():
            actual = digest_of(data)
            if actual != digest:
                raise ValueError(f"a body keyed {digest} hashes to {actual}")
        self._storage.bucket  # noqa: B018 - built once here, before the pool's threads share it
        _in_parallel(lambda digest: self._storage.save(names[digest], ContentFile(blobs[digest])), list(blobs))

    def get_many(self, namespace: str, digests: Iterable[str]) -> dict[str, bytes]:
        """The bodies of `digests`, in their order, each checked against its digest."""
        from botocore.exceptions import ClientError

        wanted = list(dict.fromkeys(digests))
        names = {digest: self._name(namespace, digest) for digest in wanted}
        bucket = self._storage.bucket

        def read(digest: str) -> bytes:
            try:
                data = bucket.Object(self._key(names[digest])).get()["Body"].read()
            except ClientError as error:
                if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                    raise ContentMissing(namespace, digest) from None
                raise
            actual = digest_of(data)
            if actual != digest:
                raise ContentCorrupt(namespace, digest, actual)
            return data

        return dict(zip(wanted, _in_parallel(read, wanted), strict=True))

    def delete_many(self, namespace: str, digests: Iterable[str]) -> None:
        """Delete the bodies of `digests`; a digest with no body is not an error."""
        keys = [self._key(self._name(namespace, digest)) for digest in dict.fromkeys(digests)]
        bucket = self._storage.bucket

        def delete(batch: list[str]) -> None:
            response = bucket.delete_objects(Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True})
            errors = response.get("Errors", [])
            if errors:
                first = errors[0]
                raise RuntimeError(
                    f"deleting {first.get('Key')} from bucket {self.location.bucket} failed: "
                    f"{first.get('Code')} {first.get('Message')} ({len(errors)} keys not deleted)"
                )

        _in_parallel(delete, [keys[start : start + DELETE_BATCH] for start in range(0, len(keys), DELETE_BATCH)])

    def listing(self, namespace: str) -> Iterator[tuple[str, datetime]]:
        """(digest, last modified) of every body stored in `namespace`."""
        prefix = self._key(_checked(namespace)) + "/"
        for summary in self._storage.bucket.objects.filter(Prefix=prefix):
            hexdigest = summary.key.rsplit("/", 1)[-1]
            if DIGEST.fullmatch("sha256:" + hexdigest):
                yield "sha256:" + hexdigest, summary.last_modified

    def _name(self, namespace: str, digest: str) -> str:
        """The object's name under the store's prefix (S3Storage's `location`)."""
        _checked(namespace)
        match = DIGEST.fullmatch(digest)
        if match is None:
            raise ValueError(f"not a content digest (sha256:<64 lowercase hex>): {digest!r}")
        hexdigest = match.group(1)
        return f"{namespace}/{hexdigest[:2]}/{hexdigest}"

    def _key(self, name: str) -> str:
        """The object's key in the bucket: the name under the prefix, as S3Storage joins them."""
        return f"{self.location.prefix}/{name}" if self.location.prefix else name


def _checked(namespace: str) -> str:
    """`namespace` if it is one (a single path segment, never `..`): content stays in its place."""
    if not NAMESPACE.fullmatch(namespace) or ".." in namespace:
        raise ValueError(f"not a content namespace: {namespace!r}")
    return namespace


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _in_parallel(work: Callable[[T], R], items: list[T]) -> list[R]:
    """`work` over `items` on up to POOL_SIZE threads; results in order, the first failure raised."""
    if len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(POOL_SIZE, len(items)), thread_name_prefix="objectstore") as pool:
        return list(pool.map(work, items))


# (process id, store): a forked worker builds its own, never sharing the parent's connections.
_cached: tuple[int, ObjectStore | None] | None = None
_cache_lock = threading.Lock()


def object_store() -> ObjectStore | None:
    """The object store named by CTXENG_CONTENT_STORE, or None when bodies stay in the database."""
    global _cached
    cached = _cached
    if cached is not None and cached[0] == os.getpid():
        return cached[1]
    with _cache_lock:
        if _cached is None or _cached[0] != os.getpid():
            _cached = (os.getpid(), _build())
        return _cached[1]


def reset_object_store() -> None:
    """Forget this process's store: the next `object_store()` reads the settings again."""
    global _cached
    with _cache_lock:
        _cached = None


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: object) -> None:
    if setting in SETTINGS:
        reset_object_store()


def _build() -> ObjectStore | None:
    location = parse_content_store(settings.CTXENG_CONTENT_STORE)
    if location is None:
        return None
    return ObjectStore(
        location,
        endpoint_url=settings.CTXENG_S3_ENDPOINT_URL,
        access_key=settings.AWS_ACCESS_KEY_ID,
        secret_key=settings.AWS_SECRET_ACCESS_KEY,
        region=settings.AWS_DEFAULT_REGION,
    )
