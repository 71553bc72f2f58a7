"""Re-injection: a candidate with artifact_ref is loaded by the worker from its tenant's artifact
store and re-admitted by every gate and every `reinjection.require` clause; the service derives the
lifecycle events its records imply (replaced revision, revoked membership, closed run)."""

from __future__ import annotations

import hashlib

import pytest

from ctxeng.accounts.models import Tenant
from ctxeng.accounts.services import tenant_member_add, tenant_member_remove
from ctxeng.engine import parse_policy
from manifests.models import AssemblyJob, Run
from policies.dashboard_selectors import impact_preview

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
            "writer": "artifact-store/v1", "scope": "tenant-x/project-y/task-42", **extra}
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


def manifest_of(client, job_id: str) -> dict:
    return client.get(f"/api/v1/assemblies/{job_id}/manifest/").json()


def excluded_of(client, job_id: str, item_id: str) -> dict:
    return next(e for e in manifest_of(client, job_id)["excluded"] if e["item_id"] == item_id)


def test_each_reinjection_clause_is_recorded_on_the_included_item(published_policy, agent_api, submit, reinjected_request):
    store(agent_api, PLAN_CONTENT)
    job_id = submit(agent_api, reinjected_request).json()["id"]
    plan = next(i for i in manifest_of(agent_api, job_id)["included"] if i["item_id"] == "plan-42-r5")
    assert plan["reinjection_checks"] == {clause: "passed" for clause in [
        "object_identity", "writer_and_source", "content_hash_and_revision", "scope_and_permission",
        "freshness_or_refresh", "trust_label", "trust_role_compatibility", "structural_integrity",
        "security_classification", "security_policy_compliance", "admission_reason"]}


def test_an_artifact_written_by_another_writer_fails_writer_and_source(published_policy, agent_api, submit,
                                                                       reinjected_request):
    store(agent_api, PLAN_CONTENT, writer="some-other-tool/v1")
    job_id = submit(agent_api, reinjected_request).json()["id"]
    rec = excluded_of(agent_api, job_id, "plan-42-r5")
    assert rec["reinjection_checks"]["writer_and_source"] == "failed"


def test_a_newer_stored_revision_replaces_the_one_an_item_names(published_policy, agent_api, submit, reinjected_request):
    store(agent_api, PLAN_CONTENT)
    store(agent_api, "Plan r6: add context7.", revision=6)
    job_id = submit(agent_api, reinjected_request).json()["id"]
    rec = excluded_of(agent_api, job_id, "plan-42-r5")
    assert rec["reason"] == "expired" and "revision_replaced (service) for plan-42@5: revision 6 replaces it" in rec["detail"]
    events = manifest_of(agent_api, job_id)["lifecycle_events"]
    assert {"event": "revision_replaced", "artifact_id": "plan-42", "revision": "5"}.items() <= events[0].items()


def test_a_revoked_membership_revokes_what_its_user_wrote(published_policy, agent_api, agent_user, submit,
                                                          reinjected_request, api, django_user_model):
    tenant_member_add(username="scribe", tenant_slug="tenant-x", roles=["agent"])
    scribe = django_user_model.objects.get(username="scribe")
    assert store(api(scribe), PLAN_CONTENT).status_code == 201
    ready = submit(agent_api, reinjected_request).json()["id"]
    assert decision(agent_api, ready, "plan-42-r5") == ("included", None)

    assert tenant_member_remove(tenant=Tenant.objects.get(slug="tenant-x"), user=scribe, actor=agent_user) == 1
    reinjected_request["step_id"] = "step-20"
    job_id = submit(agent_api, reinjected_request).json()["id"]
    rec = excluded_of(agent_api, job_id, "plan-42-r5")
    assert rec["reason"] == "permission_denied" and "permission_revoked (service)" in rec["detail"]


def test_closing_a_run_blocks_its_later_steps_with_task_closed(published_policy, agent_api, submit, example_request):
    first = submit(agent_api, example_request).json()["id"]
    assert agent_api.get(f"/api/v1/assemblies/{first}/").json()["status"] == "ready"
    closed = agent_api.post("/api/v1/runs/run-42/close/", {}, format="json")
    assert closed.status_code == 200 and closed.json()["closed_at"]
    example_request["step_id"] = "step-20"
    job_id = submit(agent_api, example_request).json()["id"]
    assert agent_api.get(f"/api/v1/assemblies/{job_id}/").json()["status"] == "blocked"
    manifest = manifest_of(agent_api, job_id)
    assert any("lifecycle event task_closed" in d for d in manifest["assembly"]["blocked_detail"])
    assert manifest_of(agent_api, first)["assembly"]["status"] == "ready"  # sealed manifests never change


