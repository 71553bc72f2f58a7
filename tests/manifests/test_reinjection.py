"""Re-injection: a candidate with artifact_ref is loaded by the worker and re-admitted by every gate."""

from __future__ import annotations

import hashlib

import pytest

PLAN_CONTENT = "Plan r5: compare tool-call pairing across pi and continue."


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def reinjected_request(example_request) -> dict:
    """The example request where the current plan (plan-42-r5) is an artifact_ref, not inline content."""
    for item in example_request["candidates"]:
        if item["item_id"] == "plan-42-r5":
            item["content"] = None
            item["artifact_ref"] = {"artifact_id": "plan-42", "revision": 5}
            item["content_hash"] = sha(PLAN_CONTENT)
    return example_request


def store(client, content: str, revision: int = 5, **extra):
    body = {"artifact_id": "plan-42", "revision": revision, "kind": "research_plan", "content": content,
            "writer": "research-agent/v2", "scope": "tenant-x/project-y/task-42", **extra}
    return client.post("/api/v1/artifacts/", body, format="json")


def decision(client, job_id: str, item_id: str) -> tuple[str, str | None]:
    manifest = client.get(f"/api/v1/assemblies/{job_id}/manifest/").json()
    if item_id in {i["item_id"] for i in manifest["included"]}:
        return "included", None
    excluded = {e["item_id"]: e for e in manifest["excluded"]}
    return "excluded", excluded[item_id]["reason"]


def test_an_artifact_is_stored_with_its_content_hash(db, agent_api):
    response = store(agent_api, PLAN_CONTENT)
    assert response.status_code == 201, response.json()
    assert response.json()["content_hash"] == sha(PLAN_CONTENT)
    assert store(agent_api, PLAN_CONTENT).status_code == 200
    assert store(agent_api, "other content").status_code == 409


def test_a_declared_content_hash_must_match_the_content(db, agent_api):
    response = store(agent_api, PLAN_CONTENT, content_hash=sha("something else"))
    assert response.status_code == 400
    assert response.json()["errors"][0].startswith("content_hash:")


def test_an_unchanged_artifact_is_reinjected_and_included(published_policy, agent_api, submit, reinjected_request):
    store(agent_api, PLAN_CONTENT)
    job_id = submit(agent_api, reinjected_request).json()["id"]
    assert agent_api.get(f"/api/v1/assemblies/{job_id}/").json()["status"] == "ready"
    assert decision(agent_api, job_id, "plan-42-r5") == ("included", None)


def test_a_changed_artifact_is_excluded_by_the_hash_gate(published_policy, agent_api, submit, reinjected_request):
    store(agent_api, PLAN_CONTENT + " (edited after the hash was taken)")
    job_id = submit(agent_api, reinjected_request).json()["id"]
    assert decision(agent_api, job_id, "plan-42-r5") == ("excluded", "hard_gate_rejected")
    rows = agent_api.get("/api/v1/items/plan-42-r5/decisions/").json()["results"]
    assert rows[0]["hard_gate"] == "structural_integrity"
    assert "hash" in rows[0]["detail"]


def test_a_missing_artifact_is_excluded_by_structural_integrity(published_policy, agent_api, submit,
                                                                reinjected_request):
    job_id = submit(agent_api, reinjected_request).json()["id"]
    assert decision(agent_api, job_id, "plan-42-r5") == ("excluded", "hard_gate_rejected")


def test_another_tenants_artifact_is_never_loaded(published_policy, agent_api, outsider_api, submit,
                                                  reinjected_request):
    store(outsider_api, PLAN_CONTENT)
    job_id = submit(agent_api, reinjected_request).json()["id"]
    assert decision(agent_api, job_id, "plan-42-r5") == ("excluded", "hard_gate_rejected")
