"""Shared pytest configuration: service fixtures live in tests/service_fixtures.py (see its docstring).

Nothing here touches the database at import or autouse time, so tests/engine/ runs without one.

Tests marked `postgres_only` exercise PostgreSQL's concurrency (row locks, many connections at
once); on another database they are deselected with a one-line report rather than skipped, and
CI's PostgreSQL pass (`DATABASE_URL=postgres://...`) runs them.
"""

import json
import os

import pytest

pytest_plugins = ["tests.service_fixtures", "tests.otlp", "tests.layout", "tests.fuzz_coverage", "tests.service.slot_fixtures"]

# Django's production hasher (PBKDF2, a million rounds) costs ~0.3 s per password set or checked,
# by design; the dashboard fixtures set three passwords per test and log in. The tests check who
# may log in, not the hash's strength, so they use a fast hasher (a test of `check --deploy`
# runs in a subprocess with the production settings).
FAST_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    settings.PASSWORD_HASHERS = FAST_HASHERS
    # The login rates (ctxeng.server.login_throttle: 10 attempts/min per address and per username
    # by default) would refuse the dashboard tests' quick successive logins; their own tests set
    # them (tests/service/test_hardening_iv.py, test_hardening_v.py), and the production-layout
    # servers run with the defaults.
    settings.CTXENG_LOGIN_RATE_PER_ADDRESS = settings.CTXENG_LOGIN_RATE_PER_USERNAME = settings.CTXENG_LOGIN_RATE_TOTAL = ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _deselect_postgres_only(config, items)
    if "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", ""):
        items[:] = fastest_first(items, _mutmut_durations())
        return
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    items[:] = waiting_tests_first(items, workers)


def fastest_first(items: list, durations: dict[str, float], is_waiting=None) -> list:
    """The tests of one mutant's run (mutmut, `-x`), fastest first by the statistics run's times.

    mutmut stops at the first failing test, so a mutant is judged as soon as the cheapest test that
    kills it has run; a test with no recorded time goes after the timed ones, a test that waits (a
    Celery worker, a browser) last. Stable: equal times keep the collection order."""
    is_waiting = is_waiting or waits
    unknown = max(durations.values(), default=0.0) + 1.0
    return sorted(items, key=lambda item: (is_waiting(item), durations.get(item.nodeid, unknown)))


def _mutmut_durations() -> dict[str, float]:
    """Each test's duration from mutmut's statistics (the run's cwd is the workspace's mutants/)."""
    try:
        with open("mutmut-stats.json", encoding="utf-8") as stats:
            return dict(json.load(stats).get("duration_by_test", {}))
    except (OSError, ValueError):
        return {}


def waits(item: pytest.Item) -> bool:
    """A test that mostly waits: on a real Celery worker, a subprocess or a browser."""
    return item.get_closest_marker("slow") is not None or "start_worker" in getattr(item, "fixturenames", ())


def waiting_tests_first(items: list, workers: int, is_waiting=waits) -> list:
    """The tests in an order that keeps every pytest-xdist worker busy to the end.

    `make test` runs `--dist worksteal`: each worker starts with an equal run of consecutive tests,
    and a worker that runs out takes the back half of the longest queue. The tests that wait (a
    job's recovery alone waits about 50 s) go at the head of each worker's run, dealt in turn, so
    they start at once, overlap the CPU-bound tests of the other workers, and none is left to start
    near the end. The order changes nothing but when a test runs (every worker collects the same
    list, as pytest-xdist requires)."""
    waiting = [item for item in items if is_waiting(item)]
    rest = [item for item in items if not is_waiting(item)]
    if workers <= 1 or len(waiting) > len(items) // workers:
        return waiting + rest
    ordered, left = [], len(items)
    for worker in range(workers):
        size = left // (workers - worker)  # worksteal's first split of the pending tests
        left -= size
        heads = waiting[worker::workers]
        ordered += heads + rest[: size - len(heads)]
        del rest[: size - len(heads)]
    return ordered + rest


def _deselect_postgres_only(config: pytest.Config, items: list[pytest.Item]) -> None:
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
