"""Hardening IV (issue 40): what the attack on the production layout found in the service, each
refused or bounded with a test that failed before its fix.

3. a usage report with more cached than input tokens is a 400 naming `cached_tokens`; one for a
   blocked assembly a 409; one far from the assembly's estimate is stored and marked as not used
   for calibration (the calibration itself: tests/manifests/test_calibration.py).
6. login attempts are counted per client address and over every address before any password is
   hashed: beyond either rate, 429 with Retry-After and no hasher call.
9. a UTF-8 byte-order mark before a JSON body is a 400 naming it; `%YAML` / `%TAG` directives in a
   policy are refused at their line; TRACE through the app is its JSON 405 with Allow (through
   nginx: tests/service/test_production_layout.py).
"""

from __future__ import annotations

import json
import uuid

import pytest

URL = "/api/v1/assemblies/"


# --------------------------------------------------------------------------- 3. usage reports


def test_more_cached_than_input_tokens_is_a_400_naming_cached_tokens(published_policy, agent_api, submit, example_request):
    job_id = submit(agent_api, example_request).json()["id"]
    response = agent_api.post(f"{URL}{job_id}/usage/", {"input_tokens": 100, "cached_tokens": 101}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == ["cached_tokens: 101 is more than input_tokens 100 (the cached part is "
                                         "counted in the input)"]
    from manifests.models import UsageReport

    assert not UsageReport.objects.exists()


def test_usage_for_a_blocked_assembly_is_a_409_and_nothing_is_stored(
        published_policy, agent_api, submit, example_blocked_request):
    from manifests.models import UsageReport

    job = submit(agent_api, example_blocked_request).json()
    assert agent_api.get(job["url"]).json()["status"] == "blocked"
    response = agent_api.post(f"{URL}{job['id']}/usage/", {"input_tokens": 100}, format="json")
    assert response.status_code == 409 and "no model call was made with it" in response.json()["errors"][0]
    assert not UsageReport.objects.exists()


# (the actual count, from the estimate e; whether it is within 0.5..2 times e, by hand)
BAND_CASES = {"equal": (lambda e: e, True), "half": (lambda e: -(-e // 2), True), "double": (lambda e: 2 * e, True),
              "past double": (lambda e: 2 * e + 1, False), "below half": (lambda e: -(-e // 2) - 1, False),
              "int32 max": (lambda e: 2**31 - 1, False), "one": (lambda e: 1, False)}


@pytest.mark.parametrize("case", BAND_CASES)
def test_the_answer_says_whether_calibration_reads_the_report(published_policy, agent_api, submit, example_request, case):
    from manifests.models import Manifest, UsageReport

    actual, used = BAND_CASES[case]
    job_id = submit(agent_api, example_request).json()["id"]
    estimate = Manifest.objects.get(job_id=job_id).estimated_input_tokens
    response = agent_api.post(f"{URL}{job_id}/usage/", {"input_tokens": actual(estimate)}, format="json")
    assert response.status_code == 200
    assert response.json()["used_for_calibration"] is used
    assert UsageReport.objects.get(manifest__job_id=job_id).input_tokens == actual(estimate)  # stored either way


# --------------------------------------------------------------------------- 6. login flood


@pytest.fixture
def hashes(monkeypatch):
    """Counts the password hasher's runs: Django's model backend hashes the given password once
    per attempt, for an unknown username too (set_password, so timing does not tell)."""
    from django.contrib.auth.base_user import AbstractBaseUser

    calls = []
    for name in ("set_password", "check_password"):
        original = getattr(AbstractBaseUser, name)

        def counted(self, raw, _original=original, _name=name):
            calls.append(_name)
            return _original(self, raw)

        monkeypatch.setattr(AbstractBaseUser, name, counted)
    return calls


@pytest.fixture
def clock(monkeypatch):
    """The rate windows' clock, moved by hand (no test waits for a window to pass)."""
    import ctxeng.server.rate_limits

    now = [1_000_000.0]
    monkeypatch.setattr(ctxeng.server.rate_limits.time, "time", lambda: now[0])
    return now


def login(client, address: str = "203.0.113.7", username: str | None = None, path: str = "/login/", **meta):
    return client.post(path, {"username": username or f"random-{uuid.uuid4().hex[:8]}", "password": "guess"},
                       REMOTE_ADDR=address, **meta)


def test_login_attempts_beyond_the_per_address_rate_are_refused_before_hashing(db, client, settings, hashes, clock):
    settings.CTXENG_LOGIN_RATE_PER_ADDRESS, settings.CTXENG_LOGIN_RATE_TOTAL = "3/min", "100/min"
    assert [login(client).status_code for _ in range(3)] == [200, 200, 200]  # the form's "did not match"
    assert len(hashes) == 3
    refused = login(client)
    assert refused.status_code == 429 and refused["Retry-After"] == "60"
    assert "Too many login attempts" in refused.content.decode() and "No password was checked" in refused.content.decode()
    assert len(hashes) == 3
    assert login(client, address="198.51.100.1").status_code == 200  # another address has its own count
    clock[0] += 30
    assert login(client)["Retry-After"] == "30"
    clock[0] += 30.5
    assert login(client).status_code == 200  # the first attempt has left the window
    assert len(hashes) == 5


def test_login_attempts_from_everywhere_are_capped_overall(db, client, settings, hashes, clock):
    settings.CTXENG_LOGIN_RATE_PER_ADDRESS, settings.CTXENG_LOGIN_RATE_TOTAL = "100/min", "4/min"
    assert [login(client, address=f"192.0.2.{i}").status_code for i in range(4)] == [200] * 4
    refused = login(client, address="192.0.2.200")
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert len(hashes) == 4


def test_a_refused_address_does_not_use_up_the_total(db, client, settings, hashes, clock):
    """One address over its own rate is refused on its count, so the others keep the total."""
    settings.CTXENG_LOGIN_RATE_PER_ADDRESS, settings.CTXENG_LOGIN_RATE_TOTAL = "2/min", "4/min"
    assert [login(client).status_code for _ in range(10)] == [200, 200] + [429] * 8
    assert [login(client, address=f"192.0.2.{i}").status_code for i in range(3)] == [200, 200, 429]


def test_an_attempt_the_total_refuses_does_not_count_against_its_address(db, client, settings, hashes, clock):
    settings.CTXENG_LOGIN_RATE_PER_ADDRESS, settings.CTXENG_LOGIN_RATE_TOTAL = "2/min", "3/min"
    assert [login(client, address=f"192.0.2.{i}").status_code for i in range(3)] == [200] * 3
    clock[0] += 30
    assert [login(client).status_code for _ in range(5)] == [429] * 5  # the total is spent
    clock[0] += 30.5  # the three have left the total's window; nothing of 203.0.113.7 was counted
    assert [login(client).status_code for _ in range(3)] == [200, 200, 429]
    assert len(hashes) == 5


def test_the_admin_login_is_counted_and_a_get_is_not(db, client, settings, hashes, clock):
    settings.CTXENG_LOGIN_RATE_PER_ADDRESS, settings.CTXENG_LOGIN_RATE_TOTAL = "2/min", "100/min"
    for _ in range(5):
        assert client.get("/login/", REMOTE_ADDR="203.0.113.7").status_code == 200
    assert login(client, path="/admin/login/").status_code == 200
    assert login(client).status_code == 200
    assert login(client, path="/admin/login/").status_code == 429
    assert len(hashes) == 2


def test_behind_a_proxy_the_address_is_the_one_it_appended(db, client, settings, hashes, clock):
    """With CTXENG_PROXY_HOPS=1 (nginx appends $remote_addr), a client cannot dodge its count by
    writing other addresses first into X-Forwarded-For; without it the header is not read."""
    settings.CTXENG_LOGIN_RATE_PER_ADDRESS, settings.CTXENG_LOGIN_RATE_TOTAL = "2/min", "100/min"
    settings.CTXENG_PROXY_HOPS = 1
    statuses = [login(client, address="127.0.0.1", HTTP_X_FORWARDED_FOR=f"10.9.8.{i}, 203.0.113.7").status_code
                for i in range(3)]
    assert statuses == [200, 200, 429]
    assert login(client, address="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.8").status_code == 200
    settings.CTXENG_PROXY_HOPS = 0
    assert login(client, address="198.51.100.3", HTTP_X_FORWARDED_FOR="203.0.113.7").status_code == 200


def test_the_login_rates_are_shared_through_redis(transactional_db, client, settings, redis_url, hashes):
    """With REDIS_URL the counts live in Redis, so every gunicorn worker (a second client here,
    as a second process would) sees the same window."""
    from django.test import Client

    settings.CACHES = {**settings.CACHES, "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url,
        "KEY_PREFIX": f"login-test-{uuid.uuid4().hex}"}}
    settings.CTXENG_LOGIN_RATE_PER_ADDRESS, settings.CTXENG_LOGIN_RATE_TOTAL = "3/min", "100/min"
    other = Client()
    assert [login(c).status_code for c in (client, other, client)] == [200, 200, 200]
    assert login(other).status_code == 429 and len(hashes) == 3


# --------------------------------------------------------------------------- 9. smaller


def test_a_byte_order_mark_before_a_json_body_is_a_400(agent_api, published_policy, example_request):
    from manifests.models import AssemblyJob

    body = b"\xef\xbb\xbf" + json.dumps(example_request).encode()
    response = agent_api.post(URL, body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == ["body: starts with a UTF-8 byte-order mark (EF BB BF), which JSON does not "
                                         "allow; send the JSON without it"]
    assert not AssemblyJob.objects.exists()


@pytest.mark.parametrize("directive", ["%YAML 1.1", "%YAML 1.2", "%TAG !e! tag:example.com,2000:"])
def test_a_yaml_directive_in_a_policy_is_refused_at_its_line(editor_user, example_policy_text, directive):
    from ctxeng.accounts.models import Tenant
    from ctxeng.engine import InvalidInput
    from policies.models import Policy
    from policies.services import policy_import

    with pytest.raises(InvalidInput) as refused:
        policy_import(tenant=Tenant.objects.get(slug="tenant-x"), text=f"{directive}\n---\n{example_policy_text}",
                      user=editor_user, publish=False)
    assert refused.value.errors == ["body: line 1: YAML directives (%YAML, %TAG) are not accepted; remove the line"]
    assert not Policy.objects.exists()


def test_a_trace_to_the_app_is_a_json_405_with_allow(agent_api):
    response = agent_api.generic("TRACE", URL)
    assert response.status_code == 405 and response["Content-Type"] == "application/json"
    assert "GET" in response["Allow"] and "TRACE" not in response["Allow"]


def test_the_openapi_schema_declares_the_id_rule_the_server_holds(db, client):
    """Every character of the Basic Multilingual Plane (surrogates aside) inside an id: the
    schema's pattern admits it exactly when the server's rule (id_problem) does."""
    import re

    from ctxeng.engine.limits import MAX_ID, MAX_ITEM_ID, id_problem

    schema = client.get("/api/schema/?format=json").json()
    params = [p for item in schema["paths"].values() for op in item.values() if isinstance(op, dict)
              for p in op.get("parameters", [])]
    runs = [p["schema"] for p in params if p["name"] == "run_id"]
    items = [p["schema"] for p in params if p["name"] == "item_id"]
    assert runs and items and {s["maxLength"] for s in runs} == {MAX_ID} and {s["maxLength"] for s in items} == {MAX_ITEM_ID}
    pattern = re.compile(runs[0]["pattern"])
    for code in range(0x10000):
        if not 0xD800 <= code <= 0xDFFF:
            value = f"a{chr(code)}b"
            assert (pattern.match(value) is not None) == (id_problem(value) is None), hex(code)
    assert pattern.match(".") is None and pattern.match("..") is None and pattern.match("run-42/step.3 ü")
    request = schema["components"]["schemas"]["AssemblyRequest"]["properties"]
    assert request["run_id"]["pattern"] == request["step_id"]["pattern"] == runs[0]["pattern"]
