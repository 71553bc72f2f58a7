"""Long-polls cannot starve the web tier (issue 40, finding 2).

`GET assemblies/{id}/?wait=30` holds a sync gunicorn worker for the wait: four clients held all
four workers, and `/healthz` and every tenant waited. At most CTXENG_LONGPOLL_MAX_TOTAL long-polls
wait at once (across every web process, through Redis) and CTXENG_LONGPOLL_MAX_PER_TENANT per
tenant; beyond either the job is answered at once as it is, with Retry-After.

- the slot counter (ctxeng.server.rate_limits.slots_take/slots_release) on real Redis and in process:
  the limit, all-or-none, release, expiry of a slot nobody gave back;
- the API: with the caps held, the answer is the non-waiting GET's body plus Retry-After, and the
  wait loop is not entered (the same queries as a non-waiting GET; the slots unchanged);
- the production layout: nginx + gunicorn with 2 sync workers and MAX_TOTAL 1 on Redis; six
  long-polls of a queued job, and `/healthz` still answers (generous deadlines, below the wait).
"""

from __future__ import annotations

import json
import queue
import threading
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ctxeng.server.rate_limits import slots_held, slots_release, slots_take
from tests.service.test_production_layout import request

pytestmark = pytest.mark.usefixtures("fresh_local_slots")  # tests/service/slot_fixtures.py


@pytest.fixture
def queued_job(transactional_db, celery_jobs, published_policy, agent_user, example_request):
    """A committed job that stays queued: enqueued on a Redis no Celery worker reads."""
    from manifests.services import assembly_job_submit

    job, _ = assembly_job_submit(user=agent_user, data=example_request)
    return job


# --------------------------------------------------------------------------- the slot counter


def test_slots_up_to_the_limit_then_none_and_a_release_frees_one(counter_cache):
    counters = [("t", 3)]
    holders = [slots_take(counters, 60) for _ in range(3)]
    assert all(holders) and len(set(holders)) == 3 and slots_held("t") == 3
    assert slots_take(counters, 60) is None and slots_held("t") == 3
    slots_release(counters, holders[1])
    assert slots_held("t") == 2
    assert slots_take(counters, 60) is not None and slots_take(counters, 60) is None


def test_slots_are_all_or_none(counter_cache):
    """A take one counter refuses holds nothing in the others (else a refused tenant would use up
    the total's room)."""
    total, tenant_a, tenant_b = ("total", 3), ("tenant:a", 1), ("tenant:b", 5)
    assert slots_take([total, tenant_a], 60) is not None
    assert slots_take([total, tenant_a], 60) is None  # tenant a is full
    assert (slots_held("total"), slots_held("tenant:a")) == (1, 1)
    assert slots_take([total, tenant_b], 60) and slots_take([total, tenant_b], 60)
    assert slots_take([total, tenant_b], 60) is None  # the total (3) is full; b has room
    assert (slots_held("total"), slots_held("tenant:b")) == (3, 2)


def test_a_slot_nobody_gives_back_expires(counter_cache):
    """A worker killed mid-wait runs no `finally`: its slot ends with its expiry."""
    counters = [("t", 1)]
    assert slots_take(counters, 0.3) is not None
    assert slots_take(counters, 60) is None
    time.sleep(0.5)
    assert slots_held("t") == 0
    assert slots_take(counters, 60) is not None


def test_a_limit_of_zero_holds_nothing(counter_cache):
    assert slots_take([("t", 0)], 60) is None and slots_held("t") == 0


def test_releasing_twice_or_unknown_holder_is_harmless(counter_cache):
    counters = [("t", 2)]
    holder = slots_take(counters, 60)
    other = slots_take(counters, 60)
    slots_release(counters, holder)
    slots_release(counters, holder)
    slots_release(counters, "nobody")
    assert slots_held("t") == 1
    slots_release(counters, other)
    assert slots_held("t") == 0


