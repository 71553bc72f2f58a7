"""Submitting assemblies: idempotency, every bad-input case, engine failures — never a 500."""

from __future__ import annotations

import json

import pytest

from manifests.models import AssemblyJob

URL = "/api/v1/assemblies/"


def test_the_same_idempotency_key_and_body_return_the_same_job(published_policy, agent_api, submit, example_request):
    first = submit(agent_api, example_request, key="step-19")
    second = submit(agent_api, example_request, key="step-19")
    assert first.status_code == 202
    assert second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    assert AssemblyJob.objects.count() == 1


def test_the_same_idempotency_key_with_another_body_is_a_conflict(published_policy, agent_api, submit, example_request):
    submit(agent_api, example_request, key="step-19")
    example_request["step_id"] = "step-20"
    response = submit(agent_api, example_request, key="step-19")
    assert response.status_code == 409
    assert "Idempotency-Key" in response.json()["errors"][0]


def test_without_an_idempotency_key_each_submit_is_a_new_job(published_policy, agent_api, submit, example_request):
    assert submit(agent_api, example_request).json()["id"] != submit(agent_api, example_request).json()["id"]


def test_an_invalid_body_is_refused_with_the_engine_field_paths(published_policy, agent_api, submit, example_request):
    del example_request["candidates"][3]["item_id"]
    response = submit(agent_api, example_request)
    assert response.status_code == 400
    assert "candidates[3].item_id: field required" in response.json()["errors"]


def test_malformed_json_is_a_bad_request(published_policy, agent_api):
    response = agent_api.post(URL, data=b'{"run_id": ', content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"][0].startswith("body: malformed JSON")


def test_a_body_that_is_not_an_object_is_a_bad_request(published_policy, agent_api):
    response = agent_api.post(URL, data=b"[1, 2]", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == ["body: expected a JSON object, got list"]


def test_an_empty_body_is_a_bad_request(published_policy, agent_api):
    assert agent_api.post(URL, data=b"", content_type="application/json").status_code == 400


def test_a_body_over_the_limit_is_refused_with_413(published_policy, agent_api, settings, example_request):
    settings.CTXENG_MAX_REQUEST_BYTES = 1000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = agent_api.post(URL, data=json.dumps(example_request), content_type="application/json")
    assert response.status_code == 413
    assert "CTXENG_MAX_REQUEST_BYTES" in response.json()["errors"][0]


def test_an_unknown_policy_is_a_bad_request_naming_it(published_policy, agent_api, submit, example_request):
    example_request["policy"] = {"id": "no-such-policy"}
    response = submit(agent_api, example_request)
    assert response.status_code == 400
    assert "no-such-policy" in response.json()["errors"][0]


def test_an_unknown_revision_is_a_bad_request_naming_it(published_policy, agent_api, submit, example_request):
    example_request["policy"] = {"id": "source-research", "revision": 99}
    response = submit(agent_api, example_request)
    assert response.status_code == 400
    assert response.json()["errors"] == ["policy.revision: unknown revision 99 of policy 'source-research'"]


def test_a_policy_with_no_published_revision_is_a_bad_request(db, editor_user, agent_api, submit, example_request,
                                                             example_policy_text):
    from ctxeng.accounts.models import Tenant
    from policies.services import policy_import

    policy_import(tenant=Tenant.objects.get(slug="tenant-x"), text=example_policy_text, user=editor_user,
                  publish=False)
    example_request["policy"] = {"id": "source-research"}
    response = submit(agent_api, example_request)
    assert response.status_code == 400
    assert "no published revision" in response.json()["errors"][0]


def test_a_digest_that_does_not_match_the_revision_is_a_bad_request(published_policy, agent_api, submit,
                                                                    example_request):
    example_request["policy"]["digest"] = "sha256:" + "0" * 64
    assert submit(agent_api, example_request).status_code == 400


def test_an_unknown_adapter_is_a_bad_request(published_policy, agent_api, submit, example_request):
    example_request["adapter"] = "carrier_pigeon"
    response = submit(agent_api, example_request)
    assert response.status_code == 400
    assert response.json()["errors"] == ["adapter: unknown adapter 'carrier_pigeon'"]


def test_no_token_is_401(published_policy, anon_api, example_request):
    assert anon_api.post(URL, example_request, format="json").status_code == 401
    assert anon_api.get(URL).status_code == 401


def test_a_bad_token_is_401(published_policy, api, example_request):
    client = api(None)
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = client.post(URL, example_request, format="json")
    assert response.status_code == 401
    assert response.json()["errors"]


def test_submitting_for_a_tenant_outside_yours_is_403(published_policy, outsider_api, submit, example_request):
    response = submit(outsider_api, example_request)
    assert response.status_code == 403
    assert "tenant-x" in response.json()["errors"][0]


def test_submitting_needs_the_agent_role(published_policy, reviewer_api, submit, example_request):
    assert submit(reviewer_api, example_request).status_code == 403


def test_an_engine_exception_ends_the_job_failed_with_the_error(
    published_policy, agent_api, submit, example_request, monkeypatch
):
    import manifests.services

    def explode(*args, **kwargs):
        raise RuntimeError("the engine broke")

    monkeypatch.setattr(manifests.services, "assemble", explode)
    response = submit(agent_api, example_request)
    assert response.status_code == 202
    job = agent_api.get(response.json()["url"]).json()
    assert job["status"] == "failed"
    assert job["error"] == "RuntimeError: the engine broke"
    assert agent_api.get(f"{URL}{job['id']}/manifest/").status_code == 409


def test_a_job_the_engine_refuses_as_invalid_ends_failed_not_500(
    published_policy, agent_api, submit, example_request, monkeypatch
):
    import manifests.services
    from ctxeng.engine import InvalidInput

    def refuse(*args, **kwargs):
        raise InvalidInput(["policy.revision: mismatch"], what="request")

    monkeypatch.setattr(manifests.services, "assemble", refuse)
    job = agent_api.get(submit(agent_api, example_request).json()["url"]).json()
    assert job["status"] == "failed"
    assert "policy.revision: mismatch" in job["error"]


@pytest.mark.parametrize("path", ["/api/v1/assemblies/not-a-uuid/", "/api/v1/assemblies/00000000-0000-0000-0000-000000000000/manifest/"])
def test_an_unknown_assembly_is_404(db, agent_api, path):
    assert agent_api.get(path).status_code == 404


def test_a_usage_report_with_negative_tokens_is_a_bad_request(published_policy, agent_api, submit, example_request):
    job_id = submit(agent_api, example_request).json()["id"]
    response = agent_api.post(f"{URL}{job_id}/usage/", {"input_tokens": -1}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0].startswith("input_tokens:")


def test_the_openapi_schema_references_the_engine_models(db, agent_api):
    response = agent_api.get("/api/schema/?format=json")
    assert response.status_code == 200
    schemas = json.loads(response.content)["components"]["schemas"]
    assert {"AssemblyRequest", "ContextPolicy", "ContextAssemblyManifest"} <= set(schemas)


def test_the_interactive_docs_page_serves_vendored_assets(db, client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    assert b"cdn.jsdelivr" not in response.content


def test_more_candidates_than_the_engine_cap_is_a_bad_request(published_policy, agent_api, submit, example_request):
    from ctxeng.engine.policy import MAX_CANDIDATES

    example_request["candidates"] = [{}] * (MAX_CANDIDATES + 1)
    response = submit(agent_api, example_request)
    assert response.status_code == 400
    assert "more than the limit" in response.json()["errors"][0]
