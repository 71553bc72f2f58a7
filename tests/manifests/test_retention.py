"""Retention: `purge_content` removes content bodies from old manifests and keeps what explains them.

Sealed manifests stay immutable: the one change the model accepts is exactly the purge, made once
through `manifest_purge_content`; every other write path is refused.
"""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from ctxeng.engine import ContextAssemblyManifest
from manifests.models import AssemblyJob, Immutable, Manifest, ManifestItem
from manifests.selectors import job_request, manifest_document
from manifests.services import manifest_purge_content


@pytest.fixture
def sealed(published_policy, agent_api, submit, example_request, example_blocked_request):
    ready = submit(agent_api, example_request).json()["id"]
    blocked = submit(agent_api, example_blocked_request).json()["id"]
    return Manifest.objects.get(job_id=ready), Manifest.objects.get(job_id=blocked)


def _later(monkeypatch, days: int) -> None:
    future = timezone.now() + timedelta(days=days)
    monkeypatch.setattr("manifests.services.timezone.now", lambda: future)


def _explains(document: dict) -> dict:
    """Everything a purge must keep: the document minus the transforms' excerpts."""
    kept = copy.deepcopy(document)
    for record in kept["transforms"]:
        record.pop("before_excerpt"), record.pop("after_excerpt")
    return kept


def test_purge_content_leaves_recent_manifests_alone(sealed, capsys):
    call_command("purge_content", "--older-than", "30d")
    assert "purged content of 0 manifest(s)" in capsys.readouterr().out
    assert not Manifest.objects.filter(content_purged_at__isnull=False).exists()


def test_purge_content_removes_bodies_and_keeps_hashes_decisions_and_lineage(sealed, monkeypatch, capsys):
    ready, blocked = sealed
    before = Manifest.objects.get(pk=ready.pk)
    document_before = manifest_document(before)
    request_before = job_request(AssemblyJob.objects.get(pk=ready.job_id))
    rows_before = list(ManifestItem.objects.filter(manifest=ready).values())
    labels_before = {row.pop("item_id"): row.pop("label") for row in rows_before}
    # a goal's stored label quotes its first words (written by hand from request.json)
    assert labels_before["task-goal"] == "goal: “Research question: how do pi, continue, context7, planning-with-files and…”"
    assert any(t["before_excerpt"] for t in document_before["transforms"])

    _later(monkeypatch, 31)
    call_command("purge_content", "--older-than", "30d")
    assert "purged content of 2 manifest(s)" in capsys.readouterr().out

    after = Manifest.objects.get(pk=ready.pk)
    document_after = manifest_document(after)
    assert after.content_purged_at is not None and after.payload_packed is None
    assert all(t["before_excerpt"] == t["after_excerpt"] == "" for t in document_after["transforms"])
    assert _explains(document_after) == _explains(document_before)
    assert document_after["assembly"]["serialized_model_input_hash"] == before.serialized_model_input_hash
    assert after.assembly_input_hash == before.assembly_input_hash
    ContextAssemblyManifest.model_validate(document_after)  # still a valid manifest
    rows_after = list(ManifestItem.objects.filter(manifest=ready).values())
    # the stored labels go with the content they quote (both manifests purged, none keeps them)
    assert {row.pop("item_id"): row.pop("label") for row in rows_after} == dict.fromkeys(labels_before, "")
    assert rows_after == rows_before

    request_after = job_request(AssemblyJob.objects.get(pk=ready.job_id))
    assert all(c.get("content") is None for c in request_after["candidates"])
    assert [c["content_hash"] for c in request_after["candidates"]] == [
        c["content_hash"] for c in request_before["candidates"]
    ]
    assert Manifest.objects.get(pk=blocked.pk).content_purged_at is not None


def test_the_api_says_the_input_was_purged_and_still_serves_the_manifest(sealed, agent_api):
    ready, _ = sealed
    assert manifest_purge_content(manifest=ready) is True
    job = agent_api.get(f"/api/v1/assemblies/{ready.job_id}/").json()
    assert job["content_purged_at"] is not None
    gone = agent_api.get(f"/api/v1/assemblies/{ready.job_id}/input/")
    assert gone.status_code == 410
    assert "content purged" in gone.json()["errors"][0]
    manifest = agent_api.get(f"/api/v1/assemblies/{ready.job_id}/manifest/")
    assert manifest.status_code == 200 and manifest.json()["assembly"]["assembly_input_hash"]


def test_the_manifest_page_shows_that_content_was_purged(sealed, agent_user, client):
    ready, _ = sealed
    client.force_login(agent_user)
    assert "content purged" not in client.get(f"/assemblies/{ready.job_id}/").content.decode()
    manifest_purge_content(manifest=ready)
    page = client.get(f"/assemblies/{ready.job_id}/").content.decode()
    assert 'id="content-purged"' in page and "content purged" in page


def test_a_purge_happens_once(sealed):
    ready, _ = sealed
    assert manifest_purge_content(manifest=ready) is True
    first = Manifest.objects.get(pk=ready.pk).content_purged_at
    assert manifest_purge_content(manifest=ready) is False
    assert Manifest.objects.get(pk=ready.pk).content_purged_at == first


def test_purge_content_names_a_bad_duration(db):
    with pytest.raises(CommandError, match="--older-than: expected a duration"):
        call_command("purge_content", "--older-than", "a month")


# --------------------------------------------------------------------------- nothing else changes a sealed manifest


def test_saving_any_other_change_is_refused(sealed):
    ready, _ = sealed
    manifest = Manifest.objects.get(pk=ready.pk)
    manifest.status = "blocked"
    with pytest.raises(Immutable):
        manifest.save()


def test_a_purge_that_also_changes_something_else_is_refused(sealed):
    from ctxeng.content.packing import pack_document
    from manifests.retention import purged_document

    manifest = Manifest.objects.get(pk=ready_pk(sealed))
    manifest.document_packed, _ = pack_document(purged_document(manifest_document(manifest)))
    manifest.payload_packed = None
    manifest.content_purged_at = timezone.now()
    manifest.estimated_input_tokens += 1
    with pytest.raises(Immutable):
        manifest.save()


def test_a_fake_purge_that_rewrites_the_document_is_refused(sealed):
    from ctxeng.content.packing import pack_document

    manifest = Manifest.objects.get(pk=ready_pk(sealed))
    manifest.document_packed, _ = pack_document({**manifest_document(manifest), "excluded": []})
    manifest.payload_packed = None
    manifest.content_purged_at = timezone.now()
    with pytest.raises(Immutable):
        manifest.save()


def test_bulk_updates_and_deletes_are_refused(sealed):
    manifest = Manifest.objects.get(pk=ready_pk(sealed))
    with pytest.raises(Immutable):
        Manifest.objects.filter(pk=manifest.pk).update(payload_packed=None)
    with pytest.raises(Immutable):
        Manifest.objects.bulk_update([manifest], ["status"])
    with pytest.raises(Immutable):
        manifest.delete()
    item = ManifestItem.objects.filter(manifest=manifest).first()
    item.manifest_id = manifest.pk
    with pytest.raises(Immutable):
        item.save()
    assert Manifest.objects.get(pk=manifest.pk).content_purged_at is None


def ready_pk(sealed) -> int:
    return sealed[0].pk
