"""Content stored once per tenant, keyed by the sha256 of its bytes (ctxeng.content.store).

A row is one blob of one tenant: a candidate's content, a provider payload block's body, an
artifact body (kind "text"), or a packed record or array of a request or manifest (kind "json",
ctxeng.content.packing). The body is in the row (`location` "db", the default) or in the S3-compatible
object store named by CTXENG_CONTENT_STORE (`location` "s3", the row keeps the metadata). A body
in the row is zlib-compressed when that saves a tenth or more (`encoding`), as Git stores objects;
its digest is always of the uncompressed bytes.

`epoch` is the purge epoch (ContentEpoch) of the last write that referred to the blob: a writer
holds the epoch row shared for its transaction and brings every blob it refers to up to the
current epoch; a purge bumps the epoch (waiting for the writers in flight), marks what the kept
holders refer to, and deletes only unmarked blobs of an older epoch, each under its row lock. So a
purge racing a submit that reuses a blob loses nothing (ctxeng.content.store).
"""

from __future__ import annotations

from django.db import models

DIGEST_LENGTH = 71  # "sha256:" + 64 hex digits


class Location(models.TextChoices):
    DATABASE = "db"
    OBJECT_STORE = "s3"


class Content(models.Model):
    # No index of its own: the unique (tenant, digest) index serves every lookup by tenant.
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False)
    digest = models.CharField(max_length=DIGEST_LENGTH)
    kind = models.CharField(max_length=4, help_text="text (a body) or json (a packed record or array)")
    size = models.PositiveBigIntegerField(help_text="bytes of the blob (before any compression)")
    location = models.CharField(max_length=2, choices=Location.choices, default=Location.DATABASE)
    encoding = models.CharField(max_length=8, blank=True, help_text="how `body` is stored: '' (as is), 'zlib' or 'zlib-r1' (with the records dictionary)")
    epoch = models.PositiveBigIntegerField(help_text="the purge epoch of the last write that referred to it")
    created_at = models.DateTimeField(auto_now_add=True)
    # Last: on SQLite a large body spills to overflow pages after the fixed-size columns, so the
    # freshening update rewrites the row in place.
    body = models.BinaryField(null=True, blank=True, help_text="the bytes; null when kept in the object store")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "digest"], name="content_unique_per_tenant")]

    def __str__(self) -> str:
        return f"{self.digest} ({self.kind}, {self.size} B)"


class ContentEpoch(models.Model):
    """One row (id 1): the purge epoch. Writers hold it shared (PostgreSQL `FOR SHARE`; SQLite's
    write lock serializes writers anyway), a purge bumps it."""

    value = models.PositiveBigIntegerField(default=1)

    def __str__(self) -> str:
        return f"content epoch {self.value}"
