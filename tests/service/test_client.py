"""ctxeng.client against a live server: results, typed errors, and submit-and-wait in two
requests (the job long-poll), with in-process jobs and with a real Celery worker on Redis.

The requests are counted by a real HTTP proxy in front of the live server (`CountingProxy`),
which forwards each one and records its method, path and the job status it answered with.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

from ctxeng import client as ctxclient

FINAL = ("ready", "blocked", "failed")
# A real worker's job is usually final in seconds; the deadline only stops a truly stuck one.
GENEROUS = 300.0


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


def test_a_bad_token_raises_auth_error_saying_how_to_get_one(live_server, example_request):
    with pytest.raises(ctxclient.AuthError) as exc:
        ctxclient.Client(live_server.url, "nope").assemble(example_request)
    assert str(exc.value).startswith("Invalid token.") and "manage.py issue_token" in str(exc.value)


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
        agent_client.assemble(example_request, timeout=0.5)


def test_close_run_closes_the_task_and_the_next_step_is_blocked(agent_client, example_request):
    assert agent_client.assemble(example_request, timeout=30).status == "ready"
    closed = agent_client.close_run("run-42")
    assert closed["run_id"] == "run-42" and closed["closed_at"]
    example_request["step_id"] = "step-20"
    after = agent_client.assemble(example_request, timeout=30)
    assert after.status == "blocked" and after.manifest["lifecycle_events"][0]["event"] == "task_closed"
    with pytest.raises(ctxclient.NotFound):
        agent_client.close_run("no-such-run")


# --------------------------------------------------------------------------- submit and wait in two requests


class CountingProxy:
    """A real HTTP proxy to `upstream` that records (method, path, answered job status) per request."""

    def __init__(self, upstream: str) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        target = urlsplit(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                connection = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                try:
                    answered = json.loads(data).get("status") if data else None
                except (ValueError, AttributeError):
                    answered = None
                proxy.seen.append((self.command, self.path, answered))
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                connection.close()

            do_GET = do_POST = _forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def proxy(live_server) -> Iterator[CountingProxy]:
    counting = CountingProxy(live_server.url)
    yield counting
    counting.stop()


def _token(user) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.get_or_create(user=user)[0].key


def test_submit_and_wait_takes_two_requests_with_in_process_jobs(
    proxy, inline_jobs, published_policy, agent_user, example_request, expected
):
    result = ctxclient.Client(proxy.url, _token(agent_user)).assemble(example_request, timeout=60)
    assert [(method, path.split("?")[0]) for method, path, _ in proxy.seen] == [
        ("POST", "/api/v1/assemblies/"), ("GET", f"/api/v1/assemblies/{result.id}/")]
    assert result.status == "ready" and result.input["messages"]
    reasons = {e["item_id"]: e["reason"] for e in result.manifest["excluded"]}
    assert all(reasons.get(item) == reason for item, reason in expected["excluded"].items())
    assert "manifest" not in result.job and "input" not in result.job


@pytest.mark.slow
def test_submit_and_wait_long_polls_a_job_a_celery_worker_runs(
    proxy, start_worker, published_policy, agent_user, example_request, example_blocked_request
):
    worker = start_worker()
    client = ctxclient.Client(proxy.url, _token(agent_user))
    ready = client.assemble(example_request, timeout=GENEROUS)
    assert ready.status == "ready" and ready.input["messages"], worker.log()
    assert ready.manifest["assembly"]["status"] == "ready"
    blocked = client.assemble(example_blocked_request, timeout=GENEROUS)
    assert blocked.status == "blocked" and blocked.input is None and blocked.manifest["assembly"]["status"] == "blocked"
    for job_id in (ready.id, blocked.id):
        polls = [answered for method, path, answered in proxy.seen if path.startswith(f"/api/v1/assemblies/{job_id}/?")]
        # One long-poll answers once the worker has sealed the job; another is made only when a
        # whole 30 s wait ended before it was final (a worker slower than that on a busy machine).
        assert polls[-1] in FINAL and all(status not in FINAL for status in polls[:-1]), polls
    assert [method for method, _, _ in proxy.seen].count("POST") == 2


def test_the_long_poll_answers_with_the_job_not_yet_final_when_the_wait_ends(
    live_server, published_policy, agent_user, example_request, settings
):
    from tests.service_fixtures import use_broker

    settings.CTXENG_JOBS_INLINE = False  # enqueued to the in-memory broker: nobody runs it
    use_broker("memory://")
    client = ctxclient.Client(live_server.url, _token(agent_user))
    job_id = client.submit(example_request)["id"]
    body = client.job(job_id, wait=0.5, include=("manifest", "input"))
    assert body["status"] == "queued" and body["manifest"] is None and body["input"] is None


def test_include_adds_the_served_manifest_and_input_to_a_final_job(agent_api, published_policy, submit, example_request):
    job_id = submit(agent_api, example_request).json()["id"]
    agent_api.post(f"/api/v1/assemblies/{job_id}/usage/", {"input_tokens": 1234}, format="json")
    body = agent_api.get(f"/api/v1/assemblies/{job_id}/?wait=5&include=manifest&include=input").json()
    assert body["manifest"] == agent_api.get(f"/api/v1/assemblies/{job_id}/manifest/").json()
    assert body["manifest"]["budget"]["actual_input_tokens"] == 1234
    assert body["input"] == agent_api.get(f"/api/v1/assemblies/{job_id}/input/").json()
    plain = agent_api.get(f"/api/v1/assemblies/{job_id}/").json()
    assert "manifest" not in plain and "input" not in plain
    assert {k: v for k, v in body.items() if k not in ("manifest", "input")} == plain


def test_a_blocked_job_includes_its_manifest_and_no_input(agent_api, published_policy, submit, example_blocked_request):
    job_id = submit(agent_api, example_blocked_request).json()["id"]
    body = agent_api.get(f"/api/v1/assemblies/{job_id}/?include=manifest,input").json()
    assert body["status"] == "blocked" and body["manifest"]["assembly"]["status"] == "blocked" and body["input"] is None


@pytest.mark.parametrize("wait", ["soon", "-1", "nan", "inf", "1e400", ""])
def test_a_bad_wait_is_a_400_naming_wait(agent_api, published_policy, submit, example_request, wait):
    job_id = submit(agent_api, example_request).json()["id"]
    response = agent_api.get(f"/api/v1/assemblies/{job_id}/", {"wait": wait})
    assert response.status_code == 400
    assert response.json()["errors"][0].startswith("wait: expected a number of seconds from 0 to 30")


def test_a_wait_beyond_the_longest_is_clamped_not_refused(agent_api, published_policy, submit, example_request):
    job_id = submit(agent_api, example_request).json()["id"]
    response = agent_api.get(f"/api/v1/assemblies/{job_id}/?wait=3600")
    assert response.status_code == 200 and response.json()["status"] == "ready"


def test_an_unknown_include_is_a_400_naming_include(agent_api, published_policy, submit, example_request):
    job_id = submit(agent_api, example_request).json()["id"]
    response = agent_api.get(f"/api/v1/assemblies/{job_id}/?include=manifest,request")
    assert response.status_code == 400
    assert response.json()["errors"] == ["include: expected a comma-separated list of manifest, input, got 'request'"]


def test_the_long_poll_of_another_tenants_job_is_not_found(outsider_api, agent_api, published_policy, submit, example_request):
    job_id = submit(agent_api, example_request).json()["id"]
    assert outsider_api.get(f"/api/v1/assemblies/{job_id}/?wait=5&include=manifest").status_code == 404
