"""Large request bodies cannot stall the web tier (issue 51, N4).

Six parallel 4 MB submits from one agent token held every sync worker for their parse and store,
and `/healthz` waited 23.9 s. A request whose Content-Length passes CTXENG_LARGE_BODY_BYTES holds a
slot per tenant and overall (ctxeng.server.large_requests), before its body is read:

- the slots on real storage (this process's memory and a real Redis): which counter is full, a
  lease renewed while its request runs, a lease nobody renews expiring;
- the API: beyond the tenant's bound a 429, beyond the total a 503, both with Retry-After and the
  setting named, nothing stored; a small body never counted; another tenant unaffected; the slot
  given back after the response, a failed one included; a request without a token counted by
  address; an unreachable counter lets the request through;
- the production layout: nginx and gunicorn with 2 sync workers on Redis, tenant A's large submit
  held inside its view (the test holds the database lock the submit's write needs: ordered, not
  timed), A's five more answered 429 at once, `/healthz` and tenant B's API answering meanwhile;
  once released all six are stored; a worker killed while holding a slot leaves it to expire;
- the Python client retries the 429 after its Retry-After, against the real server.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from django.db import transaction

from ctxeng.server import large_requests, rate_limits
from ctxeng.server.rate_limits import slots_held, slots_release, slots_take, slots_try
from tests.service.test_production_layout import request

pytestmark = pytest.mark.usefixtures("fresh_local_slots")  # tests/service/slot_fixtures.py

LARGE = 100_000  # bytes: the worked example's request (259 KB) is large at this threshold


@pytest.fixture
def bounds(settings):
    settings.CTXENG_LARGE_BODY_BYTES = LARGE
    settings.CTXENG_LARGE_REQUESTS_MAX_TOTAL = 2
    settings.CTXENG_LARGE_REQUESTS_MAX_PER_TENANT = 1
    return settings


def tenant_counters(slug: str) -> list[tuple[str, int]]:
    from django.conf import settings

    from ctxeng.accounts.models import Tenant

    return [(f"large:tenant:{Tenant.objects.get(slug=slug).pk}", settings.CTXENG_LARGE_REQUESTS_MAX_PER_TENANT),
            (large_requests.TOTAL_KEY, settings.CTXENG_LARGE_REQUESTS_MAX_TOTAL)]


def body_of(example_request: dict, n: int, tenant: str = "tenant-x") -> dict:
    """The worked example's request (large at LARGE) as run `large-<n>`, in `tenant`."""
    return {**json.loads(json.dumps(example_request).replace("tenant-x", tenant)), "run_id": f"large-{n}"}


# --------------------------------------------------------------------------- the slots


def test_a_refused_take_names_the_counter_that_is_full(counter_cache):
    total, tenant = ("total", 3), ("tenant", 1)
    holder, full = slots_try([total, tenant], 60)
    assert holder is not None and full is None
    assert slots_try([total, tenant], 60) == (None, 1)
    slots_take([total, ("other", 5)], 60)
    slots_take([total, ("other", 5)], 60)
    assert slots_try([total, ("third", 1)], 60) == (None, 0)
    assert (slots_held("total"), slots_held("tenant"), slots_held("third")) == (3, 1, 0)


def test_an_unreachable_counter_is_neither_held_nor_full(settings):
    settings.CACHES = {**settings.CACHES, "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"socket_connect_timeout": 0.5}}}
    assert slots_try([("t", 5)], 60) == (None, None)


def test_a_lease_is_renewed_while_its_request_runs_and_given_back_at_its_end(counter_cache):
    """Taken for 0.9 s and renewed every 0.3 s: held across several leases, free once ended."""
    counters = [("t", 1)]
    holder, _ = slots_try(counters, 0.9)
    lease = large_requests._Lease(counters, holder, 0.9)  # noqa: SLF001
    try:
        time.sleep(3)
        assert slots_held("t") == 1 and slots_take(counters, 60) is None
    finally:
        lease.end()
    assert slots_held("t") == 0


def test_a_renewal_does_not_bring_back_a_slot_that_expired(counter_cache):
    counters = [("t", 1)]
    holder = slots_take(counters, 0.2)
    time.sleep(0.4)
    other = slots_take(counters, 60)
    assert other is not None
    rate_limits.slots_renew(counters, holder, 60)
    assert slots_held("t") == 1
    slots_release(counters, other)
    assert slots_held("t") == 0


def test_a_take_keeps_the_key_as_long_as_its_longest_holder(redis_url, settings):
    """The key's own expiry follows its latest holder: a short take after a long one must not make
    Redis drop the long holder's slot with the key."""
    settings.CACHES = {**settings.CACHES, "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url,
        "KEY_PREFIX": f"large-{uuid.uuid4().hex}"}}
    counters = [("t", 5)]
    slots_take(counters, 60)
    slots_take(counters, 1)
    time.sleep(2.5)
    assert slots_held("t") == 1


