"""Failures are typed (issue 12): a deterministic error ends the job `failed` at once with the real
error; only an infrastructure fault is retried.

Before, a body the database could not store was accepted (202), the save of the sealed result
raised outside the error handling, the job stayed `running`, the sweep re-ran it twice and it
ended "worker lost during each of 3 attempts" with the real error only in the worker log.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

URL = "/api/v1/assemblies/"


def _nested(depth: int):
    value = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("item_id", "i" * 400, "candidates[12].item_id: String should have at most 300 characters"),
        ("kind", "k" * 150, "candidates[12].kind: String should have at most 100 characters"),
        ("source_ref", _nested(900), "body: nested 903 levels deep, more than the limit 64"),
    ],
    ids=["400-char item_id", "150-char kind", "source_ref 900 deep"],
)
def test_what_used_to_be_accepted_and_fail_late_is_a_400_at_submit(
    field, value, error, published_policy, agent_api, submit, example_request
):
    from manifests.models import AssemblyJob

    example_request["candidates"][12][field] = value
    response = submit(agent_api, example_request)
    assert response.status_code == 400
    assert response.json()["errors"] == [error]
    assert not AssemblyJob.objects.exists()


@pytest.fixture
def queued_job(published_policy, agent_api, inline_jobs, django_capture_on_commit_callbacks, example_request):
    """A submitted job whose run has not started yet (its on-commit enqueue is held back)."""
    with django_capture_on_commit_callbacks(execute=False):
        response = agent_api.post(URL, example_request, format="json")
    assert response.status_code == 202
    return response.json()["id"]


def test_a_storage_constraint_in_the_save_fails_the_job_at_once_with_the_real_error(queued_job, agent_api):
    """A manifest row already holds the job (the one-manifest-per-job constraint): the save of the
    sealed result violates it. One attempt, the database's own message, and the sweep leaves it."""
    from manifests.models import AssemblyJob, Manifest, ManifestItem
    from manifests.services import assembly_jobs_recover
    from manifests.tasks import run_assembly_job

    Manifest.objects.create(job_id=queued_job, assembly_id="squatter", status="ready", document_packed="{}")

    assert run_assembly_job(queued_job) == "failed"

    job = agent_api.get(f"{URL}{queued_job}/").json()
    assert job["status"] == "failed"
    assert job["attempts"] == 1
    assert job["error"].startswith("IntegrityError: "), job["error"]
    assert "job_id" in job["error"], job["error"]
    # Nothing of the failed seal was kept: only the squatting row, without item rows.
    assert list(Manifest.objects.filter(job_id=queued_job).values_list("assembly_id", flat=True)) == ["squatter"]
    assert not ManifestItem.objects.exists()
    # The sweep has nothing to retry, however late it runs.
    AssemblyJob.objects.filter(id=queued_job).update(heartbeat_at=AssemblyJob.objects.get(id=queued_job).created_at
                                                     - timedelta(days=1))
    assert assembly_jobs_recover() == {"requeued": 0, "failed": 0, "resent": 0}
    assert AssemblyJob.objects.get(id=queued_job).attempts == 1


def test_an_error_raised_while_sealing_fails_the_job_once_with_its_message_shown_in_the_dashboard(
    queued_job, agent_api, agent_user, client, monkeypatch
):
    import manifests.services
    from manifests.tasks import run_assembly_job

    def broken_sections(document):
        raise ValueError("candidates[3].item_id: cannot be indexed")

    monkeypatch.setattr(manifests.services, "page_sections", broken_sections)
    assert run_assembly_job(queued_job) == "failed"
    job = agent_api.get(f"{URL}{queued_job}/").json()
    assert (job["status"], job["attempts"]) == ("failed", 1)
    assert job["error"] == "ValueError: candidates[3].item_id: cannot be indexed"
    client.force_login(agent_user)
    page = client.get(f"/assemblies/{queued_job}/")
    assert page.status_code == 200
    assert "ValueError: candidates[3].item_id: cannot be indexed" in page.content.decode()


def test_an_unreachable_database_is_an_infrastructure_fault_left_to_the_sweep_which_retries_it(
    queued_job, agent_api, monkeypatch, settings
):
    from django.db import OperationalError

    import manifests.services
    from manifests.models import AssemblyJob
    from manifests.services import assembly_jobs_recover
    from manifests.tasks import run_assembly_job

    real_assemble = manifests.services.assemble

    def unreachable(*args, **kwargs):
        raise OperationalError("could not connect to server: Connection refused")

    monkeypatch.setattr(manifests.services, "assemble", unreachable)
    with pytest.raises(OperationalError):
        run_assembly_job(queued_job)
    job = AssemblyJob.objects.get(id=queued_job)
    assert (job.status, job.attempts, job.error) == ("running", 1, "")

    # The heartbeat stopped with the attempt; once it is stale the sweep requeues the job.
    AssemblyJob.objects.filter(id=queued_job).update(heartbeat_at=job.heartbeat_at - timedelta(days=1))
    monkeypatch.setattr(manifests.services, "assemble", real_assemble)
    settings.CTXENG_JOBS_INLINE = True
    counts = assembly_jobs_recover()
    assert counts["requeued"] == 1
    job = agent_api.get(f"{URL}{queued_job}/").json()
    assert (job["status"], job["attempts"]) == ("ready", 2)



def test_an_admission_reason_quoting_an_escaped_partition_name_is_stored(
    editor_user, agent_api, submit, settings
):
    """The structured summary's admission reason quotes its partition's name with repr(): a
    100-character name of characters repr() escapes made it 400+ characters, more than the
    reason column held (a late DataError on PostgreSQL). The column is text now."""
    from ctxeng.accounts.models import Tenant
    from ctxeng.engine import parse_policy
    from manifests.models import ManifestItem
    from policies.services import policy_revision_create, policy_revision_publish
    from tests.engine.builders import item, policy, request

    name = "\xa0" * 100  # a no-break space: printable (a name may hold it), escaped by repr()
    body = policy()
    body["budget"]["partitions"] = {
        "control": {"minimum": 100, "eviction": "never", "kinds": ["instruction", "goal", "hard_constraints"]},
        name: {"minimum": 100, "maximum": 1500, "eviction": "structured_summary",
               "kinds": ["current_stage", "open_items_summary", "research_plan", "summary"]},
        "background": {"maximum": 5000, "eviction": "first", "kinds": ["trace", "memory", "background"]},
    }
    revision = policy_revision_create(tenant=Tenant.objects.get(slug="tenant-x"), body=parse_policy(body)
                                      .model_dump(mode="json"), user=editor_user)
    policy_revision_publish(revision=revision, user=editor_user)
    # 900 words: over the partition's maximum (1,500) with its compact fence too, so the structured summary runs
    plan = item("plan-a", "runtime_state", " ".join(f"a{i}" for i in range(900)), kind="research_plan", open_item_ids=["OI-7"],
                relevance=0.3)
    response = submit(agent_api, request(extra=[plan]))
    assert response.status_code == 202, response.json()
    job = agent_api.get(response.json()["url"]).json()
    assert job["status"] == "ready", job
    reason = ManifestItem.objects.get(item_id=f"structured-summary-{name}").reason
    assert len(reason) > 400 and reason.startswith("structured summary of 1 state items"), reason
