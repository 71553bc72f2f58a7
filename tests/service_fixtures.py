"""Shared fixtures for the service tests (policies, manifests, API, worker); loaded by tests/conftest.py.

Three kinds of user, healthchecks-style, all in tenant `tenant-x` unless noted:

- `agent_user`     agent + reviewer: submits assemblies, reads them, stores artifacts
- `editor_user`    policy_editor: writes and publishes policies
- `reviewer_user`  reviewer only: reads, may not write
- `outsider_user`  every role, but in tenant `tenant-z`: must see none of tenant-x (404s)

`api(user)` builds a DRF APIClient with the user's token; `agent_api`, `editor_api`, ... are the
ready-made ones and `anon_api` has no credentials. `published_policy` imports and publishes the
worked example policy in tenant-x. `submit(api, body, key=None)` POSTs an assembly and runs the
in-process job (on-commit callbacks) so the response's job is final when it returns.

Real-component fixtures for live worker tests (use with `transactional_db`, so rows are
committed and another process can see them):

- `redis_url` (session): a Redis to use as broker. CTXENG_TEST_REDIS_URL (a dedicated database: it
  is flushed; under pytest-xdist worker gwN takes database number + N), else a private
  `redis-server` on a free port per test worker; fails (never skips) without either.
- `celery_jobs`: switches this process to enqueue on that Redis (CTXENG_JOBS_INLINE off).
- `start_worker(concurrency=1, as_deployed=False, **env)`: starts `celery -A ctxeng worker` (that
  many pool processes; `as_deployed`: the command line of docs/production.md, with gossip and
  mingle, else without them) as a subprocess against the test database (SQLite file or the PostgreSQL test database) and waits
  until it is ready; returns a
  handle with `.kill()` (SIGKILL to the whole process group) and `.log()`. Stopped after the test.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

REPO = Path(__file__).resolve().parent.parent
TENANT = "tenant-x"
OTHER_TENANT = "tenant-z"


# --------------------------------------------------------------------------- database


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None):
    """SQLite tests use a file database, so a worker subprocess can share it (in-memory cannot)."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    if not db["ENGINE"].endswith("sqlite3"):
        yield
        return
    path = Path(tempfile.gettempdir()) / f"ctxeng-test-{os.getpid()}.sqlite3"
    db.setdefault("TEST", {})["NAME"] = str(path)
    yield
    # Django removes the database file; the WAL journal files are ours to remove.
    for leftover in (Path(f"{path}-wal"), Path(f"{path}-shm")):
        leftover.unlink(missing_ok=True)