# --------------------------------------------------------------------------- the API


@pytest.mark.parametrize("full", ["tenant", "total"])
def test_a_large_submit_beyond_a_bound_is_refused_unread_with_retry_after(
        counter_cache, bounds, agent_api, published_policy, example_request, full):
    from manifests.models import AssemblyJob

    if full == "tenant":
        held = [slots_take(tenant_counters("tenant-x"), 60)]
    else:  # two other tenants' large requests fill the total
        held = [slots_take([(large_requests.TOTAL_KEY, 2), (f"large:tenant:{n}", 1)], 60) for n in (901, 902)]
    assert all(held)
    response = agent_api.post("/api/v1/assemblies/", body_of(example_request, 1), format="json",
                              HTTP_IDEMPOTENCY_KEY="large-1")
    setting = "CTXENG_LARGE_REQUESTS_MAX_PER_TENANT" if full == "tenant" else "CTXENG_LARGE_REQUESTS_MAX_TOTAL"
    assert response.status_code == (429 if full == "tenant" else 503)
    assert response["Retry-After"] == str(large_requests.RETRY_AFTER_SECONDS)
    [error] = response.json()["errors"]
    assert error.startswith("body: ") and setting in error and "was not applied" in error
    assert not AssemblyJob.objects.exists()
    assert slots_held(large_requests.TOTAL_KEY) == (1 if full == "tenant" else 2)  # nothing taken or left


def test_with_room_a_large_submit_is_stored_and_gives_its_slots_back(
        counter_cache, bounds, agent_api, published_policy, example_request, submit):
    from manifests.models import AssemblyJob

    response = submit(agent_api, body_of(example_request, 1))
    assert response.status_code == 202, response.content[:300]
    assert AssemblyJob.objects.filter(run__run_id="large-1").count() == 1
    assert slots_held(large_requests.TOTAL_KEY) == 0
    assert all(slots_held(key) == 0 for key, _ in tenant_counters("tenant-x"))


def test_a_large_request_the_view_refuses_gives_its_slots_back(counter_cache, bounds, agent_api):
    response = agent_api.post("/api/v1/assemblies/", {"run_id": "r", "padding": "x" * (LARGE + 10)}, format="json")
    assert response.status_code == 400
    assert slots_held(large_requests.TOTAL_KEY) == 0


def test_a_small_body_is_never_counted(counter_cache, bounds, agent_api, published_policy):
    """With every large slot held, a body under the threshold reaches its view (here a 400 naming
    the field it lacks), never a 429."""
    assert slots_take(tenant_counters("tenant-x"), 60)
    response = agent_api.post("/api/v1/assemblies/", {"run_id": "r"}, format="json")
    assert response.status_code == 400 and "Retry-After" not in response
    assert agent_api.get("/api/v1/assemblies/").status_code == 200


def test_another_tenants_large_submit_goes_through_while_one_tenant_is_at_its_bound(
        counter_cache, bounds, agent_api, outsider_api, outsider_user, example_request, example_policy_text, submit):
    from ctxeng.accounts.models import Tenant
    from policies.services import policy_import

    policy_import(tenant=Tenant.objects.get(slug="tenant-z"), text=example_policy_text, user=outsider_user, publish=True)
    assert slots_take(tenant_counters("tenant-x"), 60)
    refused = agent_api.post("/api/v1/assemblies/", body_of(example_request, 1), format="json")
    assert refused.status_code == 429
    response = submit(outsider_api, body_of(example_request, 2, tenant="tenant-z"))
    assert response.status_code == 202, response.content[:300]


def test_a_user_of_two_tenants_holds_a_slot_in_each(counter_cache, bounds, agent_api, agent_user):
    """The body, which names the tenant, is not read before the slot: a user of two tenants is
    bounded in both."""
    from ctxeng.accounts.services import tenant_member_add

    tenant_member_add(username=agent_user.username, tenant_slug="tenant-w", roles=["agent"])
    assert slots_take(tenant_counters("tenant-w"), 60)
    response = agent_api.post("/api/v1/assemblies/", {"run_id": "r", "padding": "x" * (LARGE + 10)}, format="json")
    assert response.status_code == 429


