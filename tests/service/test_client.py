"""ctxeng.client against a live server (in-process jobs): results and typed errors."""

from __future__ import annotations

import pytest

from ctxeng import client as ctxclient


@pytest.fixture
def agent_client(live_server, inline_jobs, published_policy, agent_user):
    from rest_framework.authtoken.models import Token

    return ctxclient.Client(live_server.url, Token.objects.get(user=agent_user).key)


def test_assemble_waits_and_returns_status_input_and_manifest(agent_client, example_request):
    result = agent_client.assemble(example_request, wait=True, timeout=30)
    assert result.status == "ready"
    assert result.input["messages"]
    assert result.manifest["assembly"]["status"] == "ready"
    usage = agent_client.report_usage(result.id, input_tokens=1234)
    assert usage["estimated_input_tokens"] == result.manifest["budget"]["estimated_used"]


def test_a_blocked_assembly_has_a_manifest_and_no_input(agent_client, example_blocked_request):
    result = agent_client.assemble(example_blocked_request, timeout=30)
    assert result.status == "blocked"
    assert result.input is None
    with pytest.raises(ctxclient.Conflict):
        agent_client.input(result.id)


def test_an_invalid_request_raises_with_field_paths(agent_client, example_request):
    del example_request["candidates"][3]["item_id"]
    with pytest.raises(ctxclient.InvalidRequest) as caught:
        agent_client.assemble(example_request)
    assert "candidates[3].item_id: field required" in caught.value.errors
    assert caught.value.status == 400


def test_a_bad_token_raises_auth_error(live_server, example_request):
    with pytest.raises(ctxclient.AuthError):
        ctxclient.Client(live_server.url, "nope").assemble(example_request)


def test_an_unknown_assembly_raises_not_found(agent_client):
    with pytest.raises(ctxclient.NotFound):
        agent_client.job("00000000-0000-0000-0000-000000000000")


def test_a_reused_idempotency_key_raises_conflict(agent_client, example_request):
    agent_client.assemble(example_request, idempotency_key="k1")
    example_request["step_id"] = "step-20"
    with pytest.raises(ctxclient.Conflict):
        agent_client.assemble(example_request, idempotency_key="k1")


def test_a_failed_assembly_raises_assembly_failed(agent_client, example_request, monkeypatch):
    import manifests.services

    monkeypatch.setattr(manifests.services, "assemble", lambda *a, **k: 1 / 0)
    with pytest.raises(ctxclient.AssemblyFailed, match="ZeroDivisionError"):
        agent_client.assemble(example_request, timeout=30)


def test_a_job_not_final_in_time_raises_timeout(agent_client, example_request, settings):
    from tests.service_fixtures import use_broker

    settings.CTXENG_JOBS_INLINE = False  # enqueued to the in-memory broker: nobody runs it
    use_broker("memory://")
    with pytest.raises(ctxclient.Timeout):
        agent_client.assemble(example_request, timeout=0.5, poll_interval=0.1)


def test_close_run_closes_the_task_and_the_next_step_is_blocked(agent_client, example_request):
    assert agent_client.assemble(example_request, timeout=30).status == "ready"
    closed = agent_client.close_run("run-42")
    assert closed["run_id"] == "run-42" and closed["closed_at"]
    example_request["step_id"] = "step-20"
    after = agent_client.assemble(example_request, timeout=30)
    assert after.status == "blocked" and after.manifest["lifecycle_events"][0]["event"] == "task_closed"
    with pytest.raises(ctxclient.NotFound):
        agent_client.close_run("no-such-run")