def test_an_unreachable_counter_holds_no_slot(settings):
    """No slot without the counter: the long-poll answers at once rather than wait unbounded."""
    settings.CACHES = {**settings.CACHES, "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"socket_connect_timeout": 0.5}}}
    assert slots_take([("t", 5)], 60) is None


# --------------------------------------------------------------------------- the API


def _get(api, job_id, query: str = ""):
    with CaptureQueriesContext(connection) as queries:
        response = api.get(f"/api/v1/assemblies/{job_id}/{query}")
    return response, len(queries)


@pytest.mark.parametrize("full", ["tenant", "total"])
def test_with_the_caps_held_a_long_poll_is_answered_at_once_with_retry_after(
        counter_cache, settings, agent_api, queued_job, full):
    from manifests.selectors import LONGPOLL_RETRY_AFTER_SECONDS, longpoll_counters

    settings.CTXENG_LONGPOLL_MAX_TOTAL, settings.CTXENG_LONGPOLL_MAX_PER_TENANT = 3, 2
    if full == "tenant":
        held = [slots_take(longpoll_counters(queued_job.tenant_id), 60) for _ in range(2)]
    else:  # three long-polls of two other tenants' jobs
        held = [slots_take(longpoll_counters(queued_job.tenant_id + other), 60) for other in (1000, 1000, 1001)]
    assert all(held)
    plain, plain_queries = _get(agent_api, queued_job.id, "?include=manifest,input")
    capped, capped_queries = _get(agent_api, queued_job.id, "?wait=30&include=manifest,input")
    assert plain.status_code == capped.status_code == 200
    assert capped.json() == plain.json() and capped.json()["status"] == "queued"
    assert capped["Retry-After"] == str(LONGPOLL_RETRY_AFTER_SECONDS) and "Retry-After" not in plain
    assert capped_queries == plain_queries  # not one look of the wait loop
    assert slots_held("longpoll:total") == (2 if full == "tenant" else 3)  # nothing taken or left


def test_with_room_a_long_poll_waits_and_gives_its_slot_back(counter_cache, settings,
                                                             agent_api, queued_job):
    """The control of the test above: with the caps not reached the wait loop runs (more queries
    than a plain GET), no Retry-After, and the slot is free again afterwards."""
    from manifests.selectors import longpoll_counters

    settings.CTXENG_LONGPOLL_MAX_TOTAL, settings.CTXENG_LONGPOLL_MAX_PER_TENANT = 3, 2
    assert slots_take(longpoll_counters(queued_job.tenant_id), 60)  # one of the tenant's two
    plain, plain_queries = _get(agent_api, queued_job.id)
    waited, waited_queries = _get(agent_api, queued_job.id, "?wait=0.3")
    assert waited.status_code == 200 and waited.json()["status"] == "queued" and "Retry-After" not in waited
    assert waited_queries > plain_queries
    assert slots_held("longpoll:total") == 1 and slots_held(f"longpoll:tenant:{queued_job.tenant_id}") == 1


def test_caps_of_zero_answer_every_wait_at_once(settings, agent_api, queued_job):
    """Cap 0: no long-poll waits; a GET without wait is answered as always (no Retry-After)."""
    settings.CTXENG_LONGPOLL_MAX_TOTAL = 0
    response = agent_api.get(f"/api/v1/assemblies/{queued_job.id}/")
    assert response.status_code == 200 and "Retry-After" not in response
    assert agent_api.get(f"/api/v1/assemblies/{queued_job.id}/?wait=5")["Retry-After"]


def take_all(tenant_id: int) -> int:
    """How many long-poll slots a tenant obtains by asking until it is refused."""
    from manifests.selectors import longpoll_counters

    taken = 0
    while slots_take(longpoll_counters(tenant_id), 60) is not None:
        taken += 1
    return taken


def test_with_the_default_shares_two_tenants_leave_a_long_poll_slot_to_a_third(counter_cache):
    """Issue 51, N7: with the default caps (3 in all, 2 per tenant) two tenants took all three."""
    first, second = take_all(1), take_all(2)
    assert first >= 1 and second >= 1
    assert take_all(3) >= 1


def settings_value(name: str, **env: str) -> str:
    """A setting as a fresh process computes it from the environment."""
    import os
    import subprocess
    import sys

    from tests.service_fixtures import REPO

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CTXENG_LONGPOLL")},
           "DJANGO_SETTINGS_MODULE": "ctxeng.server.settings", **env}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-c", f"import django;django.setup();from django.conf import settings;"
                           f"print(settings.{name})"], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("total", [1, 2, 3, 4, 9])
def test_the_default_share_of_a_tenant_leaves_a_slot_beyond_any_two_tenants(total):
    share = int(settings_value("CTXENG_LONGPOLL_MAX_PER_TENANT", CTXENG_LONGPOLL_MAX_TOTAL=str(total)))
    assert share >= 1
    assert 2 * share < total or share == 1  # below 3 slots, one each is the least that lets any wait


def test_the_settings_refuse_a_negative_cap():
    import os
    import subprocess
    import sys

    from tests.service_fixtures import REPO

    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ctxeng.server.settings", "CTXENG_LONGPOLL_MAX_PER_TENANT": "-1"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-c", "import django;django.setup()"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "CTXENG_LONGPOLL_MAX_PER_TENANT" in done.stderr


# --------------------------------------------------------------------------- the production layout

LONG_POLLS = 6  # three times the workers (2)


def test_long_polls_do_not_stall_healthz_behind_nginx(gunicorn, nginx, redis_url, agent_user, queued_job):
    """Six long-polls of a queued job (no Celery worker runs: it stays queued) against 2 sync
    workers with the documented cap, workers − 1 = 1: one waits, five are answered at once with
    Retry-After, and /healthz answers while the one waits. Before the caps, the first two held
    both workers for 30 s and /healthz was not answered within its 15 s deadline."""
    from rest_framework.authtoken.models import Token

    from manifests.models import AssemblyJob

    token = Token.objects.get_or_create(user=agent_user)[0].key
    app = gunicorn(workers=2, REDIS_URL=redis_url, CTXENG_LONGPOLL_MAX_TOTAL="1", CTXENG_LONGPOLL_MAX_PER_TENANT="1")
    front = nginx(app)
    answers: queue.Queue = queue.Queue()

    def poll() -> None:
        try:
            answers.put(request(front, "GET", f"/api/v1/assemblies/{queued_job.id}/?wait=30",
                                headers={"Authorization": f"Token {token}"}, timeout=60))
        except OSError as exc:
            answers.put(exc)

    threads = [threading.Thread(target=poll) for _ in range(LONG_POLLS)]
    for thread in threads:
        thread.start()
    try:
        early = [answers.get(timeout=20) for _ in range(LONG_POLLS - 1)]
        assert [(status, headers.get("retry-after"), json.loads(body)["status"]) for status, headers, body in early] \
            == [(200, "2", "queued")] * (LONG_POLLS - 1)
        probes = [request(front, "GET", "/healthz", timeout=15) for _ in range(5)]
        assert [(status, json.loads(body)) for status, _, body in probes] == [(200, {"status": "ok"})] * 5
        assert answers.empty()  # the one long-poll with a slot is still waiting
    finally:
        AssemblyJob.objects.filter(pk=queued_job.pk).update(status="failed", error="test over")  # ends its wait
        for thread in threads:
            thread.join(60)
    status, headers, body = answers.get(timeout=5)
    assert (status, "retry-after" in headers, json.loads(body)["status"]) == (200, False, "failed")
