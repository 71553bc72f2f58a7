"""`POST /api/v1/recorded-steps/`: steps an agent assembled in its own process, stored as jobs of their
run (`origin: recorded`) and verified by re-assembly (in-process here: no REDIS_URL; the live tests
in tests/service/test_recorded_steps_live.py run the same on a real Celery worker).

The oracle of every verification is written by hand from the request: the item whose exclusion is
turned into an inclusion, the policy digest the test changed. Every answer is checked against
docs/openapi.yaml (the `api` fixture)."""

from __future__ import annotations

import copy

import pytest

from ctxeng import sdk, starters
from tests.service_fixtures import OTHER_TENANT, TENANT

PRINCIPAL = {"id": "agent", "tenant": TENANT, "project": "p"}
HISTORY = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}]
STALE = "page-stale"


@pytest.fixture
def chat_policy_on_server(db, editor_user):
    from ctxeng.accounts.models import Tenant
    from policies.services import policy_import

    return policy_import(tenant=Tenant.objects.get(slug=TENANT), text=starters.text("chat-agent"), user=editor_user,
                         publish=True)


@pytest.fixture
def record(inline_jobs, chat_policy_on_server, django_capture_on_commit_callbacks):
    """`record(client, steps, dropped=())`: POST the steps and run their verification in-process."""

    def post(client, steps, dropped=()):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post("/api/v1/recorded-steps/", {"steps": steps, "dropped": list(dropped)}, format="json")

    return post


def local_steps(count: int = 2, run_id: str = "run-local", principal=PRINCIPAL) -> list[dict]:
    """What sdk.Recorder sends for `count` steps of a plain local loop; each step has one item the
    policy excludes (a page whose freshness is expired)."""
    session = sdk.Session("chat-agent", principal=principal, run_id=run_id)
    history, sent = list(HISTORY), []
    for n in range(count):
        page = sdk.web("https://example.com/old", "an old page", freshness="expired", item_id=STALE)
        request, _ = session.request(history, items=[page])
        step = session.step(history, items=[page])
        sent.append({"idempotency_key": f"{run_id}/step-{n + 1}", "request": request, "manifest": step.sealed_manifest})
        history += [{"role": "assistant", "content": f"reply {n}"}, {"role": "user", "content": f"more {n}"}]
    return sent


def verification(client, job_id: str) -> dict:
    return client.get(f"/api/v1/assemblies/{job_id}/").json()["verification"]


def test_a_recorded_local_step_is_stored_in_its_run_and_verified(agent_api, record):
    steps = local_steps(2)
    answer = record(agent_api, steps)
    assert answer.status_code == 200
    results = answer.json()["results"]
    assert [r["outcome"] for r in results] == ["stored", "stored"]
    assert [verification(agent_api, r["id"])["status"] for r in results] == ["verified", "verified"]
    job = agent_api.get(results[1]["html_url"].replace("/assemblies/", "/api/v1/assemblies/")).json()
    assert job["origin"] == "recorded" and job["run_id"] == "run-local" and job["step_id"] == "step-2"
    assert job["verification"]["status"] == "verified"
    assert steps[1]["manifest"]["assembly"]["serialized_model_input_hash"] in job["verification"]["detail"]
    assert job["input_url"] is None  # the model input stayed with the agent
    served = agent_api.get(f"/api/v1/assemblies/{job['id']}/manifest/").json()
    assert served["assembly"]["serialized_model_input_hash"] == steps[1]["manifest"]["assembly"]["serialized_model_input_hash"]


def test_a_step_sent_twice_is_stored_once(agent_api, record):
    from manifests.models import AssemblyJob

    steps = local_steps(1)
    first = record(agent_api, steps).json()["results"][0]
    again = record(agent_api, steps).json()["results"][0]
    assert (first["outcome"], again["outcome"]) == ("stored", "duplicate")
    assert first["id"] == again["id"] and AssemblyJob.objects.filter(run__run_id="run-local").count() == 1


