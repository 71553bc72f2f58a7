"""Sealed manifests, their item rows and stored artifacts are immutable at the model layer."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from manifests.models import Artifact, Immutable, ItemDecision, Manifest, ManifestItem
from manifests.selectors import artifact_content, manifest_document


@pytest.fixture
def sealed(published_policy, agent_api, submit, example_request) -> Manifest:
    job_id = submit(agent_api, example_request).json()["id"]
    return Manifest.objects.get(job_id=job_id)


def test_the_model_refuses_to_change_a_sealed_manifest(sealed):
    from ctxeng.content.packing import pack_document

    before = sealed.document_packed
    sealed.document_packed, _ = pack_document({**manifest_document(sealed), "included": []})
    with pytest.raises(Immutable):
        sealed.save()
    with pytest.raises(Immutable):
        sealed.delete()
    assert Manifest.objects.get(pk=sealed.pk).document_packed == before
    assert manifest_document(sealed)["included"]


def test_the_model_refuses_to_change_a_manifest_item_row(sealed):
    row = ManifestItem.objects.filter(manifest=sealed).first()
    row.entry_id = ManifestItem.objects.filter(manifest=sealed).last().entry_id
    with pytest.raises(Immutable):
        row.save()
    entry = ItemDecision.objects.get(pk=row.entry_id)
    entry.reason = "ranking_lost"
    with pytest.raises(Immutable):
        entry.save()


def test_the_database_allows_one_manifest_per_job(sealed):
    with pytest.raises(IntegrityError), transaction.atomic():
        Manifest.objects.create(job=sealed.job, assembly_id="again", status="ready", document_packed="{}")


def test_item_rows_record_every_decision_of_the_manifest(sealed):
    document = manifest_document(sealed)
    included = {i["item_id"] for i in document["included"]}
    excluded = {e["item_id"]: e["reason"] for e in document["excluded"]}
    rows = ManifestItem.objects.filter(manifest=sealed)
    assert {r.item_id for r in rows if r.decision == "included"} == included
    assert {r.item_id: r.reason for r in rows if r.decision == "excluded"} == excluded
    tampered = rows.get(item_id="evidence-tampered")
    assert tampered.hard_gate == "structural_integrity"


def test_the_model_refuses_to_change_a_stored_artifact(db, agent_user):
    from ctxeng.accounts.models import Tenant
    from manifests.services import artifact_create

    artifact, _ = artifact_create(
        user=agent_user, tenant=Tenant.objects.get(slug="tenant-x"), artifact_id="a", revision=1,
        kind="research_plan", content="plan", writer="agent", scope="tenant-x/project-y/task-42",
    )
    artifact.kind = "other"
    with pytest.raises(Immutable):
        artifact.save()
    assert Artifact.objects.get(pk=artifact.pk).kind == "research_plan"
    assert artifact_content(Artifact.objects.get(pk=artifact.pk)) == "plan"
