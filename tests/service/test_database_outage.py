"""A database outage is a 503 with Retry-After, never a 500 (issue 30, finding 10).

Under `pg_terminate_backend`, submits got 500 OperationalError; a retry with the same
Idempotency-Key then succeeded. The outage here is real: the connection is pointed at a database
that cannot be opened (SQLite: a file in a directory that does not exist; PostgreSQL: a port
nothing listens on), so Django raises the driver's own OperationalError. Then the database comes
back and the same request, same key, is accepted once.
"""

from __future__ import annotations

import socket
from contextlib import contextmanager

import pytest
from django.db import connection

from manifests.models import AssemblyJob

URL = "/api/v1/assemblies/"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # released on close: nothing listens there


@contextmanager
def database_down(tmp_path, monkeypatch):
    """Every new connection fails until the block ends (the current one is closed first)."""
    connection.close()
    with monkeypatch.context() as patch:
        if connection.vendor == "sqlite":
            patch.setitem(connection.settings_dict, "NAME", str(tmp_path / "missing-dir" / "db.sqlite3"))
        else:
            patch.setitem(connection.settings_dict, "HOST", "127.0.0.1")
            patch.setitem(connection.settings_dict, "PORT", str(_closed_port()))
        try:
            yield
        finally:
            connection.close()
    connection.close()


@pytest.fixture
def outage(tmp_path, monkeypatch):
    return lambda: database_down(tmp_path, monkeypatch)


def test_a_submit_during_an_outage_is_a_503_with_retry_after_and_the_retry_is_accepted_once(
        transactional_db, agent_api, published_policy, example_request, outage, inline_jobs, settings):
    with outage():
        response = agent_api.post(URL, example_request, format="json", HTTP_IDEMPOTENCY_KEY="outage-1")
    assert response.status_code == 503
    assert response["Retry-After"] == str(settings.CTXENG_OUTAGE_RETRY_AFTER_SECONDS)
    assert response.json() == {"errors": [
        f"the database is unavailable; retry in {settings.CTXENG_OUTAGE_RETRY_AFTER_SECONDS} s "
        "(the request was not applied)"]}
    assert AssemblyJob.objects.count() == 0

    retried = agent_api.post(URL, example_request, format="json", HTTP_IDEMPOTENCY_KEY="outage-1")
    again = agent_api.post(URL, example_request, format="json", HTTP_IDEMPOTENCY_KEY="outage-1")
    assert retried.status_code == 202 and again.status_code in (200, 202)
    assert again.json()["id"] == retried.json()["id"]
    assert AssemblyJob.objects.count() == 1


def test_a_read_during_an_outage_is_a_503_too(transactional_db, agent_api, outage):
    with outage():
        response = agent_api.get(URL)
    assert response.status_code == 503 and "Retry-After" in response
    assert response.json()["errors"][0].startswith("the database is unavailable")


def test_a_dashboard_page_during_an_outage_is_the_503_page(transactional_db, client, agent_user, outage, settings):
    """The session middleware reads the database before any view: Django's handler500 path."""
    client.force_login(agent_user)
    client.raise_request_exception = False  # as a server does: Django's handler answers
    with outage():
        response = client.get("/")
    assert response.status_code == 503
    assert response["Retry-After"] == str(settings.CTXENG_OUTAGE_RETRY_AFTER_SECONDS)
    assert ("The database cannot be reached right now; nothing was changed. Try again in "
            f"{settings.CTXENG_OUTAGE_RETRY_AFTER_SECONDS} seconds.") in response.content.decode()


def test_an_api_url_whose_middleware_fails_during_an_outage_answers_json(transactional_db, client, agent_user,
                                                                         outage):
    """A session-authenticated API call: the session is read in middleware, before DRF runs."""
    client.force_login(agent_user)
    client.raise_request_exception = False  # as a server does: Django's handler answers
    with outage():
        response = client.get(URL)
    assert response.status_code == 503 and response["Content-Type"] == "application/json"
    assert response.json()["errors"][0].startswith("the database is unavailable")


# --------------------------------------------------------------------------- issue 40, finding 7
# A 503 says "the request was not applied". Under killed connections 2 of 21 submits got it after
# their job was committed: a database that fails after the commit (the answer reads the job back),
# or a commit whose connection breaks once the database has applied it, must not say so.


