"""A user sees only its tenants' runs, jobs, manifests, items and artifacts; others' are 404."""

from __future__ import annotations

import pytest


@pytest.fixture
def job_id(published_policy, agent_api, submit, example_request) -> str:
    return submit(agent_api, example_request).json()["id"]


@pytest.mark.parametrize("suffix", ["", "manifest/", "input/"])
def test_an_outsider_gets_404_for_another_tenants_assembly(job_id, outsider_api, suffix):
    response = outsider_api.get(f"/api/v1/assemblies/{job_id}/{suffix}")
    assert response.status_code == 404
    assert response.json() == {"errors": [f"assembly {job_id}: not found"]}


def test_an_outsider_cannot_report_usage_for_another_tenants_assembly(job_id, outsider_api):
    response = outsider_api.post(f"/api/v1/assemblies/{job_id}/usage/", {"input_tokens": 1}, format="json")
    assert response.status_code == 404


def test_an_outsider_lists_no_assemblies_item_decisions_or_artifacts(job_id, agent_api, outsider_api):
    agent_api.post("/api/v1/artifacts/", {"artifact_id": "plan-42", "revision": 5, "kind": "research_plan",
                                          "content": "x", "writer": "agent", "scope": "tenant-x/p/t"}, format="json")
    assert outsider_api.get("/api/v1/assemblies/").json()["count"] == 0
    assert outsider_api.get("/api/v1/assemblies/?run_id=run-42").json()["count"] == 0
    assert outsider_api.get("/api/v1/items/task-goal/decisions/").json()["count"] == 0
    assert outsider_api.get("/api/v1/artifacts/").json()["count"] == 0
    assert agent_api.get("/api/v1/items/task-goal/decisions/").json()["count"] == 1
    assert agent_api.get("/api/v1/artifacts/").json()["count"] == 1


def test_a_member_with_only_the_reviewer_role_can_read_but_not_report_usage(job_id, reviewer_api):
    assert reviewer_api.get(f"/api/v1/assemblies/{job_id}/").json()["status"] == "ready"
    response = reviewer_api.post(f"/api/v1/assemblies/{job_id}/usage/", {"input_tokens": 1}, format="json")
    assert response.status_code == 403


def test_an_outsider_cannot_write_artifacts_into_another_tenant(db, outsider_api):
    response = outsider_api.post(
        "/api/v1/artifacts/",
        {"artifact_id": "x", "revision": 1, "kind": "k", "content": "c", "writer": "w", "scope": "s",
         "tenant": "tenant-x"},
        format="json",
    )
    assert response.status_code == 403
