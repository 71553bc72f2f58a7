"""The policies REST API: drafts, edits, publishing, diff, roles and bad input."""

from __future__ import annotations

import pytest

from policies.models import PolicyRevision

URL = "/api/v1/policies/source-research/revisions/"


def _bump(body: dict, revision: int, **budget) -> dict:
    out = {**body, "policy": {**body["policy"], "revision": revision}}
    if budget:
        out["budget"] = {**body["budget"], **budget}
    return out


@pytest.fixture
def draft(editor_api, example_policy_body):
    response = editor_api.post(URL, {"body": example_policy_body}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def test_creating_a_revision_returns_its_number_status_and_digest(draft):
    assert draft["policy_id"] == "source-research"
    assert draft["revision"] == 3
    assert draft["status"] == "draft"
    assert draft["digest"].startswith("sha256:")


def test_a_body_for_another_policy_id_is_refused(editor_api, example_policy_body):
    response = editor_api.post("/api/v1/policies/other/revisions/", {"body": example_policy_body}, format="json")
    assert response.status_code == 400
    assert "policy.id" in response.json()["errors"][0]


def test_a_revision_number_that_exists_is_a_conflict(draft, editor_api, example_policy_body):
    response = editor_api.post(URL, {"body": example_policy_body}, format="json")
    assert response.status_code == 409


def test_an_invalid_policy_body_names_the_field_paths(editor_api, example_policy_body):
    body = {k: v for k, v in example_policy_body.items() if k != "budget"}
    response = editor_api.post(URL, {"body": body}, format="json")
    assert response.status_code == 400
    assert "budget: field required" in response.json()["errors"]


def test_a_draft_can_be_edited_until_it_is_published(draft, editor_api, example_policy_body):
    edited = _bump(example_policy_body, 3, safety_margin=600)
    response = editor_api.put(f"{URL}3/", {"body": edited}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["body"]["budget"]["safety_margin"] == 600
    assert response.json()["digest"] != draft["digest"]

    assert editor_api.post(f"{URL}3/publish/", {"note": "ok"}, format="json").status_code == 200
    response = editor_api.put(f"{URL}3/", {"body": example_policy_body}, format="json")
    assert response.status_code == 409


def test_publishing_twice_is_a_conflict(draft, editor_api):
    assert editor_api.post(f"{URL}3/publish/", format="json").status_code == 200
    assert editor_api.post(f"{URL}3/publish/", format="json").status_code == 409


def test_publishing_needs_the_policy_editor_role(draft, agent_api):
    response = agent_api.post(f"{URL}3/publish/", {"note": "x"}, format="json")
    assert response.status_code == 403


def test_writing_a_revision_needs_the_policy_editor_role(agent_api, example_policy_body):
    assert agent_api.post(URL, {"body": example_policy_body}, format="json").status_code == 403


def test_the_list_and_detail_show_revisions_and_the_current_one(draft, editor_api, example_policy_body):
    editor_api.post(f"{URL}3/publish/", format="json")
    editor_api.post(URL, {"body": _bump(example_policy_body, 4)}, format="json")
    policies = editor_api.get("/api/v1/policies/").json()["results"]
    assert policies == [
        {"policy_id": "source-research", "tenant": "tenant-x", "current_revision": 3,
         "current_digest": draft["digest"], "revisions": [3, 4]}
    ]
    revisions = editor_api.get(URL).json()["results"]
    assert [(r["revision"], r["status"]) for r in revisions] == [(3, "published"), (4, "draft")]
    detail = editor_api.get(f"{URL}4/").json()
    assert detail["body"]["policy"]["revision"] == 4
    assert editor_api.get(f"{URL}9/").status_code == 404


def test_the_diff_lists_changed_paths(draft, editor_api, example_policy_body):
    editor_api.post(URL, {"body": _bump(example_policy_body, 4, safety_margin=700)}, format="json")
    changes = editor_api.get("/api/v1/policies/source-research/diff/?from=3&to=4").json()["changes"]
    assert {"path": "budget.safety_margin", "change": "changed", "from": 500, "to": 700} in changes
    assert {"path": "policy.revision", "change": "changed", "from": 3, "to": 4} in changes


def test_a_diff_without_revision_numbers_is_a_bad_request(draft, editor_api):
    assert editor_api.get("/api/v1/policies/source-research/diff/?from=3").status_code == 400


def test_an_outsider_sees_no_policies(draft, outsider_api):
    assert outsider_api.get("/api/v1/policies/").json()["results"] == []
    assert outsider_api.get(URL).status_code == 404
    assert outsider_api.get(f"{URL}3/").status_code == 404
    assert outsider_api.post(f"{URL}3/publish/", format="json").status_code == 404
    assert outsider_api.get("/api/v1/policies/source-research/diff/?from=3&to=3").status_code == 404


def test_an_unauthenticated_client_gets_401(anon_api):
    assert anon_api.get("/api/v1/policies/").status_code == 401


INERT_CLAUSES = [
    (("expiry", "on"), ["sunset"], "expiry.on[0]: unknown value 'sunset'"),
    (("admission", "hard_filters"), ["permission", "freshness"], "admission.hard_filters: must include tenant_and_project_scope"),
    (("externalization", "targets"), ["memory"], "externalization.targets[0]: 'memory' is not an externalization target"),
    (("security", "required_assessments"), ["secret_handling"], "security.required_assessments: must include external_instruction_isolation"),
    (("cache", "invalidate_on"), ["full_moon"], "cache.invalidate_on[0]: unknown value 'full_moon'"),
    (("reinjection", "require"), ["vibes"], "reinjection.require[0]: unknown value 'vibes'"),
    (("retrieval", "diagnostic_sources"), ["logs"], "retrieval.diagnostic_sources[0]: unknown value 'logs'"),
]


@pytest.mark.parametrize(("path", "value", "error"), INERT_CLAUSES)
def test_a_clause_the_engine_would_not_act_on_is_refused_by_path_and_nothing_is_stored(
    editor_api, example_policy_body, path, value, error
):
    body = {**example_policy_body, path[0]: {**example_policy_body.get(path[0], {}), path[1]: value}}
    validated = editor_api.post("/api/v1/policies/validate/", body, format="json")
    assert validated.status_code == 400 and validated.json()["errors"][0].startswith(error)
    created = editor_api.post(URL, {"body": body}, format="json")
    assert created.status_code == 400 and created.json()["errors"][0].startswith(error)
    assert not PolicyRevision.objects.exists()


def test_the_validate_endpoint_accepts_the_worked_example(editor_api, example_policy_body):
    response = editor_api.post("/api/v1/policies/validate/", example_policy_body, format="json")
    assert response.status_code == 200 and response.json()["valid"] is True


AUTHORITY_TYPES = ["system_policy", "user_request", "runtime_state"]  # the worked example's authority source types


def test_the_validate_endpoint_warns_for_each_authority_source_type_without_producers(editor_api, example_policy_body):
    response = editor_api.post("/api/v1/policies/validate/", example_policy_body, format="json")
    assert response.status_code == 200
    assert [w.split(":", 1)[0] for w in response.json()["warnings"]] == [f"trust.producers.{t}" for t in AUTHORITY_TYPES]
    bound = {**example_policy_body, "trust": {**example_policy_body["trust"], "producers": {t: ["runtime/v1"] for t in AUTHORITY_TYPES}}}
    response = editor_api.post("/api/v1/policies/validate/", bound, format="json")
    assert response.status_code == 200 and response.json()["warnings"] == []
