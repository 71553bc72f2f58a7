"""The agent token throttle (`ctxeng.server.rest.AgentTokenThrottle`): a sliding window per token
owner, in this process without REDIS_URL; with it, one window in Redis for every web process,
counted and checked in one step by a Lua script (two clients of one token here stand for two
gunicorn workers). A cache outage lets requests through (its docstring), so a script that failed on
every call would pass every request: these tests would see it. (Until 2026-12-08 the in-process
tests were in tests/service/test_deploy.py, which mutation's selection leaves out whole.)"""

from __future__ import annotations

import uuid

from rest_framework.test import APIClient


def test_an_agent_token_over_its_rate_gets_429_with_retry_after(settings, agent_api, reviewer_api, published_policy):
    settings.CTXENG_THROTTLE_AGENT = "3/min"
    assert [agent_api.get("/api/v1/policies/").status_code for _ in range(3)] == [200, 200, 200]
    throttled = agent_api.get("/api/v1/policies/")
    assert throttled.status_code == 429
    assert throttled.json()["errors"][0].startswith("Request was throttled")
    assert int(throttled["Retry-After"]) > 0
    assert reviewer_api.get("/api/v1/policies/").status_code == 200  # counted per token owner


def test_session_users_of_the_dashboard_are_not_throttled_as_agents(settings, client, agent_user, published_policy):
    settings.CTXENG_THROTTLE_AGENT = "1/min"
    client.force_login(agent_user)
    assert [client.get("/api/v1/policies/").status_code for _ in range(3)] == [200, 200, 200]


def _redis_throttle(settings, redis_url, rate):
    settings.CACHES = {**settings.CACHES, "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url,
        "KEY_PREFIX": f"agent-throttle-test-{uuid.uuid4().hex}"}}
    settings.CTXENG_THROTTLE_AGENT = rate


def test_a_token_over_its_rate_is_refused_in_every_process_with_the_window_left(
        settings, redis_url, agent_api, agent_user, reviewer_api, published_policy):
    from rest_framework.authtoken.models import Token

    _redis_throttle(settings, redis_url, "3/min")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get(user=agent_user).key}")
    assert [c.get("/api/v1/policies/").status_code for c in (agent_api, other, agent_api)] == [200, 200, 200]
    for client in (other, agent_api):
        throttled = client.get("/api/v1/policies/")
        assert throttled.status_code == 429
        assert throttled.json()["errors"][0].startswith("Request was throttled")
        assert 0 < int(throttled["Retry-After"]) <= 60
    assert reviewer_api.get("/api/v1/policies/").status_code == 200  # counted per token owner


def test_a_refused_request_takes_no_place_in_the_window(settings, redis_url, agent_api, published_policy):
    import redis

    _redis_throttle(settings, redis_url, "2/min")
    assert [agent_api.get("/api/v1/policies/").status_code for _ in range(5)] == [200, 200, 429, 429, 429]
    store = redis.Redis.from_url(redis_url)
    keys = store.keys(f"{settings.CACHES['throttle']['KEY_PREFIX']}*")
    assert len(keys) == 1
    assert store.zcard(keys[0]) == 2  # the two allowed, not the three refused