def test_a_database_lost_after_the_commit_answers_the_job_not_a_503(
        transactional_db, agent_api, published_policy, example_request, tmp_path, monkeypatch, settings, caplog):
    import logging

    from manifests import api

    settings.CTXENG_JOBS_INLINE = False  # queued: nothing runs the job in this process
    monkeypatch.setattr("manifests.services.assembly_job_enqueue", lambda **kwargs: None)
    submit = api.services.assembly_job_submit

    def then_the_database_goes(**kwargs):
        answer = submit(**kwargs)
        connection.close()
        monkeypatch.setitem(connection.settings_dict, "NAME", str(tmp_path / "missing-dir" / "db.sqlite3") if connection.vendor == "sqlite" else "ctxeng_no_such_database")
        return answer

    monkeypatch.setattr(api.services, "assembly_job_submit", then_the_database_goes)
    name = connection.settings_dict["NAME"]
    response = agent_api.post(URL, example_request, format="json", HTTP_IDEMPOTENCY_KEY="after-commit")
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "NAME", name)
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "queued"
    assert list(AssemblyJob.objects.values_list("id", flat=True)) == [__import__("uuid").UUID(response.json()["id"])]
    # The operator's log names the job answered without its status read back (seed 349366).
    assert [r.getMessage() for r in caplog.records if r.name == "manifests.api" and r.levelno == logging.WARNING] == [
        f"database lost after assembly {response.json()['id']} was committed; answering it as saved"]


def _commit_then(fail_after: bool, monkeypatch):
    """The connection's commit raises as a dropped connection does: after the database applied
    it (`fail_after`), or before (nothing applied)."""
    from django.db import OperationalError

    real = connection.commit

    def commit():
        if fail_after:
            real()
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(connection, "commit", commit)


def test_a_commit_whose_connection_breaks_after_it_applied_answers_the_job(
        transactional_db, agent_api, published_policy, example_request, monkeypatch, settings):
    settings.CTXENG_JOBS_INLINE = False
    enqueued = []
    monkeypatch.setattr("manifests.services.assembly_job_enqueue", lambda **kwargs: enqueued.append(kwargs["job_id"]))
    with monkeypatch.context() as patch:
        _commit_then(True, patch)
        response = agent_api.post(URL, example_request, format="json", HTTP_IDEMPOTENCY_KEY="commit-applied")
    assert response.status_code == 202, response.content
    job = AssemblyJob.objects.get()
    assert response.json()["id"] == str(job.id) and enqueued == [job.id]  # on_commit never ran: enqueued here


def test_a_commit_that_never_applied_is_the_503_and_nothing_exists(
        transactional_db, agent_api, published_policy, example_request, monkeypatch, settings):
    settings.CTXENG_JOBS_INLINE = False
    monkeypatch.setattr("manifests.services.assembly_job_enqueue", lambda **kwargs: None)
    with monkeypatch.context() as patch:
        _commit_then(False, patch)
        response = agent_api.post(URL, example_request, format="json", HTTP_IDEMPOTENCY_KEY="commit-lost")
    assert response.status_code == 503 and "(the request was not applied)" in response.json()["errors"][0]
    assert not AssemblyJob.objects.exists()


def test_a_commit_whose_outcome_cannot_be_read_is_not_a_503(
        transactional_db, agent_api, published_policy, example_request, monkeypatch, settings, tmp_path):
    """The connection broke in the commit and the database stays down: nobody can tell whether the
    job was saved, so the answer says that (504, with Retry-After), never "not applied" and never a 500."""
    from django.db import OperationalError

    settings.CTXENG_JOBS_INLINE = False
    monkeypatch.setattr("manifests.services.assembly_job_enqueue", lambda **kwargs: None)
    name = connection.settings_dict["NAME"]
    real = connection.commit

    def commit_then_down():
        real()
        monkeypatch.setitem(connection.settings_dict, "NAME", str(tmp_path / "missing-dir" / "db.sqlite3") if connection.vendor == "sqlite" else "ctxeng_no_such_database")
        raise OperationalError("server closed the connection unexpectedly")

    with monkeypatch.context() as patch:
        patch.setattr(connection, "commit", commit_then_down)
        response = agent_api.post(URL, example_request, format="json", HTTP_IDEMPOTENCY_KEY="commit-unknown")
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "NAME", name)
    assert response.status_code == 504 and response["Retry-After"] == str(settings.CTXENG_OUTAGE_RETRY_AFTER_SECONDS)
    assert "may have been saved" in response.json()["errors"][0] and "same Idempotency-Key" in response.json()["errors"][0]
    assert AssemblyJob.objects.count() == 1  # it was: a retry with the key returns it
    again = agent_api.post(URL, example_request, format="json", HTTP_IDEMPOTENCY_KEY="commit-unknown")
    assert again.status_code == 200 and AssemblyJob.objects.count() == 1
