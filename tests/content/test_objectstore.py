"""The S3 object store for content bodies, against a real S3 server (moto in server mode).

Each test gets its own key prefix in the session's bucket, so tests never see each other's objects;
expected keys and digests are computed here by hand from the bytes, never read back from the store.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from ctxeng.content import objectstore
from ctxeng.content.objectstore import (
    ContentCorrupt,
    ContentMissing,
    ObjectStore,
    StoreLocation,
    object_store,
    parse_content_store,
)
from tests.s3server import S3Server, s3_server  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def blobs_of(*bodies: bytes) -> dict[str, bytes]:
    return {sha(body): body for body in bodies}


def keys_under(s3: S3Server, prefix: str) -> dict[str, bytes]:
    client = s3.client()
    listed = client.list_objects_v2(Bucket=s3.bucket, Prefix=prefix).get("Contents", [])
    return {item["Key"]: client.get_object(Bucket=s3.bucket, Key=item["Key"])["Body"].read() for item in listed}


@pytest.fixture
def prefix() -> str:
    return f"run-{uuid.uuid4().hex[:12]}/content"


@pytest.fixture
def store(s3_server: S3Server, prefix: str) -> Iterator[ObjectStore]:  # noqa: F811
    with override_settings(**s3_server.settings(prefix)):
        built = object_store()
        assert built is not None
        yield built


# --------------------------------------------------------------------------- round trip


def test_it_reads_back_every_body_it_stored(store: ObjectStore) -> None:
    bodies = [f"candidate {n}: {'x' * n}".encode() for n in range(40)]
    bodies += ["naïve café, 日本語, emoji 🧪".encode(), b"", os.urandom(1024 * 1024)]
    blobs = blobs_of(*bodies)

    store.put_many("tenant-1", blobs)

    assert store.get_many("tenant-1", list(blobs)) == blobs


def test_it_returns_bodies_in_the_order_asked_once_each(store: ObjectStore) -> None:
    blobs = blobs_of(b"first", b"second", b"third")
    store.put_many("tenant-1", blobs)
    first, second, third = blobs

    read = store.get_many("tenant-1", iter([third, first, third, second]))

    assert list(read) == [third, first, second]
    assert read[third] == b"third"


def test_it_keys_objects_by_prefix_tenant_and_digest(
    s3_server: S3Server, store: ObjectStore, prefix: str  # noqa: F811
) -> None:
    body = b"the body of one candidate"
    hexdigest = hashlib.sha256(body).hexdigest()

    store.put_many("tenant-7", {sha(body): body})

    assert keys_under(s3_server, prefix) == {f"{prefix}/tenant-7/{hexdigest[:2]}/{hexdigest}": body}


def test_a_store_at_the_bucket_root_keys_objects_from_the_root(s3_server: S3Server) -> None:  # noqa: F811
    namespace = f"tenant-{uuid.uuid4().hex[:12]}"
    body = b"stored at the root"
    hexdigest = hashlib.sha256(body).hexdigest()

    with override_settings(**s3_server.settings(prefix="")):
        store = object_store()
        assert store is not None
        store.put_many(namespace, {sha(body): body})

    assert keys_under(s3_server, namespace) == {f"{namespace}/{hexdigest[:2]}/{hexdigest}": body}


def test_storing_the_same_body_twice_keeps_one_object(
    s3_server: S3Server, store: ObjectStore, prefix: str  # noqa: F811
) -> None:
    blobs = blobs_of(b"resent at every step", b"also resent")

    store.put_many("tenant-1", blobs)
    store.put_many("tenant-1", blobs)

    assert sorted(keys_under(s3_server, prefix).values()) == sorted(blobs.values())
    assert store.get_many("tenant-1", blobs) == blobs


def test_nothing_to_do_is_no_request(store: ObjectStore) -> None:
    store.put_many("tenant-1", {})
    store.delete_many("tenant-1", [])

    assert store.get_many("tenant-1", []) == {}


# --------------------------------------------------------------------------- missing and corrupt


def test_a_missing_digest_raises_content_missing_naming_it_and_the_tenant(store: ObjectStore) -> None:
    stored = blobs_of(b"present")
    store.put_many("tenant-1", stored)
    absent = sha(b"never stored")

    with pytest.raises(ContentMissing) as raised:
        store.get_many("tenant-1", [*stored, absent])

    assert absent in str(raised.value)
    assert "tenant-1" in str(raised.value)
    assert (raised.value.namespace, raised.value.digest) == ("tenant-1", absent)


def test_bytes_that_do_not_hash_to_their_digest_raise_content_corrupt(
    s3_server: S3Server, store: ObjectStore, prefix: str  # noqa: F811
) -> None:
    body = b"what was stored"
    hexdigest = hashlib.sha256(body).hexdigest()
    store.put_many("tenant-1", {sha(body): body})
    s3_server.client().put_object(
        Bucket=s3_server.bucket, Key=f"{prefix}/tenant-1/{hexdigest[:2]}/{hexdigest}", Body=b"what was stored!"
    )

    with pytest.raises(ContentCorrupt) as raised:
        store.get_many("tenant-1", [sha(body)])

    assert sha(body) in str(raised.value)
    assert raised.value.actual == sha(b"what was stored!")


def test_a_body_keyed_by_another_digest_is_refused_and_not_stored(
    s3_server: S3Server, store: ObjectStore, prefix: str  # noqa: F811
) -> None:
    with pytest.raises(ValueError, match="hashes to"):
        store.put_many("tenant-1", {sha(b"one body"): b"another body"})

    assert keys_under(s3_server, prefix) == {}


@pytest.mark.parametrize("digest", ["sha256:abc", "md5:" + "0" * 64, "sha256:" + "A" * 64, "0" * 64])
def test_a_malformed_digest_is_refused(store: ObjectStore, digest: str) -> None:
    with pytest.raises(ValueError, match="not a content digest"):
        store.get_many("tenant-1", [digest])


# --------------------------------------------------------------------------- tenants


def test_one_tenant_cannot_read_another_tenants_content(store: ObjectStore) -> None:
    blobs = blobs_of(b"tenant 2's secret")
    store.put_many("tenant-2", blobs)

    with pytest.raises(ContentMissing, match="tenant-1"):
        store.get_many("tenant-1", blobs)
    assert store.get_many("tenant-2", blobs) == blobs


def test_deleting_in_one_tenant_leaves_the_others_copy(store: ObjectStore) -> None:
    blobs = blobs_of(b"shared by two tenants")
    store.put_many("tenant-1", blobs)
    store.put_many("tenant-2", blobs)

    store.delete_many("tenant-1", blobs)

    assert store.get_many("tenant-2", blobs) == blobs


@pytest.mark.parametrize(
    "namespace", ["tenant-1/../tenant-2", "..", "tenant-1/x", "", "/tenant-1", "tenant..1", ".hidden"]
)
def test_a_namespace_that_could_leave_its_place_is_refused(
    s3_server: S3Server, store: ObjectStore, prefix: str, namespace: str  # noqa: F811
) -> None:
    blobs = blobs_of(b"anything")

    with pytest.raises(ValueError, match="not a content namespace"):
        store.put_many(namespace, blobs)
    with pytest.raises(ValueError, match="not a content namespace"):
        store.get_many(namespace, blobs)
    with pytest.raises(ValueError, match="not a content namespace"):
        store.delete_many(namespace, blobs)
    assert keys_under(s3_server, prefix) == {}


# --------------------------------------------------------------------------- delete


def test_delete_many_removes_the_bodies_named_and_ignores_absent_ones(store: ObjectStore) -> None:
    kept, dropped_1, dropped_2 = b"kept", b"dropped 1", b"dropped 2"
    store.put_many("tenant-1", blobs_of(kept, dropped_1, dropped_2))

    store.delete_many("tenant-1", [sha(dropped_1), sha(dropped_2), sha(b"never stored")])

    assert store.get_many("tenant-1", [sha(kept)]) == {sha(kept): kept}
    for dropped in (dropped_1, dropped_2):
        with pytest.raises(ContentMissing):
            store.get_many("tenant-1", [sha(dropped)])


def test_delete_many_deletes_in_batches(
    s3_server: S3Server, store: ObjectStore, prefix: str, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    # S3 takes at most 1,000 keys per DeleteObjects; a batch of 2 makes 7 bodies take 4 requests.
    monkeypatch.setattr(objectstore, "DELETE_BATCH", 2)
    blobs = blobs_of(*(f"body {n}".encode() for n in range(7)))
    store.put_many("tenant-1", blobs)

    store.delete_many("tenant-1", blobs)

    assert keys_under(s3_server, prefix) == {}


# --------------------------------------------------------------------------- configuration


def test_the_default_keeps_content_in_the_database() -> None:
    with override_settings(CTXENG_CONTENT_STORE="db"):
        assert object_store() is None


@pytest.mark.parametrize(
    ("value", "location"),
    [
        ("s3://bucket", StoreLocation("bucket", "")),
        ("s3://bucket/", StoreLocation("bucket", "")),
        ("s3://bucket/pre/fix", StoreLocation("bucket", "pre/fix")),
        ("s3://my.bucket-2/pre/fix/", StoreLocation("my.bucket-2", "pre/fix")),
    ],
)
def test_it_reads_a_bucket_and_a_prefix(value: str, location: StoreLocation) -> None:
    assert parse_content_store(value) == location


@pytest.mark.parametrize(
    "value",
    [
        "",
        "s3",
        "s3://",
        "S3://bucket",
        "https://bucket.s3.amazonaws.com/x",
        "bucket/prefix",
        "s3://Bucket",
        "s3://ab",
        "s3://bucket_name",
        "s3://-bucket",
        "s3://bucket//prefix",
        "s3://bucket/../other",
        "s3://bucket/pre/./fix",
        "s3://bucket/pre fix",
        "s3://bucket?region=eu",
    ],
)
def test_a_malformed_value_is_refused_naming_the_variable(value: str) -> None:
    with override_settings(CTXENG_CONTENT_STORE=value):
        with pytest.raises(ImproperlyConfigured, match="CTXENG_CONTENT_STORE"):
            object_store()


def test_the_store_is_built_once_per_process_and_again_when_settings_change(s3_server: S3Server) -> None:  # noqa: F811
    with override_settings(**s3_server.settings("one")):
        first = object_store()
        assert object_store() is first
        with override_settings(CTXENG_CONTENT_STORE=f"s3://{s3_server.bucket}/two"):
            second = object_store()
            assert second is not None and second is not first
            assert second.location == StoreLocation(s3_server.bucket, "two")
        assert object_store() is not second


def test_a_malformed_value_in_the_environment_stops_the_process_at_start() -> None:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "ctxeng.server.settings", "CTXENG_CONTENT_STORE": "s3:/bucket"}

    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60,
    )

    assert started.returncode != 0
    assert "ImproperlyConfigured: CTXENG_CONTENT_STORE" in started.stderr