def test_an_exclusion_turned_into_an_inclusion_on_the_way_diverges_naming_the_item(agent_api, record):
    [step] = local_steps(1)
    manifest = step["manifest"]
    [excluded] = [e for e in manifest["excluded"] if e["item_id"] == STALE]
    manifest["excluded"].remove(excluded)
    forged = copy.deepcopy(manifest["included"][-1])
    forged.update(item_id=STALE, kind=excluded["kind"], source_type=excluded["source_type"], source_ref=excluded["source_ref"])
    manifest["included"].append(forged)

    result = record(agent_api, [step]).json()["results"][0]
    assert result["outcome"] == "stored"
    found = verification(agent_api, result["id"])
    assert found["status"] == "diverged"
    assert found["detail"] == f"item {STALE}: recorded included ({forged['admission_reason']}), re-assembled excluded (expired)"
    listed = agent_api.get("/api/v1/assemblies/?verification=diverged").json()
    assert [j["id"] for j in listed["results"]] == [result["id"]]


def test_a_hash_changed_on_the_way_diverges_naming_the_hash(agent_api, record):
    [step] = local_steps(1)
    step["manifest"]["assembly"]["serialized_model_input_hash"] = "sha256:" + "0" * 64
    result = record(agent_api, [step]).json()["results"][0]
    job = agent_api.get(f"/api/v1/assemblies/{result['id']}/").json()
    assert job["verification"]["status"] == "diverged"
    assert job["verification"]["detail"].startswith("assembly.serialized_model_input_hash: recorded sha256:000")


def test_a_step_under_a_policy_body_the_service_lacks_is_unverifiable_and_says_so(agent_api, record):
    [step] = local_steps(1)
    step["manifest"]["assembly"]["policy"]["digest"] = "sha256:" + "1" * 64
    result = record(agent_api, [step]).json()["results"][0]
    job = agent_api.get(f"/api/v1/assemblies/{result['id']}/").json()
    assert job["verification"]["status"] == "unverifiable"
    assert job["verification"]["detail"].startswith("policy: the service's chat-agent revision 1 is sha256:")


def test_a_token_of_another_tenant_is_refused(outsider_api, agent_api, record):
    from manifests.models import AssemblyJob

    result = record(outsider_api, local_steps(1)).json()["results"][0]
    assert result["outcome"] == "refused" and result["status"] == 403
    assert "not a member of tenant 'tenant-x'" in result["errors"][0]
    assert not AssemblyJob.objects.exists()


def test_a_step_whose_policy_revision_the_tenant_lacks_is_refused_like_a_remote_submit(agent_api, record):
    [step] = local_steps(1)
    step["request"]["policy"]["revision"] = 9
    step["manifest"]["assembly"]["policy"]["revision"] = 9
    result = record(agent_api, [step]).json()["results"][0]
    assert (result["outcome"], result["status"]) == ("refused", 400)
    assert "unknown revision 9 of policy 'chat-agent'" in result["errors"][0]


def test_a_manifest_of_another_step_is_refused(agent_api, record):
    first, second = local_steps(2)
    first["manifest"] = second["manifest"]
    result = record(agent_api, [first]).json()["results"][0]
    assert result["outcome"] == "refused"
    assert result["errors"] == ["steps[0].manifest.assembly.step_id: 'step-2' is not the request's 'step-1'"]


def test_a_recorded_steps_cache_figure_is_the_agents_claim_and_cannot_say_otherwise(agent_api, record):
    """Issue 51, N10: the agent's engine compared with the previous_cache its session kept, so a
    recorded step's figure is labelled `request`; one saying the service computed it is refused."""
    honest, forged = local_steps(2)
    assert honest["manifest"]["cache"]["previous_cache_from"] == "request"
    forged["manifest"]["cache"]["previous_cache_from"] = "service"
    results = record(agent_api, [honest, forged]).json()["results"]
    assert [(r["outcome"], r["status"]) for r in results] == [("stored", 201), ("refused", 400)]
    assert results[1]["errors"][0].startswith("steps[1].manifest.cache.previous_cache_from: ")
    served = agent_api.get(f"/api/v1/assemblies/{results[0]['id']}/manifest/").json()
    assert served["cache"]["previous_cache_from"] == "request"


def test_one_refused_step_refuses_only_itself(agent_api, record):
    good, bad = local_steps(2)
    bad["request"]["candidates"][0]["item_id"] = ""
    results = record(agent_api, [bad, good]).json()["results"]
    assert [r["outcome"] for r in results] == ["refused", "stored"]
    assert results[0]["errors"][0].startswith("steps[0].request.candidates[0].item_id")


