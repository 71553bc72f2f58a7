"""A Celery worker checks the database and the broker at start, and refuses to run without them.

Before, a worker with a wrong DATABASE_URL logged "ready", took jobs and failed each of them (they
then waited for the sweep). Each test starts a real `celery -A ctxeng worker` subprocess and waits
(generously, never timed) for it to exit: non-zero, one line naming what is unreachable, no
password, and never "ready".
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.service_fixtures import REPO, database_url_for_subprocess

PASSWORD = "s3cret-Pa55"  # noqa: S105 - a made-up credential the output must not contain
WAIT = 180


def run_worker(tmp_path, **env_overrides: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CTXENG_TEST_") and k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DJANGO_SETTINGS_MODULE="ctxeng.server.settings", PYTHONUNBUFFERED="1", **env_overrides)
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ctxeng", "worker", "--pool", "prefork", "--concurrency", "1",
             "--loglevel", "INFO", "--without-gossip", "--without-mingle"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            code = process.wait(WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(10)
            pytest.fail(f"the worker was still running after {WAIT} s:\n{log.read_text()}")
    return code, log.read_text(errors="replace")


def test_a_worker_with_an_unreachable_database_exits_naming_it(tmp_path, redis_url):
    code, log = run_worker(tmp_path, DATABASE_URL=f"postgres://ctxeng:{PASSWORD}@127.0.0.1:9/ctxeng",
                           REDIS_URL=redis_url)
    assert code != 0
    assert "ctxeng worker cannot start: the database (postgresql 127.0.0.1:9/ctxeng) is unreachable" in log
    assert PASSWORD not in log and " ready." not in log


def test_a_worker_with_an_unreachable_broker_exits_naming_it(tmp_path, transactional_db):
    code, log = run_worker(tmp_path, DATABASE_URL=database_url_for_subprocess(),
                           REDIS_URL=f"redis://:{PASSWORD}@127.0.0.1:9/0")
    assert code != 0
    assert "ctxeng worker cannot start: the broker (redis://:**@127.0.0.1:9/0) is unreachable" in log
    assert PASSWORD not in log and " ready." not in log


def test_a_worker_on_a_database_without_migrations_exits_saying_so(tmp_path, redis_url):
    code, log = run_worker(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path / 'empty.sqlite3'}", REDIS_URL=redis_url)
    assert code != 0
    assert "unapplied migration(s)" in log and "run `manage.py migrate`" in log and " ready." not in log


def test_a_worker_without_redis_url_exits_saying_jobs_run_in_process(tmp_path, transactional_db):
    code, log = run_worker(tmp_path, DATABASE_URL=database_url_for_subprocess())
    assert code != 0
    assert "REDIS_URL is not set" in log and " ready." not in log


def test_a_correctly_configured_worker_still_becomes_ready(start_worker):
    worker = start_worker()  # waits for " ready." (fails the test if the worker exits)
    assert "cannot start" not in worker.log()


def test_the_celery_app_module_imports_no_django_app():
    """ctxeng.server.celery imports nothing of manifests or policies, so tasks -> celery is no cycle."""
    code = ("import sys, ctxeng.server.celery; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('manifests', 'policies')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": "ctxeng.server.settings"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
