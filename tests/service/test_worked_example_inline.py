"""The worked examples over REST with in-process jobs: publish policy, submit, poll, fetch."""

from __future__ import annotations

import hashlib
import json

import pytest


def _check_ready(manifest: dict, expected: dict) -> None:
    assert manifest["assembly"]["status"] == expected["status"]
    included = {i["item_id"] for i in manifest["included"]}
    assert set(expected["included"]) <= included
    reasons = {e["item_id"]: e["reason"] for e in manifest["excluded"]}
    for item_id, reason in expected["excluded"].items():
        assert reasons.get(item_id) == reason, item_id
    for field in expected.get("hashes", []):
        assert manifest["assembly"].get(field), field


def test_an_editor_publishes_the_example_policy_over_rest(editor_api, example_policy_body):
    created = editor_api.post("/api/v1/policies/source-research/revisions/", {"body": example_policy_body},
                              format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["status"] == "draft"
    published = editor_api.post("/api/v1/policies/source-research/revisions/3/publish/", {"note": "go"},
                                format="json")
    assert published.status_code == 200, published.json()
    assert published.json()["status"] == "published"
    assert published.json()["publish_note"] == "go"
    assert published.json()["published_by"] == "editor"


def test_the_ready_example_is_assembled_and_its_manifest_and_input_are_served(
    published_policy, agent_api, submit, example_request, expected
):
    response = submit(agent_api, example_request)
    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["html_url"] == f"/assemblies/{body['id']}/"

    job = agent_api.get(body["url"]).json()
    assert job["status"] == "ready", job
    assert job["policy"] == {"id": "source-research", "revision": 3, "digest": published_policy.digest,
                             "status": "published", "current": True}
    assert job["run_id"] == "run-42" and job["step_id"] == "step-19"

    manifest = agent_api.get(job["manifest_url"]).json()
    _check_ready(manifest, expected)
    assert manifest["assembly"]["policy"]["digest"] == published_policy.digest

    provider_input = agent_api.get(job["input_url"])
    assert provider_input.status_code == 200
    assert provider_input.json()["messages"]
    # The served input is what the manifest sealed: sha256 of its canonical JSON (sorted keys, no
    # whitespace, UTF-8, no NaN), computed here from the bytes served.
    served = json.loads(provider_input.content)
    canonical = json.dumps(served, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert manifest["assembly"]["serialized_model_input_hash"] == "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def test_the_blocked_example_is_sealed_blocked_and_its_input_is_a_conflict(
    published_policy, agent_api, submit, example_blocked_request, expected_blocked
):
    job_id = submit(agent_api, example_blocked_request).json()["id"]
    job = agent_api.get(f"/api/v1/assemblies/{job_id}/").json()
    assert job["status"] == "blocked"
    manifest = agent_api.get(f"/api/v1/assemblies/{job_id}/manifest/").json()
    assert manifest["assembly"]["blocked_reason"] == expected_blocked["blocked_reason"]
    assert manifest["assembly"]["missing"] == expected_blocked["missing"]
    for field in expected_blocked["hashes_absent"]:
        assert manifest["assembly"].get(field) is None
    reasons = {e["item_id"]: e["reason"] for e in manifest["excluded"]}
    for item_id, reason in expected_blocked["excluded_still_recorded"].items():
        assert reasons[item_id] == reason
    response = agent_api.get(f"/api/v1/assemblies/{job_id}/input/")
    assert response.status_code == 409
    assert "blocked" in response.json()["errors"][0]


def test_a_request_without_a_revision_uses_the_current_published_one(
    published_policy, agent_api, submit, example_request
):
    example_request["policy"] = {"id": "source-research"}
    job_id = submit(agent_api, example_request).json()["id"]
    manifest = agent_api.get(f"/api/v1/assemblies/{job_id}/manifest/").json()
    assert manifest["assembly"]["policy"] == {
        "id": "source-research", "revision": 3, "digest": published_policy.digest
    }


def test_the_manifest_served_is_the_document_the_engine_sealed(
    published_policy, agent_api, submit, example_request
):
    from ctxeng.engine import assemble, parse_policy, parse_request

    job_id = submit(agent_api, example_request).json()["id"]
    served = agent_api.get(f"/api/v1/assemblies/{job_id}/manifest/").json()
    direct = assemble(parse_request(example_request), parse_policy(published_policy.body),
                      created_at=served["assembly"]["created_at"])
    assert served["assembly"]["assembly_input_hash"] == direct.manifest.assembly.assembly_input_hash
    assert served["included"] == direct.manifest_dict()["included"]


@pytest.mark.parametrize("decision", ["excluded", "included"])
def test_item_decisions_list_every_manifest_where_the_item_appeared(
    published_policy, agent_api, submit, example_request, example_blocked_request, decision
):
    submit(agent_api, example_request)
    submit(agent_api, example_blocked_request)
    item_id = "plan-42-r4" if decision == "excluded" else "task-goal"
    rows = agent_api.get(f"/api/v1/items/{item_id}/decisions/").json()["results"]
    assert len(rows) == 2
    assert {r["decision"] for r in rows} == {decision}
    if decision == "excluded":
        assert {r["reason"] for r in rows} == {"stale_revision"}


def test_provider_usage_is_stored_beside_the_estimate_without_touching_the_manifest(
    published_policy, agent_api, submit, example_request
):
    from manifests.models import Manifest

    job_id = submit(agent_api, example_request).json()["id"]
    sealed = Manifest.objects.get(job_id=job_id).document_packed
    before = agent_api.get(f"/api/v1/assemblies/{job_id}/manifest/").json()
    assert before["budget"]["actual_input_tokens"] is None
    report = agent_api.post(f"/api/v1/assemblies/{job_id}/usage/",
                            {"input_tokens": 9000, "cached_tokens": 1000, "output_tokens": 300}, format="json")
    assert report.status_code == 200, report.json()
    assert report.json()["estimated_input_tokens"] == before["budget"]["estimated_used"]
    after = agent_api.get(f"/api/v1/assemblies/{job_id}/manifest/").json()
    # The served copy carries the provider's count; nothing else changes, and the sealed row not at all.
    assert after["budget"].pop("actual_input_tokens") == 9000
    before["budget"].pop("actual_input_tokens")
    assert after == before
    assert Manifest.objects.get(job_id=job_id).document_packed == sealed


def test_the_assembly_list_filters_by_run_status_and_policy(
    published_policy, agent_api, submit, example_request, example_blocked_request
):
    submit(agent_api, example_request)
    submit(agent_api, example_blocked_request)
    assert agent_api.get("/api/v1/assemblies/").json()["count"] == 2
    assert agent_api.get("/api/v1/assemblies/?status=blocked").json()["count"] == 1
    assert agent_api.get("/api/v1/assemblies/?run_id=run-42").json()["count"] == 2
    assert agent_api.get("/api/v1/assemblies/?run_id=other").json()["count"] == 0
    assert agent_api.get("/api/v1/assemblies/?policy=source-research").json()["count"] == 2


def test_load_example_submits_both_requests_idempotently(db, inline_jobs, django_capture_on_commit_callbacks):
    from django.core.management import call_command

    from manifests.models import AssemblyJob, Manifest

    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            call_command("load_example")
    assert sorted(AssemblyJob.objects.values_list("status", flat=True)) == ["blocked", "ready"]
    assert Manifest.objects.count() == 2
