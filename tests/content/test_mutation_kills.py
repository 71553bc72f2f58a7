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