def database_url_for_subprocess() -> str:
    """A DATABASE_URL naming the database this test session is using (after test DB setup)."""
    from django.db import connection

    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{conf['NAME']}"
    user = quote(conf.get("USER") or "")
    password = quote(conf.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = conf.get("HOST") or "127.0.0.1"
    port = conf.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{conf['NAME']}"


# --------------------------------------------------------------------------- examples


@pytest.fixture
def example_policy_text() -> str:
    from manifests.examples import example_text

    return example_text("policy.yaml")


@pytest.fixture
def example_policy_body(example_policy_text: str) -> dict[str, Any]:
    from ctxeng.engine import parse_policy

    return parse_policy(example_policy_text).model_dump(mode="json")


@pytest.fixture
def example_request() -> dict[str, Any]:
    from manifests.examples import example_json

    return example_json("request.json")


@pytest.fixture
def example_blocked_request() -> dict[str, Any]:
    from manifests.examples import example_json

    return example_json("request-blocked.json")


@pytest.fixture
def expected() -> dict[str, Any]:
    from manifests.examples import example_json

    return example_json("expected.json")


@pytest.fixture
def expected_blocked() -> dict[str, Any]:
    from manifests.examples import example_json

    return example_json("expected-blocked.json")


# --------------------------------------------------------------------------- users and clients


def _member(username: str, tenant: str, roles: list[str]):
    from django.contrib.auth import get_user_model

    from ctxeng.accounts.services import tenant_member_add

    tenant_member_add(username=username, tenant_slug=tenant, roles=roles)
    return get_user_model().objects.get(username=username)


@pytest.fixture
def agent_user(db):
    return _member("agent", TENANT, ["agent", "reviewer"])


@pytest.fixture
def editor_user(db):
    return _member("editor", TENANT, ["policy_editor", "reviewer"])


@pytest.fixture
def reviewer_user(db):
    return _member("reviewer", TENANT, ["reviewer"])


@pytest.fixture
def outsider_user(db):
    return _member("outsider", OTHER_TENANT, ["agent", "reviewer", "policy_editor", "admin"])


@pytest.fixture
def api():
    """`api(user)`: an APIClient authenticated with the user's token (None: anonymous), whose every
    answer is checked against docs/openapi.yaml (tests/openapi_check.py)."""
    from rest_framework.authtoken.models import Token

    from tests.openapi_check import SchemaCheckedAPIClient

    def make(user=None) -> SchemaCheckedAPIClient:
        client = SchemaCheckedAPIClient()
        if user is not None:
            token, _ = Token.objects.get_or_create(user=user)
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


@pytest.fixture
def agent_api(api, agent_user):
    return api(agent_user)


@pytest.fixture
def editor_api(api, editor_user):
    return api(editor_user)


@pytest.fixture
def reviewer_api(api, reviewer_user):
    return api(reviewer_user)


@pytest.fixture
def outsider_api(api, outsider_user):
    return api(outsider_user)


@pytest.fixture
def anon_api(api):
    return api(None)


@pytest.fixture
def published_policy(db, editor_user, example_policy_text):
    """The worked example policy (source-research revision 3), published in tenant-x."""
    from ctxeng.accounts.models import Tenant
    from policies.services import policy_import

    return policy_import(
        tenant=Tenant.objects.get(slug=TENANT), text=example_policy_text, user=editor_user, publish=True
    )


@pytest.fixture
def inline_jobs(settings):
    """Jobs run in this process after commit (the embedded default), whatever REDIS_URL says."""
    settings.CTXENG_JOBS_INLINE = True


@pytest.fixture
def lost_job(published_policy, agent_user, example_request, inline_jobs):
    """A saved, queued job whose message never went out (its enqueue runs on commit, which never
    comes under `db`): what the claim, the stale-job sweep and the seal are tested on directly."""
    from manifests.services import assembly_job_submit

    job, _ = assembly_job_submit(user=agent_user, data=example_request)
    return job


@pytest.fixture
def submit(inline_jobs, django_capture_on_commit_callbacks):
    """`submit(client, body, key=None)`: POST /api/v1/assemblies/ and run the job in-process."""

    def post(client, body: Any, key: str | None = None, **extra):
        headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
        with django_capture_on_commit_callbacks(execute=True):
            return client.post("/api/v1/assemblies/", body, format="json", **headers, **extra)

    return post


# --------------------------------------------------------------------------- real Redis and Celery


def _redis_ping(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:  # noqa: BLE001 - any failure means "not usable"
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def redis_url():
    """A real Redis for the broker: CTXENG_TEST_REDIS_URL if configured, else a private redis-server.

    A private server per test session (never the machine's shared Redis) keeps concurrent test
    runs from consuming or flushing each other's queues. No Redis at all is a failure, not a skip:
    install `redis-server` or point CTXENG_TEST_REDIS_URL at a dedicated, flushable database.
    """
    import redis

    url = os.environ.get("CTXENG_TEST_REDIS_URL")
    private = None
    if url:
        url = _per_test_worker(url)
        if not _redis_ping(url):
            pytest.fail(f"CTXENG_TEST_REDIS_URL={url} does not answer PING")
    else:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("no redis-server binary: install it (apt-get install redis-server) or set CTXENG_TEST_REDIS_URL")
        port = _free_port()
        private = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while not _redis_ping(url):
            if time.monotonic() > deadline:
                private.kill()
                pytest.fail("a private redis-server did not start within 10 s")
            time.sleep(0.1)
    redis.Redis.from_url(url).flushdb()
    yield url
    redis.Redis.from_url(url).flushdb()
    if private is not None:
        private.terminate()
        private.wait(10)


def _per_test_worker(url: str) -> str:
    """Under pytest-xdist each test worker flushes and uses its own database: the configured
    number plus the worker's (gw0 -> +0, gw1 -> +1, ...)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{base + int(worker[2:])}"))


def use_broker(url: str) -> None:
    """Point this process's Celery app at another broker, dropping cached connections and producers.

    Celery caches the connection pool and the producer pool on first send (and kombu keeps global
    pools per broker); all are reset the way Celery does after a fork, so the next send connects
    to `url`.
    """
    from kombu import pools

    from ctxeng.server.celery import app

    # Both spellings: the app reads Django's settings under the CELERY namespace, and Celery 5.6
    # looks up the namespaced key (CELERY_BROKER_URL) before broker_url.
    app.conf.broker_url = app.conf.CELERY_BROKER_URL = url
    app._pool = None  # noqa: SLF001 - see docstring
    amqp = app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None  # noqa: SLF001
    pools.reset()


@pytest.fixture
def celery_jobs(settings, redis_url):
    """This process enqueues jobs to Celery on `redis_url` instead of running them in-process."""
    settings.CTXENG_JOBS_INLINE = False
    use_broker(redis_url)
    yield redis_url
    use_broker("memory://")


class Worker:
    """A `celery -A ctxeng worker` subprocess in its own process group."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path, concurrency: int = 1,
                 as_deployed: bool = False) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "ctxeng", "worker",
                "--pool", "prefork", "--concurrency", str(concurrency), "--loglevel", "INFO",
                "--hostname", f"{name}@%h",
                # The deployed command line as it is (gossip, mingle, remote control), or quieter.
                *(() if as_deployed else ("--without-gossip", "--without-mingle")),
            ],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while " ready." not in self.log():
            if self.process.poll() is not None:
                pytest.fail(f"worker {self.name} exited with {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                pytest.fail(f"worker {self.name} not ready within {timeout} s:\n{self.log()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once (no warm or cold shutdown)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


@pytest.fixture
def start_worker(celery_jobs, transactional_db, tmp_path):
    """`start_worker(**env)`: a ready Celery worker on the test database and Redis; stopped after."""
    workers: list[Worker] = []

    def start(concurrency: int = 1, as_deployed: bool = False, **extra_env: str) -> Worker:
        env = {
            k: v for k, v in os.environ.items()
            if not k.startswith("CTXENG_TEST_") and k not in ("DATABASE_URL", "REDIS_URL")
        }
        env.update(
            DJANGO_SETTINGS_MODULE="ctxeng.server.settings",
            DATABASE_URL=database_url_for_subprocess(),
            REDIS_URL=celery_jobs,
            PYTHONUNBUFFERED="1",
        )
        env.update({k: str(v) for k, v in extra_env.items()})
        worker = Worker(f"w{len(workers) + 1}", env, tmp_path / f"worker-{len(workers) + 1}.log", concurrency,
                        as_deployed)
        workers.append(worker)
        worker.wait_ready()
        return worker

    yield start
    for worker in workers:
        worker.stop()
