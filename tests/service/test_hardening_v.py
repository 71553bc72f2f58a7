"""Hardening V (issue 51): what the attack on the production layout found open.

N1. Login limits that protect users: a flood of wrong passwords from eight addresses, against
    other usernames or against the user by name, never refuses a right-password login from an
    address the user logged in from before, and a user it does not name logs in from a new
    address too; two people logging in one after the other are both let in. The counts live in
    Redis (the production throttle storage) and axes' lockouts in the database, as in production;
    the windows' clock is held still, so nothing depends on how fast the test runs.
"""

from __future__ import annotations

import uuid

import pytest

# The production defaults (ctxeng/server/settings.py; docs/production.md), which tests/conftest.py
# turns off for every other test.
DEFAULT_RATES = {"CTXENG_LOGIN_RATE_PER_ADDRESS": "10/min", "CTXENG_LOGIN_RATE_PER_USERNAME": "10/min",
                 "CTXENG_LOGIN_RATE_TOTAL": "300/min"}
PASSWORD = "a-right-password-9"
FLOOD = [f"192.0.2.{i}" for i in range(1, 9)]  # the attacker's eight addresses
HOME = "198.51.100.10"  # where alice logged in before
NEW = "198.51.100.77"  # an address no one logged in from


@pytest.fixture
def login_limits(db, settings, redis_url, monkeypatch):
    """The default rates, counted in a real Redis (a key prefix of this test's own), the windows'
    clock held still."""
    import ctxeng.server.rate_limits

    settings.CACHES = {**settings.CACHES, "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url,
        "KEY_PREFIX": f"login-v-{uuid.uuid4().hex}"}}
    for name, rate in DEFAULT_RATES.items():
        setattr(settings, name, rate)
    monkeypatch.setattr(ctxeng.server.rate_limits.time, "time", lambda: 1_000_000.0)


@pytest.fixture
def people(db):
    from django.contrib.auth import get_user_model

    return {name: get_user_model().objects.create_user(username=name, password=PASSWORD) for name in ("alice", "bob")}


def attempt(client, username: str, password: str, address: str):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def logs_in(client, username: str, address: str) -> int:
    """A right-password login's status (302: in), signed out again after."""
    status = attempt(client, username, PASSWORD, address).status_code
    client.post("/logout/")
    return status


def flood(client, usernames) -> list[int]:
    """Wrong passwords from each of the eight addresses, naming `usernames(n)`, until the address
    itself is refused (a fresh username answers 429: its window is full)."""
    statuses = []
    for address in FLOOD:
        for n in range(60):
            statuses.append(attempt(client, usernames(n), "wrong", address).status_code)
            if attempt(client, f"random-{uuid.uuid4().hex[:8]}", "wrong", address).status_code == 429:
                break
        else:
            raise AssertionError(f"{address} was never refused")
    return statuses


def test_a_flood_against_other_usernames_leaves_a_users_right_password_login_working(client, login_limits, people):
    assert logs_in(client, "alice", HOME) == 302  # HOME is known for alice from now on
    statuses = flood(client, lambda n: "bob")
    assert 429 in statuses  # bob, named, was refused (axes' pairs, then bob's own window)
    assert logs_in(client, "alice", HOME) == 302
    assert logs_in(client, "alice", NEW) == 302  # not named by the flood: a new address works too


def test_a_flood_naming_the_user_slows_new_addresses_but_not_one_she_logged_in_from(client, login_limits, people):
    assert logs_in(client, "alice", HOME) == 302
    flood(client, lambda n: "alice")
    refused = attempt(client, "alice", PASSWORD, NEW)
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1  # slowed: told when to come back
    assert "_auth_user_id" not in client.session
    assert logs_in(client, "alice", HOME) == 302
    assert logs_in(client, "bob", NEW) == 302  # the username's window is alice's alone


def test_a_known_address_is_still_held_to_its_own_rate(client, login_limits, people):
    """Known is no free pass: attempts from alice's own address count in its window (10 a
    minute), and wrong passwords there in axes' pair (5)."""
    statuses = [logs_in(client, "alice", HOME) for _ in range(11)]
    assert statuses == [302] * 10 + [429]
    assert [attempt(client, "bob", "wrong", "198.51.100.11").status_code for _ in range(6)] == [200] * 4 + [429] * 2


def test_two_people_logging_in_one_after_the_other_are_both_let_in(client, login_limits, people):
    assert logs_in(client, "alice", NEW) == 302
    assert logs_in(client, "bob", "198.51.100.78") == 302
    assert logs_in(client, "alice", "203.0.113.5") == 302 and logs_in(client, "bob", "203.0.113.5") == 302  # one office


def test_the_known_address_is_per_username(client, login_limits, people):
    """alice's address is no known address for bob: a flood naming bob slows bob there."""
    assert logs_in(client, "alice", HOME) == 302
    flood(client, lambda n: "bob")
    assert attempt(client, "bob", PASSWORD, HOME).status_code == 429
