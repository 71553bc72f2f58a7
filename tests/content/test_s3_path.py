"""The content store's S3 path end to end, against a real S3 server (moto in server mode).

With CTXENG_CONTENT_STORE naming a bucket, the worked example goes through the REST API (jobs run
in-process): text bodies land in the bucket under `<prefix>/tenant-<pk>/<hex[:2]>/<hex>`, JSON
blobs stay in the database, the API reads every document back as submitted / sealed, a second
submit uploads nothing, the purge deletes exactly the objects nothing refers to any more, and two
tenants never share an object. Each test has its own key prefix in the session's bucket; expected
keys and digests are computed here from the bytes, never read back from the store.
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from ctxeng.accounts.models import Tenant
from ctxeng.content.models import Content
from ctxeng.content.store import content_purge
from manifests.models import AssemblyJob, Manifest
from manifests.selectors import artifact_content, job_request, manifest_document, manifest_payload
from manifests.services import artifact_create, manifest_purge_content
from tests.s3server import S3Server, s3_server  # noqa: F401 - the fixture

TRACES = ("trace-old-1", "trace-old-2", "trace-old-3", "trace-old-4", "trace-old-5")


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def key_of(prefix: str, tenant: Tenant, digest: str) -> str:
    hexdigest = digest.removeprefix("sha256:")
    return f"{prefix}/tenant-{tenant.pk}/{hexdigest[:2]}/{hexdigest}"


def objects_under(s3: S3Server, prefix: str) -> dict[str, bytes]:
    """Every object under `prefix` (all pages), key -> bytes, read with a plain boto3 client."""
    client = s3.client()
    found: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            found[item["Key"]] = client.get_object(Bucket=s3.bucket, Key=item["Key"])["Body"].read()
    return found


def contents_of(request: dict[str, Any]) -> dict[str, str]:
    """item_id -> content of each candidate long enough to be a text blob of its own."""
    from ctxeng.content.packing import TEXT_MIN

    return {c["item_id"]: c["content"] for c in request["candidates"] if len(c.get("content") or "") >= TEXT_MIN}


def strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


@pytest.fixture
def prefix() -> str:
    return f"run-{uuid.uuid4().hex[:12]}/content"


@pytest.fixture
def s3_store(s3_server: S3Server, prefix: str) -> Iterator[S3Server]:  # noqa: F811
    with override_settings(**s3_server.settings(prefix)):
        yield s3_server


@pytest.fixture
def tenant_x(published_policy) -> Tenant:
    return published_policy.policy.tenant


def _submit_ok(submit, client, body: dict[str, Any]) -> str:
    response = submit(client, body)
    assert response.status_code == 202, response.json()
    job_id = response.json()["id"]
    status = AssemblyJob.objects.get(pk=job_id).status
    assert status in ("ready", "blocked"), (status, AssemblyJob.objects.get(pk=job_id).error)
    return job_id


# --------------------------------------------------------------------------- where blobs live


def test_text_bodies_go_to_the_bucket_under_the_tenant_and_json_blobs_stay_in_the_database(
    s3_store, prefix, tenant_x, agent_api, submit, example_request
):
    job_id = _submit_ok(submit, agent_api, example_request)
    assert AssemblyJob.objects.get(pk=job_id).status == "ready"

    rows = list(Content.objects.filter(tenant=tenant_x).values("digest", "kind", "location", "body", "size"))
    texts = [row for row in rows if row["kind"] == "text"]
    blobs = [row for row in rows if row["kind"] == "json"]
    assert texts and blobs and len(texts) + len(blobs) == len(rows)
    assert [(r["digest"], r["location"], r["body"]) for r in texts] == [(r["digest"], "s3", None) for r in texts]
    assert all(r["location"] == "db" and r["body"] is not None for r in blobs), blobs

    # Every candidate content long enough to be a blob is one, and its object is in the bucket.
    expected = {sha(text) for text in contents_of(example_request).values()}
    assert len(expected) >= 8
    assert expected <= {r["digest"] for r in texts}

    stored = objects_under(s3_store, prefix)
    assert set(stored) == {key_of(prefix, tenant_x, r["digest"]) for r in texts}
    for row in texts:
        data = stored[key_of(prefix, tenant_x, row["digest"])]
        assert "sha256:" + hashlib.sha256(data).hexdigest() == row["digest"]
        assert len(data) == row["size"]
    for item_id, text in contents_of(example_request).items():
        assert stored[key_of(prefix, tenant_x, sha(text))] == text.encode("utf-8"), item_id


# --------------------------------------------------------------------------- reading back through the API


def test_the_api_serves_the_request_manifest_and_input_as_submitted_and_sealed(
    s3_store, prefix, published_policy, agent_api, submit, example_request
):
    from ctxeng.engine import assemble, parse_policy, parse_request

    submitted = copy.deepcopy(example_request)
    job_id = _submit_ok(submit, agent_api, example_request)

    request = agent_api.get(f"/api/v1/assemblies/{job_id}/request/")
    assert request.status_code == 200, request.content[:500]
    assert json.dumps(request.json()) == json.dumps(submitted)

    manifest = agent_api.get(f"/api/v1/assemblies/{job_id}/manifest/")
    provider_input = agent_api.get(f"/api/v1/assemblies/{job_id}/input/")
    assert manifest.status_code == 200 and provider_input.status_code == 200
    served = manifest.json()
    # The first step of its run: the service compares the cache with no earlier step of its own
    # (issue 51, N10), and says so (`previous_cache_from: service`).
    assert "previous_cache" not in submitted
    direct = assemble(parse_request(submitted), parse_policy(published_policy.body),
                      created_at=served["assembly"]["created_at"], previous_cache_from="service")
    # As tests/service/test_worked_example_inline.py compares them, then the whole documents.
    assert served["assembly"]["assembly_input_hash"] == direct.manifest.assembly.assembly_input_hash
    assert served["included"] == direct.manifest_dict()["included"]
    assert served == direct.manifest_dict()
    assert provider_input.json() == direct.serialized_input
    assert json.dumps(provider_input.json()) == json.dumps(direct.serialized_input)
    # The bodies were read from the bucket: the rows hold none.
    assert not Content.objects.filter(kind="text", body__isnull=False).exists()
    assert objects_under(s3_store, prefix)


def test_a_second_submit_of_the_same_request_uploads_nothing_and_adds_no_text_rows(
    s3_store, prefix, tenant_x, agent_api, submit, example_request
):
    _submit_ok(submit, agent_api, copy.deepcopy(example_request))
    objects_before = objects_under(s3_store, prefix)
    texts_before = set(Content.objects.filter(tenant=tenant_x, kind="text").values_list("digest", flat=True))
    assert objects_before and texts_before

    again = copy.deepcopy(example_request)
    again["step_id"] = "step-20"  # a later step resending the same candidates
    second = _submit_ok(submit, agent_api, again)

    assert objects_under(s3_store, prefix) == objects_before
    assert set(Content.objects.filter(tenant=tenant_x, kind="text").values_list("digest", flat=True)) == texts_before
    assert Manifest.objects.filter(job_id=second).exists()
    assert job_request(AssemblyJob.objects.get(pk=second)) == again


# --------------------------------------------------------------------------- the purge


def test_the_purge_deletes_the_objects_nothing_refers_to_and_keeps_the_rest(
    s3_store, prefix, tenant_x, agent_user, agent_api, submit, example_request
):
    contents = contents_of(example_request)
    # The first job: the worked example. The second: the same step without the old traces, so
    # after the first manifest's content is purged the traces are referred to by nothing, except
    # trace-old-1, whose text is also an artifact's body.
    first = _submit_ok(submit, agent_api, copy.deepcopy(example_request))
    later = copy.deepcopy(example_request)
    later["step_id"] = "step-20"
    later["candidates"] = [c for c in later["candidates"] if c["item_id"] not in TRACES]
    second = _submit_ok(submit, agent_api, later)
    artifact, created = artifact_create(
        user=agent_user, tenant=tenant_x, artifact_id="trace-archive", revision=1, kind="trace",
        content=contents["trace-old-1"], writer="research-agent/v2", scope="project-y",
    )
    assert created

    before = objects_under(s3_store, prefix)
    assert {key_of(prefix, tenant_x, sha(contents[t])) for t in TRACES} <= set(before)

    assert manifest_purge_content(manifest=Manifest.objects.get(job_id=first)) is True
    report = content_purge(tenant=tenant_x)

    after = objects_under(s3_store, prefix)
    deleted = set(before) - set(after)
    assert set(after) <= set(before)
    # What the purge must delete: the old traces only the first job held ...
    for trace in TRACES[1:]:
        assert key_of(prefix, tenant_x, sha(contents[trace])) in deleted, trace
    # ... and what it must keep: the artifact's body, and every content the second job refers to.
    assert key_of(prefix, tenant_x, sha(contents["trace-old-1"])) in after
    for item_id, text in contents.items():
        if item_id not in TRACES:
            assert key_of(prefix, tenant_x, sha(text)) in after, item_id

    # Exactly: a text blob stays iff a kept document (both jobs' requests and manifests, the
    # second's payload) or the artifact holds its text (whole, or a fenced block's body).
    kept_docs = [
        job_request(AssemblyJob.objects.get(pk=first)), job_request(AssemblyJob.objects.get(pk=second)),
        manifest_document(Manifest.objects.get(job_id=first)), manifest_document(Manifest.objects.get(job_id=second)),
        manifest_payload(Manifest.objects.get(job_id=second)),
    ]
    assert manifest_payload(Manifest.objects.get(job_id=first)) is None
    kept_strings = [s for doc in kept_docs for s in strings_in(doc)] + [artifact_content(artifact)]
    expected_after = {key for key, data in before.items() if any(data.decode("utf-8") in s for s in kept_strings)}
    assert set(after) == expected_after
    assert report.deleted >= len(deleted) == len(set(before) - expected_after) > 0

    # The rows agree with the bucket: every "s3" row has its object, every object its row.
    rows = set(Content.objects.filter(tenant=tenant_x, location="s3").values_list("digest", flat=True))
    assert {key_of(prefix, tenant_x, digest) for digest in rows} == set(after)
    # And everything kept still reads back.
    assert job_request(AssemblyJob.objects.get(pk=second)) == later
    assert agent_api.get(f"/api/v1/assemblies/{second}/input/").status_code == 200
    assert artifact_content(artifact) == contents["trace-old-1"]


# --------------------------------------------------------------------------- tenants


def test_two_tenants_with_the_same_content_get_an_object_each_in_their_own_namespace(
    s3_store, prefix, tenant_x, outsider_user, outsider_api, agent_api, submit, example_request,
    example_policy_text,
):
    from policies.services import policy_import

    tenant_z = Tenant.objects.get(slug="tenant-z")
    policy_import(tenant=tenant_z, text=example_policy_text, user=outsider_user, publish=True)
    in_z = copy.deepcopy(example_request)
    in_z["principal"]["tenant"] = "tenant-z"
    for holder in (in_z, *in_z["candidates"]):
        holder["scope"] = holder["scope"].replace("tenant-x/", "tenant-z/", 1)
    assert contents_of(in_z) == contents_of(example_request)

    job_x = _submit_ok(submit, agent_api, copy.deepcopy(example_request))
    job_z = _submit_ok(submit, outsider_api, in_z)

    stored = objects_under(s3_store, prefix)
    namespaces = {key.removeprefix(f"{prefix}/").split("/")[0] for key in stored}
    assert namespaces == {f"tenant-{tenant_x.pk}", f"tenant-{tenant_z.pk}"}
    for item_id, text in contents_of(example_request).items():
        assert stored[key_of(prefix, tenant_x, sha(text))] == text.encode("utf-8"), item_id
        assert stored[key_of(prefix, tenant_z, sha(text))] == text.encode("utf-8"), item_id
    # Each tenant's rows name exactly the objects of its own namespace.
    for tenant in (tenant_x, tenant_z):
        rows = set(Content.objects.filter(tenant=tenant, location="s3").values_list("digest", flat=True))
        assert {key_of(prefix, tenant, digest) for digest in rows} == {
            key for key in stored if key.startswith(f"{prefix}/tenant-{tenant.pk}/")
        }

    # Each reads its own request back, and the other's job is not found.
    assert json.dumps(outsider_api.get(f"/api/v1/assemblies/{job_z}/request/").json()) == json.dumps(in_z)
    assert json.dumps(agent_api.get(f"/api/v1/assemblies/{job_x}/request/").json()) == json.dumps(example_request)
    assert outsider_api.get(f"/api/v1/assemblies/{job_x}/request/").status_code == 404

    # Tenant x's purge of its own content touches nothing of tenant z.
    z_objects = {key: data for key, data in stored.items() if key.startswith(f"{prefix}/tenant-{tenant_z.pk}/")}
    manifest_purge_content(manifest=Manifest.objects.get(job_id=job_x))
    AssemblyJob.objects.filter(pk=job_x).delete()
    content_purge(tenant=tenant_x)
    after = objects_under(s3_store, prefix)
    assert {key: data for key, data in after.items() if key.startswith(f"{prefix}/tenant-{tenant_z.pk}/")} == z_objects
    assert not any(key.startswith(f"{prefix}/tenant-{tenant_x.pk}/") for key in after)
    assert outsider_api.get(f"/api/v1/assemblies/{job_z}/input/").status_code == 200


def test_the_purge_deletes_objects_no_row_names_once_older_than_the_grace(
    s3_store: S3Server, prefix: str, tenant_x: Tenant, published_policy, agent_api, submit, example_request, settings
):
    """A writer uploads before its transaction commits: one that rolled back leaves objects with no
    row. The purge deletes those once older than CTXENG_CONTENT_ORPHAN_GRACE_SECONDS, never an
    object a row names, and never a young one (its writer may still commit)."""
    _submit_ok(submit, agent_api, example_request)
    client = s3_store.client()
    orphan_body = b"uploaded by a writer whose transaction rolled back"
    orphan = key_of(prefix, tenant_x, "sha256:" + hashlib.sha256(orphan_body).hexdigest())
    client.put_object(Bucket=s3_store.bucket, Key=orphan, Body=orphan_body)
    kept = set(objects_under(s3_store, prefix)) - {orphan}
    assert kept  # the submit's bodies, each named by a row

    settings.CTXENG_CONTENT_ORPHAN_GRACE_SECONDS = 3600
    assert content_purge(tenant=tenant_x).orphan_objects == 0
    assert orphan in objects_under(s3_store, prefix)

    settings.CTXENG_CONTENT_ORPHAN_GRACE_SECONDS = 0
    report = content_purge(tenant=tenant_x)
    assert report.orphan_objects == 1
    assert set(objects_under(s3_store, prefix)) == kept
    job = AssemblyJob.objects.get(tenant=tenant_x)
    assert job_request(job) == example_request