def test_a_large_request_without_a_token_counts_by_address(counter_cache, bounds, db, client):
    """A dashboard form (no token): its client address's slot; the error page, not JSON."""
    assert slots_take([(large_requests.TOTAL_KEY, 2), ("large:address:127.0.0.1", 1)], 60)
    response = client.post("/login/", {"username": "u", "password": "x" * (LARGE + 10)})
    assert response.status_code == 429 and response["Retry-After"] == "2"
    assert "text/html" in response["Content-Type"] and b"CTXENG_LARGE_REQUESTS_MAX_PER_TENANT" in response.content
    other = client.post("/login/", {"username": "u", "password": "x" * (LARGE + 10)}, REMOTE_ADDR="10.0.0.9")
    assert other.status_code != 429


def test_a_threshold_of_zero_counts_nothing(counter_cache, bounds, agent_api):
    bounds.CTXENG_LARGE_BODY_BYTES = 0
    assert slots_take(tenant_counters("tenant-x"), 60)
    response = agent_api.post("/api/v1/assemblies/", {"run_id": "r", "padding": "x" * (LARGE + 10)}, format="json")
    assert response.status_code == 400


def test_an_unreachable_counter_lets_a_large_request_through(settings, bounds, agent_api):
    settings.CACHES = {**settings.CACHES, "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"socket_connect_timeout": 0.5}}}
    response = agent_api.post("/api/v1/assemblies/", {"run_id": "r", "padding": "x" * (LARGE + 10)}, format="json")
    assert response.status_code == 400  # the view's answer, not a refusal


@pytest.mark.parametrize("name", ["CTXENG_LARGE_BODY_BYTES", "CTXENG_LARGE_REQUESTS_MAX_PER_TENANT",
                                  "CTXENG_LARGE_REQUEST_LEASE_SECONDS"])
def test_the_settings_refuse_a_negative_value(name):
    from tests.service_fixtures import REPO

    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ctxeng.server.settings", name: "-1"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-c", "import django;django.setup()"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert done.returncode != 0 and name in done.stderr


# --------------------------------------------------------------------------- the production layout

BIG_SUBMITS = 6  # the attack's six, against 2 workers


@pytest.fixture
def shared_counters(settings, redis_url):
    """This process reads the counters gunicorn keeps (the same Redis and key prefix)."""
    settings.CACHES = {**settings.CACHES, "throttle": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url, "KEY_PREFIX": "ctxeng:throttle"}}
    import redis

    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter("ctxeng:throttle:*large:*"):
        client.delete(key)
    return redis_url


class WritesHeld:
    """Holds the lock every submit's write takes (the content store's epoch row: PostgreSQL's row
    lock; SQLite's write lock, which this connection's IMMEDIATE transaction takes), so a submit
    that reached it waits inside its view until `release()`."""

    def __init__(self) -> None:
        from ctxeng.content.models import ContentEpoch

        ContentEpoch.objects.get_or_create(pk=1)
        self._atomic = transaction.atomic()
        self._atomic.__enter__()
        ContentEpoch.objects.select_for_update().get(pk=1)

    def release(self) -> None:
        if self._atomic is not None:
            self._atomic.__exit__(None, None, None)
            self._atomic = None


def wait_until(condition, what: str, deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"not within {deadline} s: {what}")
        time.sleep(0.05)


@pytest.fixture
def layout(gunicorn, nginx, shared_counters, published_policy, agent_user, outsider_user):
    from rest_framework.authtoken.models import Token

    app = gunicorn(workers=2, REDIS_URL=shared_counters, CTXENG_LARGE_BODY_BYTES=str(LARGE),
                   CTXENG_LARGE_REQUESTS_MAX_TOTAL="1", CTXENG_LARGE_REQUESTS_MAX_PER_TENANT="1",
                   CTXENG_LARGE_REQUEST_LEASE_SECONDS="3", CTXENG_THROTTLE_AGENT="")
    tokens = {user.username: Token.objects.get_or_create(user=user)[0].key for user in (agent_user, outsider_user)}
    return app, nginx(app), tokens


def post_submit(front, token: str, body: dict, key: str):
    return request(front, "POST", "/api/v1/assemblies/", body=json.dumps(body).encode(), timeout=90,
                   headers={"Authorization": f"Token {token}", "Content-Type": "application/json", "Idempotency-Key": key})