def test_closing_an_unknown_run_is_404_and_another_tenants_run_is_not_closable(published_policy, agent_api,
                                                                                outsider_api, submit, example_request):
    assert agent_api.post("/api/v1/runs/no-such-run/close/", {}, format="json").status_code == 404
    submit(agent_api, example_request)
    assert outsider_api.post("/api/v1/runs/run-42/close/", {}, format="json").status_code == 404
    assert Run.objects.get(run_id="run-42").closed_at is None


def test_a_request_the_policy_refuses_is_a_400_at_submit_and_stores_no_job(published_policy, agent_api, submit,
                                                                           example_request):
    example_request["lifecycle_events"] = [{"event": "sunset", "item_id": "task-goal"}]
    response = submit(agent_api, example_request)
    assert response.status_code == 400 and response.json()["errors"][0].startswith("lifecycle_events[0].event: unknown value 'sunset'")
    example_request["lifecycle_events"] = []
    example_request["principal"]["id"] = "someone-else/v1"
    response = submit(agent_api, example_request)
    assert response.status_code == 400
    assert response.json()["errors"] == ["principal.id: policy source-research/3 applies to principal 'research-agent/v2', not 'someone-else/v1'"]
    assert not AssemblyJob.objects.exists()



def test_the_impact_preview_replays_a_re_injecting_job_through_the_same_store(published_policy, agent_api, submit,
                                                                              reinjected_request):
    store(agent_api, PLAN_CONTENT)
    job_id = submit(agent_api, reinjected_request).json()["id"]
    assert decision(agent_api, job_id, "plan-42-r5") == ("included", None)
    preview = impact_preview(published_policy.policy, parse_policy(published_policy.body))
    (row,) = preview["rows"]
    assert row["error"] == "" and row["comparison"]["flips"] == []  # the same policy changes nothing


def test_a_jobs_artifacts_are_read_in_a_fixed_number_of_queries_each_with_its_own_revision(
    published_policy, agent_api, example_request, django_assert_max_num_queries
):
    """Re-injected artifacts, lifecycle events and summary inputs (the checkpoint's too) are read for the job together:
    one query for every revision of the ids the request names, one for the bodies, one for the
    writers' memberships, however many artifacts; each item still gets the revision it names."""
    from ctxeng.engine import parse_request
    from ctxeng.engine.models import CheckpointState
    from manifests.selectors import job_request, request_as_assembled
    from manifests.services import _parsed_policy

    for n in range(8):
        for revision in (1, 2):
            assert store(agent_api, f"plan {n} revision {revision}", revision=revision, **{"artifact_id": f"a-{n}"}).status_code == 201
    template = next(i for i in example_request["candidates"] if i["item_id"] == "plan-42-r5")
    for n in range(8):  # even ids name revision 1 (replaced by 2), odd ids the newest
        revision = 1 if n % 2 == 0 else None
        item = {k: v for k, v in template.items() if k != "revision"}
        example_request["candidates"].append({
            **item, "item_id": f"re-{n}", "content": None, "artifact_ref": {"artifact_id": f"a-{n}", "revision": revision},
            "content_hash": sha(f"plan {n} revision {revision or 2}"), "source_ref": {"artifact_id": f"a-{n}"},
        })
    response = agent_api.post("/api/v1/assemblies/", example_request, format="json")
    assert response.status_code == 202, response.json()
    job = AssemblyJob.objects.select_related("tenant", "run", "policy_revision").get(id=response.json()["id"])
    policy = _parsed_policy(job.policy_revision.pk, job.policy_revision.digest)
    # The checkpoint summary the engine adds names its inputs too: read with the rest.
    assert store(agent_api, "checkpoint input", revision=1, artifact_id="cp-input").status_code == 201
    checkpoint = CheckpointState(goal="g", current_stage="drafting", input_item_ids=["cp-input"])
    request = parse_request(job_request(job)).model_copy(update={"checkpoint": checkpoint})
    with django_assert_max_num_queries(3):
        assembled, lookup = request_as_assembled(job=job, request=request, policy=policy)
        found = {n: lookup(f"a-{n}", 1 if n % 2 == 0 else None) for n in range(8)}
        assert lookup("cp-input", None).content == "checkpoint input"
    assert {n: a.content for n, a in found.items()} == {n: f"plan {n} revision {1 if n % 2 == 0 else 2}" for n in range(8)}
    assert {n: a.revision for n, a in found.items()} == {n: "1" if n % 2 == 0 else "2" for n in range(8)}
    replaced = sorted(e.artifact_id for e in assembled.lifecycle_events if e.event.value == "revision_replaced")
    assert replaced == [f"a-{n}" for n in range(0, 8, 2)]
