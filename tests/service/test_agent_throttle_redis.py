"""The agent token throttle with REDIS_URL (`AgentTokenThrottle._allow_in_redis`): one sliding
window in Redis for every web process, counted and checked in one step by a Lua script. Two
clients of one token here stand for two gunicorn workers. (The in-process window is tested in
tests/service/test_deploy.py.) A cache outage lets requests through (its docstring), so a
script that failed on every call would pass every request: these tests would see it."""

from __future__ import annotations

import uuid

from rest_framework.test import APIClient


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
    prefix = settings.CACHES["throttle"]["KEY_PREFIX"]
    keys = redis.Redis.from_url(redis_url).keys(f"{prefix}*")
    assert len(keys) == 1
    assert redis.Redis.from_url(redis_url).zcard(keys[0]) == 2  # the two allowed, not the three refused