def test_big_parallel_submits_leave_healthz_and_another_tenant_answering(layout, example_request):
    """Tenant A's first large submit waits inside its view (it holds the tenant's slot and a worker);
    A's five more are answered 429 at once with Retry-After; /healthz and tenant B's API answer
    meanwhile. Without the bound, two of A's submits held both workers and /healthz waited for them."""
    from manifests.models import AssemblyJob

    app, front, tokens = layout
    a_token, b_token = tokens["agent"], tokens["outsider"]
    answers: queue.Queue = queue.Queue()

    def send(n: int) -> None:
        try:
            answers.put((n, post_submit(front, a_token, body_of(example_request, n), f"big-{n}")))
        except OSError as exc:
            answers.put((n, exc))

    held = WritesHeld()
    threads = [threading.Thread(target=send, args=(0,))]
    try:
        threads[0].start()
        wait_until(lambda: slots_held(tenant_counters("tenant-x")[0][0]) == 1, "A's first submit holds its slot")
        threads += [threading.Thread(target=send, args=(n,)) for n in range(1, BIG_SUBMITS)]
        for thread in threads[1:]:
            thread.start()
        refused = [answers.get(timeout=30) for _ in range(BIG_SUBMITS - 1)]
        assert sorted(n for n, _ in refused) == list(range(1, BIG_SUBMITS))
        assert {(status, headers.get("retry-after")) for _, (status, headers, _) in refused} == {(429, "2")}
        probes = [request(front, "GET", "/healthz", timeout=15) for _ in range(5)]
        assert [(status, json.loads(body)) for status, _, body in probes] == [(200, {"status": "ok"})] * 5
        status, _, body = request(front, "GET", "/api/v1/assemblies/?limit=1", timeout=15,
                                  headers={"Authorization": f"Token {b_token}"})
        assert (status, json.loads(body)["count"]) == (200, 0)
        assert answers.empty()  # A's first is still inside its view
    finally:
        held.release()
        for thread in threads:
            thread.join(90)
    first, (status, _, body) = answers.get(timeout=5)
    assert (first, status) == (0, 202), body[:300]
    for n in range(1, BIG_SUBMITS):  # sent again, one after the other, now that the slot is free
        status, _, body = post_submit(front, a_token, body_of(example_request, n), f"big-{n}")
        assert status == 202, body[:300]
    assert sorted(AssemblyJob.objects.filter(tenant__slug="tenant-x").values_list("run__run_id", flat=True)) \
        == [f"large-{n}" for n in range(BIG_SUBMITS)]
    assert slots_held(large_requests.TOTAL_KEY) == 0
    assert "WORKER TIMEOUT" not in app.log()


def gunicorn_workers(app) -> list[int]:
    """The worker processes of a gunicorn this test started (children of its master)."""
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(app.process.pid)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def test_the_slot_of_a_killed_request_is_released(layout, example_request):
    """A worker killed inside a large submit runs no `finally`: its slot ends with its lease (3 s
    here, renewed while the request lived), and the tenant's next large submit is taken."""
    app, front, tokens = layout
    answers: queue.Queue = queue.Queue()
    held = WritesHeld()
    thread = threading.Thread(target=lambda: answers.put(
        post_submit(front, tokens["agent"], body_of(example_request, 0), "killed-0")))
    try:
        thread.start()
        tenant_key = tenant_counters("tenant-x")[0][0]
        wait_until(lambda: slots_held(tenant_key) == 1, "the submit holds its slot")
        for pid in gunicorn_workers(app):
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: slots_held(tenant_key) == 0, "the killed request's slot expires")
    finally:
        held.release()
        thread.join(90)
    app.wait_healthy()
    status, _, body = post_submit(front, tokens["agent"], body_of(example_request, 1), "killed-1")
    assert status == 202, body[:300]


def test_the_client_retries_the_429_after_its_retry_after(layout, example_request, monkeypatch):
    """The tenant's slot is held (as by another large request of it); the client's first attempt is
    refused, and the slot is given back when the client starts waiting: its retry is stored."""
    from ctxeng import client as ctxclient

    app, front, tokens = layout
    counters = tenant_counters("tenant-x")
    holder = slots_take(counters, 60)
    assert holder
    asked: list[float] = []
    real_sleep = time.sleep
    caller = threading.get_ident()

    def sleep(seconds: float) -> None:
        if threading.get_ident() == caller:  # the client's wait, not another thread's
            asked.append(seconds)
            slots_release(counters, holder)
        real_sleep(seconds)

    monkeypatch.setattr(ctxclient.time, "sleep", sleep)
    submitted = ctxclient.Client(front.url, tokens["agent"], max_retries=2, backoff_base=0.1).submit(
        body_of(example_request, 7))
    assert submitted["status"] in ("queued", "ready")
    assert len(asked) == 1 and asked[0] >= large_requests.RETRY_AFTER_SECONDS
