"""One rate limit for every web process (issue 30, finding 9).

700 GETs from one token on 8 threads gave 634 x 200 against a limit of 600: DRF's throttle reads
the request history, appends and writes it back, so two processes counting at once both count
from the same history. With REDIS_URL the count is one atomic step in Redis. Here: a real
gunicorn with 2 worker processes sharing a real Redis, 8 client threads. The window is an hour,
not a minute, so a slow machine cannot let old requests age out mid-test: exactly the limit is
allowed, whatever the interleaving.
"""

from __future__ import annotations

import http.client
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

LIMIT = 600
REQUESTS = 700


@pytest.fixture
def agent_token(transactional_db, agent_user) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.get_or_create(user=agent_user)[0].key


def get_status(port: int, token: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", "/api/v1/policies/", headers={"Authorization": f"Token {token}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_two_web_processes_on_one_redis_allow_exactly_the_limit(gunicorn, redis_url, agent_token):
    import redis

    store = redis.Redis.from_url(redis_url)
    for key in store.scan_iter("*throttle*"):  # counts of earlier tests in this session
        store.delete(key)
    app = gunicorn(workers=2, REDIS_URL=redis_url, CTXENG_THROTTLE_AGENT=f"{LIMIT}/hour")
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = Counter(pool.map(lambda _: get_status(app.port, agent_token), range(REQUESTS)))
    assert statuses == {200: LIMIT, 429: REQUESTS - LIMIT}


def test_threads_of_one_process_allow_exactly_the_limit(transactional_db, settings, agent_api, published_policy):
    """Without Redis (one process), the in-process count is one step too: 8 threads, one limit."""
    settings.CTXENG_THROTTLE_AGENT = "60/hour"
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = Counter(pool.map(lambda _: agent_api.get("/api/v1/policies/").status_code, range(90)))
    assert statuses == {200: 60, 429: 30}
