"""Login throttling (django-axes): after CTXENG_LOGIN_FAILURE_LIMIT (5) wrong passwords for one
username from one address, that pair gets the lockout page (429, under the CSP) even with the right
password, and the lockout is one audit event. Token auth and test logins are unaffected."""

from __future__ import annotations

from ctxeng.audit.models import AuditAction, AuditEvent

from .conftest import PASSWORD

LIMIT = 5


def attempt(client, password: str, username: str = "reviewer", address: str = "203.0.113.7"):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_wrong_passwords_below_the_limit_show_the_form_error(client, example):
    for _ in range(LIMIT - 1):
        response = attempt(client, "wrong")
        assert response.status_code == 200 and "did not match" in response.content.decode()
    assert attempt(client, PASSWORD).status_code == 302


def test_the_limit_locks_the_pair_out_even_with_the_right_password(client, example):
    for _ in range(LIMIT):
        attempt(client, "wrong")
    response = attempt(client, PASSWORD)
    assert response.status_code == 429
    body = response.content.decode()
    assert "Too many failed logins" in body and "After 5 wrong passwords" in body
    assert "script-src 'self'" in response["Content-Security-Policy"]
    assert "_auth_user_id" not in client.session


def test_a_lockout_is_one_audit_event_naming_the_user_and_address(client, example):
    for _ in range(LIMIT + 3):
        attempt(client, "wrong")
    attempt(client, PASSWORD)
    (event,) = AuditEvent.objects.filter(action=AuditAction.LOGIN_LOCKED_OUT)
    assert event.subject == "reviewer" and event.actor_name == "ip:203.0.113.7" and event.actor is None
    assert event.note == "too many failed logins from 203.0.113.7"


def test_another_address_or_another_user_is_not_locked_out(client, example):
    for _ in range(LIMIT):
        attempt(client, "wrong")
    assert attempt(client, PASSWORD, address="198.51.100.1").status_code == 302
    client.post("/logout/")
    assert attempt(client, PASSWORD, username="owner").status_code == 302


def test_a_success_resets_the_count(client, example):
    for _ in range(LIMIT - 1):
        attempt(client, "wrong")
    assert attempt(client, PASSWORD).status_code == 302
    client.post("/logout/")
    for _ in range(LIMIT - 1):
        attempt(client, "wrong")
    assert attempt(client, PASSWORD).status_code == 302


def test_a_locked_out_users_token_and_test_logins_still_work(client, api, example):
    for _ in range(LIMIT):
        attempt(client, "wrong")
    assert api(example["reviewer"]).get("/api/v1/policies/").status_code == 200
    assert client.login(username="reviewer", password=PASSWORD)
    assert client.get("/").status_code == 200
    client.logout()
    client.force_login(example["reviewer"])
    assert client.get("/").status_code == 200


def test_each_test_starts_with_no_failed_attempts(client, example):
    """Runs after the lockout tests above: axes' counts live in the test database, rolled back per test."""
    assert attempt(client, PASSWORD).status_code == 302
