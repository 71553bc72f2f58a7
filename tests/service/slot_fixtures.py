"""Fixtures of the tests of `ctxeng.server.rate_limits`' slot counters (long-poll caps, large
requests; a plugin of tests/conftest.py). A module whose tests share the in-process counters
starts each test with them empty: `pytestmark = pytest.mark.usefixtures("fresh_local_slots")`."""

from __future__ import annotations

import uuid

import pytest

from ctxeng.server import rate_limits


@pytest.fixture
def fresh_local_slots():
    rate_limits._local_slots.clear()  # noqa: SLF001 - the in-process counters outlive a test
    yield
    rate_limits._local_slots.clear()  # noqa: SLF001


@pytest.fixture(params=["process", "redis"])
def counter_cache(request, settings):
    """The "throttle" cache the counters live in: this process's memory, or a real Redis."""
    if request.param == "redis":
        settings.CACHES = {**settings.CACHES, "throttle": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": request.getfixturevalue("redis_url"), "KEY_PREFIX": f"slots-{uuid.uuid4().hex}"}}
    return request.param
