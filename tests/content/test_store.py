"""The content store through the service: content once per tenant, documents by reference, purge by
reference, and a purge racing a submit that reuses content loses nothing (issue 14).

Oracles: the bytes the agent submitted and the document the worker sealed (recorded as it is
handed to storage), rendered with the API's own JSON renderer; sha256 computed here.
"""

from __future__ import annotations

import hashlib
import threading

import pytest
from django.db import close_old_connections, transaction
from django.db.models import Sum
from rest_framework.renderers import JSONRenderer

from bench import workload
from ctxeng.accounts.models import Tenant
from ctxeng.content.models import Content
from ctxeng.content.store import content_fetch, content_purge, skeleton_references
from manifests.models import AssemblyJob, ItemDecision, Manifest, ManifestItem
from manifests.selectors import job_request, manifest_document
from manifests.services import assembly_job_submit, manifest_purge_content

URL = "/api/v1/assemblies/"


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _text_bytes(tenant) -> tuple[int, int]:
    rows = Content.objects.filter(tenant=tenant, kind="text")
    return rows.count(), rows.aggregate(total=Sum("size"))["total"] or 0


@pytest.fixture
def sealed_documents(monkeypatch):
    """Every manifest document as the worker hands it to storage (the real function still runs)."""
    import manifests.services as services

    seen: list[dict] = []
    real = services._prepare_manifest

    def recording(document, payload, **kwargs):
        seen.append({"document": document, "payload": payload})
        return real(document, payload, **kwargs)

    monkeypatch.setattr(services, "_prepare_manifest", recording)
    return seen


def _big_request(n: int = 2_000) -> dict:
    body = workload.make_request(n_items=n, total_bytes=n * 250, n_tool_pairs=20, seed=11, context_limit=16_000)
    body["policy"] = {"id": body["policy"]["id"]}
    return body


@pytest.mark.parametrize("which", ["example", "generated-2000"])
def test_requests_and_manifests_read_back_through_the_api_byte_identical(
    which, published_policy, agent_api, submit, example_request, sealed_documents
):
    body = example_request if which == "example" else _big_request()
    job_id = submit(agent_api, body).json()["id"]
    assert AssemblyJob.objects.get(id=job_id).status in ("ready", "blocked")
    renderer = JSONRenderer()

    served = agent_api.get(f"{URL}{job_id}/request/")
    assert served.status_code == 200
    assert served.content == renderer.render(body)

    manifest = agent_api.get(f"{URL}{job_id}/manifest/")
    assert manifest.status_code == 200
    sealed = sealed_documents[-1]
    assert manifest.content == renderer.render(sealed["document"])
    if sealed["payload"] is not None:
        assert agent_api.get(f"{URL}{job_id}/input/").content == renderer.render(sealed["payload"])


def test_each_candidate_content_is_stored_once_under_its_sha256(published_policy, agent_api, submit, example_request):
    submit(agent_api, example_request)
    tenant = Tenant.objects.get(slug=example_request["principal"]["tenant"])
    contents = {c["content"] for c in example_request["candidates"] if c.get("content") and len(c["content"]) >= 256}
    stored = content_fetch(tenant_id=tenant.pk, digests=sorted(_digest(c) for c in contents))
    assert {data.decode("utf-8") for data in stored.values()} == contents


def test_submitting_the_same_content_again_adds_no_content_bytes(published_policy, agent_api, submit):
    body = _big_request(600)
    submit(agent_api, body)
    tenant = Tenant.objects.get(slug=body["principal"]["tenant"])
    before = _text_bytes(tenant)
    all_before = Content.objects.filter(tenant=tenant).aggregate(total=Sum("size"))["total"]
    decisions = ItemDecision.objects.count()
    again = submit(agent_api, dict(body, step_id=body["step_id"] + "-again")).json()
    assert AssemblyJob.objects.get(id=again["id"]).status in ("ready", "blocked")
    assert _text_bytes(tenant) == before
    assert ItemDecision.objects.count() == decisions  # the same decisions, placed again
    assert ManifestItem.objects.filter(manifest__job_id=again["id"]).count() == 600
    # The request adds nothing but its skeleton: it names exactly the blobs the first one named.
    first, second = AssemblyJob.objects.filter(tenant=tenant).order_by("created_at").values_list("request_packed", flat=True)
    assert set(skeleton_references(first)) == set(skeleton_references(second))
    assert len(second) < 2_000
    # What the step adds is its manifest's own arrays and payload messages (the nonce is per step).
    added = Content.objects.filter(tenant=tenant).aggregate(total=Sum("size"))["total"] - all_before
    assert added < 0.1 * len(workload.dumps(body))


