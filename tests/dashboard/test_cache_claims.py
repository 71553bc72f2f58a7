"""Whose figure the cache-eligible share is (issue 51, N10): a remote job's compares with the run's
previous step as the service sealed it; a recorded step's with the record the agent's own session
kept, which the service never saw. The run page and the manifest page mark the second as the
agent's claim, step by step and over the run, and never the first."""

from __future__ import annotations

import re

from django.test import Client

from tests.manifests.test_api_recorded_steps import chat_policy_on_server, local_steps, record  # noqa: F401 - fixtures


def _page(user, path: str) -> str:
    client = Client()
    client.force_login(user)
    answer = client.get(path)
    assert answer.status_code == 200
    return answer.content.decode()


def _row_cells(body: str) -> list[str]:
    """The cache-eligible cell of each step row, in order."""
    return re.findall(r'<td class="num cache-eligible">(.*?)</td>', body, re.S)


def test_recorded_steps_figures_are_marked_as_the_agents_claim(agent_api, agent_user, record):  # noqa: F811
    results = record(agent_api, local_steps(2, run_id="run-claims")).json()["results"]
    assert [r["outcome"] for r in results] == ["stored", "stored"]
    body = _page(agent_user, "/runs/run-claims/")
    cells = _row_cells(body)
    assert len(cells) == 2 and all("%" in cell and 'class="badge claimed"' in cell for cell in cells)
    assert re.search(r'<span class="claimed-run">2 of them the agent\'s claim', body)
    manifest = _page(agent_user, f"/assemblies/{results[1]['id']}/")
    assert "the agent's claim</span>" in manifest and 'class="computed-by"' not in manifest


def test_a_remote_runs_figures_are_the_services_and_carry_no_claim_mark(
        agent_api, agent_user, published_policy, submit, example_request):
    ids = []
    for n in (1, 2):
        answer = submit(agent_api, {**example_request, "run_id": "run-remote", "step_id": f"step-{n}"})
        ids.append(answer.json()["id"])
    body = _page(agent_user, "/runs/run-remote/")
    cells = _row_cells(body)
    assert len(cells) == 2 and all("%" in cell and "claimed" not in cell for cell in cells)
    assert 'class="claimed-run"' not in body
    manifest = _page(agent_user, f"/assemblies/{ids[1]}/")
    assert "compared with the run's previous step as the service sealed it" in manifest
    assert "the agent's claim" not in manifest


def test_a_manifest_sealed_before_the_label_existed_is_read_as_the_agents_claim(
        agent_user, published_policy, example_request):
    """Before issue 51 every figure compared with the previous_cache the agent sent: a stored
    manifest without `previous_cache_from` is marked as a claim, on both pages."""
    from manifests.models import AssemblyJob, JobStatus
    from manifests.selectors import manifest_document
    from manifests.services import (
        assembly_job_assemble,
        assembly_job_claim,
        assembly_job_submit,
        manifest_create,
    )

    body = {**example_request, "run_id": "run-old"}
    done, _ = assembly_job_submit(user=agent_user, data={**body, "step_id": "step-1"})
    assembly_job_assemble(job_id=done.id, attempt=assembly_job_claim(job_id=done.id))
    old, _ = assembly_job_submit(user=agent_user, data={**body, "step_id": "step-2"})
    document = manifest_document(AssemblyJob.objects.get(pk=done.pk).manifest)
    document["assembly"] = {**document["assembly"], "step_id": "step-2"}
    document["cache"] = {k: v for k, v in document["cache"].items() if k != "previous_cache_from"}
    manifest_create(job=old, document=document)
    AssemblyJob.objects.filter(pk=old.pk).update(status=JobStatus.READY)

    cells = _row_cells(_page(agent_user, "/runs/run-old/"))
    assert ["claimed" in cell for cell in cells] == [False, True]
    manifest = _page(agent_user, f"/assemblies/{old.id}/")
    assert "the agent's claim</span>" in manifest and 'class="computed-by"' not in manifest
