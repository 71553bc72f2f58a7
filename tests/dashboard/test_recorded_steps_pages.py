"""Recorded steps on the dashboard: the run page, its step table, the manifest page and the runs list say
recorded vs remote and verified / diverged / pending, with the difference; the runs list's
verification filter finds the runs with a diverged step; a run says how many steps its recorder dropped."""

from __future__ import annotations

import pytest

from tests.manifests.test_api_recorded_steps import STALE, chat_policy_on_server, local_steps  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def recorded(inline_jobs, chat_policy_on_server, agent_user, django_capture_on_commit_callbacks):  # noqa: F811
    """Run `run-rec`: step-1 verified, step-2 tampered on the way (diverged), 4 steps dropped;
    run `run-clean`: one verified step."""
    from manifests.services import recorded_steps_store

    first, second = local_steps(2, run_id="run-rec")
    second["manifest"]["assembly"]["serialized_model_input_hash"] = "sha256:" + "0" * 64
    with django_capture_on_commit_callbacks(execute=True):
        outcomes = recorded_steps_store(user=agent_user, steps=[first, second],
                                        dropped=[{"tenant": "tenant-x", "run_id": "run-rec", "count": 4}])
        recorded_steps_store(user=agent_user, steps=local_steps(1, run_id="run-clean"))
    return [outcome.job for outcome in outcomes]


@pytest.fixture
def agent_client(client, agent_user):
    client.force_login(agent_user)
    return client


def test_the_run_page_says_recorded_verified_and_diverged_with_the_difference(agent_client, recorded):
    page = agent_client.get("/runs/run-rec/").content.decode()
    assert page.count('class="badge muted origin"') == 2 and ">recorded</span>" in page
    assert '<span class="badge good verification"' in page and ">verified</span>" in page
    assert '<span class="badge bad verification"' in page and ">diverged</span>" in page
    assert "assembly.serialized_model_input_hash: recorded sha256:000" in page
    assert '<span class="badge bad dropped">4 dropped</span>' in page
    assert f'href="/assemblies/{recorded[1].id}/">first diverged step</a>' in page


def test_the_manifest_page_of_a_diverged_step_names_the_difference(agent_client, recorded):
    page = agent_client.get(f"/assemblies/{recorded[1].id}/").content.decode()
    assert ">diverged</span>" in page and "re-assembled sha256:" in page
    verified = agent_client.get(f"/assemblies/{recorded[0].id}/").content.decode()
    assert ">verified</span>" in verified and "diverged" not in verified


def test_the_runs_list_filter_finds_the_runs_with_a_diverged_step(agent_client, recorded):
    everything = agent_client.get("/runs/").content.decode()
    assert "run-rec" in everything and "run-clean" in everything
    assert '<span class="badge bad">1 diverged</span>' in everything
    diverged = agent_client.get("/runs/?verification=diverged").content.decode()
    assert "run-rec" in diverged and "run-clean" not in diverged
    wrong = agent_client.get("/runs/?verification=maybe").content.decode()
    assert "Unknown verification" in wrong and "run-clean" in wrong


def test_a_remote_step_says_remote_and_no_verification(agent_client, recorded, agent_api, submit, published_policy,
                                                     example_request):
    job_id = submit(agent_api, example_request).json()["id"]
    page = agent_client.get(f"/runs/{example_request['run_id']}/").content.decode()
    assert ">remote</span>" in page and "verification" not in page.split('id="steps"')[1].split("</table>")[0]
    assert agent_api.get(f"/api/v1/assemblies/{job_id}/").json()["verification"] is None