def test_content_never_leaves_its_tenant(published_policy, agent_api, submit, example_request):
    from ctxeng.accounts.services import tenant_member_add

    submit(agent_api, example_request)
    mine = Tenant.objects.get(slug=example_request["principal"]["tenant"])
    tenant_member_add(username="other-agent", tenant_slug="tenant-other", roles=["agent"])
    other = Tenant.objects.get(slug="tenant-other")
    digest = next(_digest(c["content"]) for c in example_request["candidates"] if len(c.get("content") or "") >= 256)
    assert content_fetch(tenant_id=mine.pk, digests=[digest])
    assert content_fetch(tenant_id=other.pk, digests=[digest]) == {}


# --------------------------------------------------------------------------- purge by reference


def _only_in_first(first: dict, second: dict) -> str:
    """A long content the first request has and the second does not."""
    kept = {c.get("content") for c in second["candidates"]}
    return next(c["content"] for c in first["candidates"] if len(c.get("content") or "") >= 256 and c["content"] not in kept)


def _two_steps(body: dict) -> tuple[dict, dict]:
    second = workload.next_step(body, changed=0.2, seed=3)
    return body, second


def test_purge_drops_content_no_kept_manifest_refers_to_and_keeps_the_rest(published_policy, agent_api, submit):
    first, second = _two_steps(_big_request(300))
    first_id = submit(agent_api, first).json()["id"]
    second_id = submit(agent_api, second).json()["id"]
    tenant = Tenant.objects.get(slug=first["principal"]["tenant"])
    gone = _only_in_first(first, second)
    shared = next(c["content"] for c in second["candidates"] if len(c.get("content") or "") >= 256
                  and c["content"] in {f.get("content") for f in first["candidates"]})
    assert content_purge(tenant=tenant).deleted == 0  # everything is referenced

    assert manifest_purge_content(manifest=Manifest.objects.get(job_id=first_id))
    report = content_purge(tenant=tenant)
    assert report.deleted > 0
    assert content_fetch(tenant_id=tenant.pk, digests=[_digest(gone)]) == {}
    assert content_fetch(tenant_id=tenant.pk, digests=[_digest(shared)])
    # Everything the kept and the purged job still show reads back whole.
    assert job_request(AssemblyJob.objects.get(id=second_id)) == second
    assert all(c["content"] is None for c in job_request(AssemblyJob.objects.get(id=first_id))["candidates"])
    manifest_document(Manifest.objects.get(job_id=first_id))
    assert content_purge(tenant=tenant).deleted == 0  # nothing left to drop


def test_a_purge_racing_a_submit_that_reuses_the_content_loses_nothing(published_policy, agent_user, agent_api, submit):
    """The submit lands between the purge's mark (which saw no holder of the content) and its sweep."""
    first, second = _two_steps(_big_request(300))
    first_id = submit(agent_api, first).json()["id"]
    tenant = Tenant.objects.get(slug=first["principal"]["tenant"])
    manifest_purge_content(manifest=Manifest.objects.get(job_id=first_id))
    reused = _only_in_first(first, second)
    resubmitted = {}

    def submit_reusing_it():
        body = dict(first, step_id="reuses-purged-content")
        resubmitted["job"], _ = assembly_job_submit(user=agent_user, data=body)

    report = content_purge(tenant=tenant, after_mark=submit_reusing_it)
    assert report.deleted > 0  # the mark saw that content unreferenced, the sweep still deleted what it could
    assert content_fetch(tenant_id=tenant.pk, digests=[_digest(reused)])
    assert job_request(resubmitted["job"]) == dict(first, step_id="reuses-purged-content")


