"""Shared pytest configuration: service fixtures live in tests/service_fixtures.py (see its docstring).

Nothing here touches the database at import or autouse time, so tests/engine/ runs without one.

Tests marked `postgres_only` exercise PostgreSQL's concurrency (row locks, many connections at
once); on another database they are deselected with a one-line report rather than skipped, and
CI's PostgreSQL pass (`DATABASE_URL=postgres://...`) runs them.
"""

import pytest

pytest_plugins = ["tests.service_fixtures"]

# Django's production hasher (PBKDF2, a million rounds) costs ~0.3 s per password set or checked,
# by design; the dashboard fixtures set three passwords per test and log in. The tests check who
# may log in, not the hash's strength, so they use a fast hasher (a test of `check --deploy`
# runs in a subprocess with the production settings).
FAST_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    settings.PASSWORD_HASHERS = FAST_HASHERS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from django.conf import settings

    vendor = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    if vendor == "postgresql":
        return
    deselected = [item for item in items if item.get_closest_marker("postgres_only")]
    if not deselected:
        return
    items[:] = [item for item in items if not item.get_closest_marker("postgres_only")]
    config.hook.pytest_deselected(items=deselected)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"postgres_only: {len(deselected)} test(s) deselected on {vendor}; they run with DATABASE_URL=postgres://..."
        )


@pytest.fixture(autouse=True)
def _fresh_throttle_counts() -> None:
    """Each test starts with no API throttle history (user ids repeat across tests).

    Only the in-process cache is cleared: with REDIS_URL set the counts live in that Redis, which
    a test run must not flush.
    """
    from django.core.cache import caches
    from django.core.cache.backends.locmem import LocMemCache

    cache = caches["throttle"]
    if isinstance(cache, LocMemCache):
        cache.clear()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, with stray sessions ended before it is dropped.

    Live-worker tests SIGKILL Celery workers; PostgreSQL may notice a dead client's socket only
    after pytest-django tries to drop the test database ("is being accessed by other users"),
    which leaves it behind. On PostgreSQL, end every other session on the test database first.
    """
    yield
    with django_db_blocker.unblock():
        from django.db import connection

        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
