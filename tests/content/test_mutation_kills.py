"""Cases written for mutants of ctxeng/content/ that survived `make mutate-sample` (docs/mutation.md,
"Over the whole product"): the store's compression, its error messages, the object store's
credentials and reading named sections of a document whose only key looks like a marker.

Oracles: zlib itself (a body compressed with a preset dictionary cannot be read without it),
sha256 computed here, the settings given to the test.
"""

from __future__ import annotations

import hashlib
import json
import zlib

import pytest
from django.test import override_settings

from ctxeng.accounts.models import Tenant
from ctxeng.content import objectstore, store
from ctxeng.content.models import Content, Location
from ctxeng.content.packing import pack_document, unpack


def test_a_json_record_is_compressed_with_the_records_dictionary_so_it_cannot_be_read_without_it():
    record = json.dumps([{"item_id": f"tool-result-{n}", "kind": "tool_result", "tokens": n} for n in range(20)]).encode()
    body, encoding = store._stored(record, "json")
    assert encoding == "zlib-r1"
    with pytest.raises(zlib.error):
        zlib.decompress(body)  # the stream asks for its preset dictionary
    assert store._loaded(body, encoding) == record


def test_the_records_dictionary_is_the_file_whose_digest_the_store_pins():
    data = store._records_dictionary()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == store.RECORDS_V1_DIGEST


def test_a_body_in_an_unknown_encoding_is_refused_naming_the_encoding():
    with pytest.raises(store.ContentUnavailable, match="'zstd'"):
        store._loaded(b"...", "zstd")


def test_the_object_store_is_built_with_every_credential_the_settings_name():
    with override_settings(CTXENG_CONTENT_STORE="s3://bucket/prefix", CTXENG_S3_ENDPOINT_URL="http://127.0.0.1:9",
                           AWS_ACCESS_KEY_ID="key-id", AWS_SECRET_ACCESS_KEY="secret-key",
                           AWS_DEFAULT_REGION="eu-west-3"):
        built = objectstore._build()
    s3 = built._storage
    assert (s3.bucket_name, s3.location) == ("bucket", "prefix")
    assert (s3.endpoint_url, s3.access_key, s3.secret_key, s3.region_name) == (
        "http://127.0.0.1:9", "key-id", "secret-key", "eu-west-3")


@pytest.mark.django_db
def test_a_purge_of_object_store_content_without_an_object_store_names_the_setting():
    tenant = Tenant.objects.create(slug="t-purge", name="t-purge")
    Content.objects.create(tenant=tenant, digest="sha256:" + "a" * 64, kind="text", size=3,
                           location=Location.OBJECT_STORE, epoch=0)
    with override_settings(CTXENG_CONTENT_STORE="db"):
        with pytest.raises(store.ContentUnavailable, match="CTXENG_CONTENT_STORE"):
            store.content_purge(tenant=tenant)


def test_named_sections_of_a_document_whose_only_key_looks_like_a_marker_are_read():
    document = {"$t": "x" * 400}
    skeleton, packer = pack_document(document)
    back = unpack(skeleton, lambda digests: {d: packer.blobs[d] for d in digests}, keys=["$t"])
    assert back == document


# --------------------------------------------------------------------------- fresh sample (seed 3102)


def test_references_name_every_blob_after_a_prefix_or_suffix_slice():
    """A `$pre`/`$suf` reference is one of many a skeleton holds: the walk goes on past it."""
    node = [{"$pre": ["sha256:aa", 3]}, {"$t": "sha256:bb"}, {"x": {"$suf": ["sha256:cc", 2]}}, {"$j": "sha256:dd"}]
    from ctxeng.content.packing import references

    assert sorted(references(node)) == [("json", "sha256:dd"), ("text", "sha256:aa"), ("text", "sha256:bb"), ("text", "sha256:cc")]


def test_ref_of_a_record_too_small_for_a_blob_of_its_own_stores_it_as_one_anyway():
    from ctxeng.content.packing import Packer

    packer = Packer()
    small = {"item_id": "a", "tokens": 1}
    digest = packer.ref_of(small)
    assert packer.kinds[digest] == "json"
    assert packer.blobs[digest] == b'{"item_id":"a","tokens":1}'
    assert digest == "sha256:" + hashlib.sha256(packer.blobs[digest]).hexdigest()


def test_settling_a_stale_blob_brings_only_the_writers_tenant_to_the_epoch(db):
    """Two tenants hold the same bytes; one writes it again at a new epoch: the other tenant's row
    keeps its own epoch (its purge decides on it, not another tenant's writes)."""
    from django.db import transaction

    a = Tenant.objects.create(slug="tenant-settle-a")
    b = Tenant.objects.create(slug="tenant-settle-b")
    digest = "sha256:" + hashlib.sha256(b"shared").hexdigest()
    for tenant in (a, b):
        Content.objects.create(tenant=tenant, digest=digest, kind="text", size=6, epoch=1, body=b"shared")
    with transaction.atomic():
        ids = store.settle(Content, tenant=a, digests=[digest], epoch=5, insert=lambda missing: None)
    assert Content.objects.get(tenant=a, digest=digest).epoch == 5
    assert Content.objects.get(tenant=b, digest=digest).epoch == 1
    assert ids == {digest: Content.objects.get(tenant=a, digest=digest).pk}


def test_the_write_epoch_is_read_holding_its_row_shared_on_postgresql_and_plainly_on_sqlite(db):
    """The writers' half of the purge's race guard: on PostgreSQL the epoch row is read FOR SHARE
    (a purge's bump waits for every writer in flight); SQLite has no such clause (its write lock
    serializes writers). Both passes of CI run this, one per vendor."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from ctxeng.content.models import ContentEpoch

    ContentEpoch.objects.all().delete()  # as on a fresh database: the row is made on the first write
    with transaction.atomic(), CaptureQueriesContext(connection) as seen:
        store.write_epoch()
        store.write_epoch()
    # The reads of the epoch's value (on a fresh database the row is created in between, by the ORM).
    epoch_reads = [q["sql"] for q in seen.captured_queries if q["sql"].lstrip().startswith("SELECT value FROM content_contentepoch")]
    assert len(epoch_reads) == 3, seen.captured_queries  # none found, read after making it, read again
    assert all(("FOR SHARE" in sql) == (connection.vendor == "postgresql") for sql in epoch_reads), epoch_reads