@pytest.mark.django_db(transaction=True)
def test_a_purge_waits_for_a_submit_in_flight_and_keeps_what_it_stored(published_policy, agent_user, settings):
    """Real concurrency: the writer holds its transaction open after storing the content; the purge,
    in another thread and connection, cannot bump the epoch until the writer commits."""
    settings.CTXENG_JOBS_INLINE = True
    body = _big_request(200)
    first, _ = assembly_job_submit(user=agent_user, data=body)
    tenant = first.tenant
    assert manifest_purge_content(manifest=Manifest.objects.get(job=first))  # its content is held by nothing now
    stored, release, bumped, finished = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    outcome: dict = {}

    def writer():
        try:
            with transaction.atomic():
                outcome["job"], _ = assembly_job_submit(user=agent_user, data=dict(body, step_id="in-flight"))
                stored.set()
                release.wait(60)
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["writer_error"] = exc
            stored.set()
        finally:
            close_old_connections()

    def purger():
        import ctxeng.content.store as store

        real = store._bump_epoch

        def bump():
            value = real()
            bumped.set()
            return value

        try:
            store._bump_epoch = bump
            outcome["report"] = content_purge(tenant=tenant)
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["purge_error"] = exc
        finally:
            store._bump_epoch = real
            finished.set()
            close_old_connections()

    w = threading.Thread(target=writer)
    w.start()
    assert stored.wait(60) and "writer_error" not in outcome
    p = threading.Thread(target=purger)
    p.start()
    assert not bumped.wait(1.0), "the purge bumped the epoch while a writer held it"
    release.set()
    w.join(60)
    p.join(120)
    assert finished.is_set() and "purge_error" not in outcome, outcome.get("purge_error")
    assert "writer_error" not in outcome, outcome.get("writer_error")
    assert job_request(outcome["job"]) == dict(body, step_id="in-flight")
    digests = [_digest(c["content"]) for c in body["candidates"] if len(c.get("content") or "") >= 256]
    assert len(content_fetch(tenant_id=tenant.pk, digests=digests)) == len(set(digests))


def test_purge_content_command_reports_the_content_it_dropped(published_policy, agent_api, submit, capsys, monkeypatch):
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    first, second = _two_steps(_big_request(200))
    submit(agent_api, first)
    later = timezone.now() + timedelta(days=31)
    monkeypatch.setattr("manifests.services.timezone.now", lambda: later)
    call_command("purge_content", "--older-than", "30d")
    out = capsys.readouterr().out
    assert "purged content of 1 manifest(s)" in out
    dropped = int(out.split("content store: deleted ")[1].split(" blob")[0])
    assert dropped > 0
    tenant = Tenant.objects.get(slug=first["principal"]["tenant"])
    assert content_fetch(tenant_id=tenant.pk, digests=[_digest(_only_in_first(first, second))]) == {}


def test_a_new_blob_is_written_as_one_row_of_its_bytes_at_the_current_epoch_and_a_known_one_left_as_it_is(db):
    """The rows the store writes (plain SQL since issue 51, N4), read back through the ORM: kind,
    size, epoch, location, the body in its encoding, a creation time; a digest the tenant already
    has is skipped, not overwritten."""
    import zlib

    from django.utils import timezone

    from ctxeng.content import store
    from ctxeng.content.packing import Packer
    from ctxeng.content.store import content_save, write_epoch

    tenant = Tenant.objects.create(slug="store-rows")
    text, small = "the same words again and again " * 20, "short"
    packer = Packer()
    packer.skeleton({"a": text, "b": small})
    before = timezone.now()
    with transaction.atomic():
        epoch = write_epoch()
        added = content_save(tenant=tenant, packer=packer)
    assert added == sum(len(data) for data in packer.blobs.values())
    row = Content.objects.get(tenant=tenant, digest=_digest(text))
    assert (row.kind, row.size, row.epoch, row.location, row.encoding) == ("text", len(text.encode()), epoch, "db", "zlib")
    assert zlib.decompress(bytes(row.body)) == text.encode() and row.created_at >= before
    assert Content.objects.filter(tenant=tenant).count() == len(packer.blobs)
    Content.objects.filter(pk=row.pk).update(size=1)  # a mark only a second insert would overwrite
    with transaction.atomic():
        assert content_save(tenant=tenant, packer=packer) == 0
        # A concurrent writer that read before this one committed inserts the same digest again.
        store._insert(tenant, {_digest(text): text.encode()}, {_digest(text): "text"}, epoch)  # noqa: SLF001
    assert Content.objects.get(pk=row.pk).size == 1
    assert Content.objects.filter(tenant=tenant).count() == len(packer.blobs)
