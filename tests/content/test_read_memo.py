"""The read memo (ctxeng.content.packing.Memo, used by the worker's request read): blobs decoded
once are read again without fetching their bodies, yet every one is still confirmed present in the
reader's store, the values handed out are never the memo's own, and the memo stays within its
bound.

Oracles: the value packed (its JSON text), the digests a counting fetch was asked for, and the
Content rows of the database.
"""

from __future__ import annotations

import io
import json

import pytest

from bench import workload
from ctxeng.accounts.models import Tenant
from ctxeng.content.models import Content
from ctxeng.content.packing import Memo, UnpackError, pack_document, unpack
from ctxeng.content.store import content_read, read_memo
from manifests.models import AssemblyJob
from manifests.services import assembly_job_submit

DOCUMENT = {
    "step_id": "s-1",
    "candidates": [{"item_id": f"c-{n}", "content": f"candidate {n} " + "x" * 400, "source_ref": {"path": f"f{n}.py"}}
                   for n in range(6)],
}


class Store:
    """The packed blobs, with a record of which digests each call fetched or asked about."""

    def __init__(self, blobs: dict[str, bytes]) -> None:
        self.blobs = dict(blobs)
        self.fetched: list[str] = []
        self.asked: list[str] = []

    def fetch(self, digests):
        self.fetched += digests
        return {d: self.blobs[d] for d in digests if d in self.blobs}

    def present(self, digests):
        self.asked += digests
        return [d for d in digests if d in self.blobs]


def _packed():
    skeleton, packer = pack_document(DOCUMENT)
    return skeleton, Store(packer.blobs)


def test_a_second_read_fetches_no_body_and_asks_the_store_for_every_blob_it_takes_from_the_memo():
    skeleton, store = _packed()
    memo = Memo(10 * 1024 * 1024)
    first = unpack(skeleton, store.fetch, memo=memo, present=store.present)
    fetched_first = set(store.fetched)
    assert fetched_first == set(store.blobs) and store.asked == []
    store.fetched.clear()
    second = unpack(skeleton, store.fetch, memo=memo, present=store.present)
    assert json.dumps(first) == json.dumps(second) == json.dumps(DOCUMENT)
    assert store.fetched == []
    assert set(store.asked) == fetched_first


def test_a_blob_gone_from_the_store_is_missing_even_when_the_memo_holds_it():
    skeleton, store = _packed()
    memo = Memo(10 * 1024 * 1024)
    unpack(skeleton, store.fetch, memo=memo, present=store.present)
    gone = next(d for d, data in store.blobs.items() if b"candidate 3 " in data)
    del store.blobs[gone]
    with pytest.raises(UnpackError, match=gone):
        unpack(skeleton, store.fetch, memo=memo, present=store.present)


def test_values_read_through_the_memo_are_copies_a_caller_may_change():
    skeleton, store = _packed()
    memo = Memo(10 * 1024 * 1024)
    first = unpack(skeleton, store.fetch, memo=memo, present=store.present)
    first["candidates"][0]["source_ref"]["path"] = "changed"
    first["candidates"].pop()
    again = unpack(skeleton, store.fetch, memo=memo, present=store.present)
    assert json.dumps(again) == json.dumps(DOCUMENT)


def test_the_memo_keeps_at_most_its_limit_dropping_the_least_recently_used():
    memo = Memo(100)
    memo.put("text", "a", "A", 40)
    memo.put("text", "b", "B", 40)
    assert memo.get("text", "a") == "A"  # a is now the most recently used
    memo.put("text", "c", "C", 40)  # 120 > 100: b goes
    assert memo.get("text", "b") is not None and memo.get("text", "b") != "B"
    assert (memo.get("text", "a"), memo.get("text", "c")) == ("A", "C")
    assert memo.size == 80 and len(memo) == 2
    memo.put("text", "huge", "H", 101)  # larger than the whole memo: not kept
    assert len(memo) == 2 and memo.size == 80
    memo.clear()
    assert (len(memo), memo.size) == (0, 0)


def test_a_memo_without_a_presence_check_is_refused():
    skeleton, store = _packed()
    with pytest.raises(ValueError, match="present"):
        unpack(skeleton, store.fetch, memo=Memo(1024))


# --------------------------------------------------------------------------- through the database


@pytest.fixture
def submitted(db):
    """The bench workload's request (a few hundred candidates) submitted by tenant-x's demo user."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("load_example", stdout=io.StringIO())
    user = get_user_model().objects.get(username="demo")
    body = workload.make_request(n_items=300, total_bytes=300 * 300, n_tool_pairs=5, seed=3, context_limit=16_000)
    body["policy"] = {"id": body["policy"]["id"]}
    job, _ = assembly_job_submit(user=user, data=body, idempotency_key=None)
    read_memo().clear()
    yield job
    read_memo().clear()


def test_the_worker_read_is_the_submitted_request_first_and_second_time(submitted):
    job = AssemblyJob.objects.get(pk=submitted.pk)
    plain = content_read(tenant_id=job.tenant_id, skeleton=job.request_packed)
    first = content_read(tenant_id=job.tenant_id, skeleton=job.request_packed, remember=True)
    assert len(read_memo()) > 300  # its candidates' records and contents
    second = content_read(tenant_id=job.tenant_id, skeleton=job.request_packed, remember=True)
    assert json.dumps(first) == json.dumps(second) == json.dumps(plain)


def test_a_purged_blob_is_not_read_back_from_the_memo(submitted):
    job = AssemblyJob.objects.get(pk=submitted.pk)
    content_read(tenant_id=job.tenant_id, skeleton=job.request_packed, remember=True)
    row = Content.objects.filter(tenant_id=job.tenant_id, kind="text").order_by("digest").first()
    row.delete()
    with pytest.raises(UnpackError, match=row.digest):
        content_read(tenant_id=job.tenant_id, skeleton=job.request_packed, remember=True)


def test_another_tenant_cannot_read_a_blob_through_the_memo(submitted):
    job = AssemblyJob.objects.get(pk=submitted.pk)
    content_read(tenant_id=job.tenant_id, skeleton=job.request_packed, remember=True)
    other = Tenant.objects.create(slug="tenant-other", name="Other")
    # The other tenant names the first tenant's blobs (a skeleton it could not have written): every
    # one is in the memo, none is in its store.
    with pytest.raises(UnpackError, match="missing from the store"):
        content_read(tenant_id=other.pk, skeleton=job.request_packed, remember=True)