def test_the_run_keeps_the_largest_dropped_total_its_recorder_reported(agent_api, record):
    from manifests.models import Run

    record(agent_api, [], dropped=[{"tenant": TENANT, "run_id": "run-lossy", "count": 3}])
    record(agent_api, [], dropped=[{"tenant": TENANT, "run_id": "run-lossy", "count": 3},
                                   {"tenant": OTHER_TENANT, "run_id": "run-elsewhere", "count": 5}])
    assert Run.objects.get(run_id="run-lossy").recorded_dropped == 3
    assert not Run.objects.filter(run_id="run-elsewhere").exists()  # not the token's tenant


def test_a_batch_over_the_limit_is_refused_whole(agent_api, record):
    answer = record(agent_api, local_steps(1) * 51)
    assert answer.status_code == 400 and "steps" in answer.json()["errors"][0]


# --------------------------------------------------------------------------- content by reference

LONG = "The release notes of 2.1, as the tool returned them. " * 8  # kept by the service as a blob of its own


def long_steps(run_id: str, principal=PRINCIPAL) -> list[dict]:
    """Two steps of a local loop whose history holds LONG, as sent whole."""
    session = sdk.Session("chat-agent", principal=principal, run_id=run_id)
    history, sent = [*HISTORY, {"role": "assistant", "content": LONG}, {"role": "user", "content": "and?"}], []
    for n in range(2):
        request, _ = session.request(history)
        step = session.step(history)
        sent.append({"idempotency_key": f"{run_id}/step-{n + 1}", "request": request, "manifest": step.sealed_manifest})
    return sent


def by_reference(step: dict) -> tuple[dict, int]:
    """`step` with LONG's candidate naming its content by `content_ref` in the place of `content`;
    the candidate's index."""
    step = copy.deepcopy(step)
    [index] = [i for i, c in enumerate(step["request"]["candidates"]) if c.get("content") == LONG]
    candidate = step["request"]["candidates"][index]
    step["request"]["candidates"][index] = {("content_ref" if k == "content" else k): (
        candidate["content_hash"] if k == "content" else v) for k, v in candidate.items()}
    return step, index


def test_a_content_sent_by_reference_is_put_back_from_the_tenants_store(agent_api, record):
    first, second = long_steps("run-ref")
    assert record(agent_api, [first]).json()["results"][0]["outcome"] == "stored"
    referenced, _ = by_reference(second)
    result = record(agent_api, [referenced]).json()["results"][0]
    assert result["outcome"] == "stored", result
    assert verification(agent_api, result["id"])["status"] == "verified"
    stored = agent_api.get(f"/api/v1/assemblies/{result['id']}/request/").json()
    assert list(stored["candidates"][2]) == list(second["request"]["candidates"][2])  # the agent's key order
    assert stored == second["request"]  # the request as the agent assembled it
    again = record(agent_api, [second]).json()["results"][0]  # the same step sent whole: the same step
    assert (again["outcome"], again["id"]) == ("duplicate", result["id"])


def test_a_reference_the_tenant_lacks_is_refused_409_naming_the_candidate(agent_api, record):
    from manifests.models import AssemblyJob

    _, second = long_steps("run-unknown")
    referenced, index = by_reference(second)
    result = record(agent_api, [referenced]).json()["results"][0]
    assert (result["outcome"], result["status"]) == ("refused", 409)
    assert result["errors"][0].startswith(f"steps[0].request.candidates[{index}].content_ref: sha256:")
    assert "is not stored in tenant 'tenant-x'" in result["errors"][0]
    assert not AssemblyJob.objects.exists()


def test_another_tenants_content_cannot_be_named_by_reference(outsider_api, agent_api, record):
    first, second = long_steps("run-theirs")
    assert record(agent_api, [first]).json()["results"][0]["outcome"] == "stored"  # LONG is in tenant-x's store
    referenced, _ = by_reference(long_steps("run-mine", principal={**PRINCIPAL, "tenant": OTHER_TENANT})[1])
    mine = record(outsider_api, [referenced]).json()["results"][0]
    assert (mine["outcome"], mine["status"]) == ("refused", 409)  # its own tenant's store does not hold it
    assert f"is not stored in tenant '{OTHER_TENANT}'" in mine["errors"][0]
    theirs = record(outsider_api, [by_reference(second)[0]]).json()["results"][0]
    assert (theirs["outcome"], theirs["status"]) == ("refused", 403)  # refused before any store is read
