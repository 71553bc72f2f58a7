"""Cases written for mutants of manifests/api.py that survived `make mutate-sample`
(docs/mutation.md, "Over the whole product"): a job without a manifest yet names no manifest or
input URL.

Oracle: the job is kept queued by the test, so it has no manifest.
"""

from __future__ import annotations

import pytest


@pytest.mark.django_db
def test_a_queued_job_names_no_manifest_and_no_input_url(agent_api, published_policy, example_request, monkeypatch):
    from manifests import services

    monkeypatch.setattr(services, "assembly_job_enqueue", lambda **kwargs: None)  # the job stays queued
    submitted = agent_api.post("/api/v1/assemblies/", example_request, format="json")
    assert submitted.status_code in (200, 201, 202)
    job = agent_api.get(f"/api/v1/assemblies/{submitted.json()['id']}/").json()
    assert job["status"] == "queued"
    assert (job["manifest_url"], job["input_url"]) == (None, None)
