"""Cases written for mutants of manifests/selectors.py that survived `make mutate-sample`
(docs/mutation.md, "Over the whole product"): a manifest document read by sections or after its
row is gone, an artifact body with a lone surrogate, and the long poll seeing a job end within a
wait shorter than a second.

Oracles: the whole document read without sections; strings written here; the job's status set by
the test itself.
"""

from __future__ import annotations

import pytest

from manifests import selectors


def _submit(agent_api, example_request):
    from manifests.models import AssemblyJob

    assert agent_api.post("/api/v1/assemblies/", example_request, format="json").status_code in (200, 201, 202)
    return AssemblyJob.objects.get()


@pytest.fixture
def sealed_manifest(agent_api, published_policy, example_request, inline_jobs, django_capture_on_commit_callbacks):
    """The worked example submitted through the API and sealed in this process."""
    from manifests.models import Manifest

    with django_capture_on_commit_callbacks(execute=True):
        _submit(agent_api, example_request)
    return Manifest.objects.get()


@pytest.mark.django_db
def test_a_manifest_document_read_by_sections_holds_those_sections_only(sealed_manifest):
    whole = selectors.manifest_document(sealed_manifest)
    assert {"budget", "included"} <= set(whole)
    part = selectors.manifest_document(sealed_manifest, sections=("budget", "included"))
    assert part == {"budget": whole["budget"], "included": whole["included"]}


@pytest.mark.django_db
def test_the_document_of_a_manifest_whose_row_is_gone_is_empty(sealed_manifest):
    from manifests.models import Manifest

    Manifest.objects.filter(pk=sealed_manifest.pk).delete()
    assert selectors.manifest_document(sealed_manifest) == {}


def test_an_artifact_body_keeps_a_lone_surrogate_as_it_was_stored():
    text = "before \ud800 after"
    assert selectors._text(text.encode("utf-8", "surrogatepass")) == text
    assert selectors._text(None) is None


@pytest.mark.django_db(transaction=True)
def test_the_long_poll_returns_the_job_final_when_it_ends_within_a_short_wait(agent_api, agent_user, published_policy,
                                                                              example_request, monkeypatch):
    from manifests import services
    from manifests.models import AssemblyJob, JobStatus

    monkeypatch.setattr(services, "assembly_job_enqueue", lambda **kwargs: None)  # the job stays queued
    job = _submit(agent_api, example_request)

    def the_job_ends(seconds):
        AssemblyJob.objects.filter(pk=job.pk).update(status=JobStatus.FAILED)

    monkeypatch.setattr(selectors.time, "sleep", the_job_ends)
    assert selectors.job_get_when_final(agent_user, job.id, wait=0.5).status == JobStatus.FAILED
