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


def test_a_dashboard_page_during_an_outage_is_the_503_page(transactional_db, client, agent_user, outage):
    """The session middleware reads the database before any view: Django's handler500 path."""
    client.force_login(agent_user)
    client.raise_request_exception = False  # as a server does: Django's handler answers
    with outage():
        response = client.get("/")
    assert response.status_code == 503 and "Retry-After" in response
    assert "The database cannot be reached right now" in response.content.decode()


def test_an_api_url_whose_middleware_fails_during_an_outage_answers_json(transactional_db, client, agent_user,
                                                                         outage):
    """A session-authenticated API call: the session is read in middleware, before DRF runs."""
    client.force_login(agent_user)
    client.raise_request_exception = False  # as a server does: Django's handler answers
    with outage():
        response = client.get(URL)
    assert response.status_code == 503 and response["Content-Type"] == "application/json"
    assert response.json()["errors"][0].startswith("the database is unavailable")
