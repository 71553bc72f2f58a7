"""Fair dispatch between tenants (issue 40, finding 5): one tenant's backlog cannot starve another's job.

The rule (ctxeng.server.fair_queue): each turn on a worker goes to the waiting tenant with the
fewest entries on workers, the first in the ring (round-robin) among equals; a tenant at
CTXENG_FAIR_TENANT_MAX_RUNNING is passed over and, when every waiting tenant is, the turn is
requeued; a lease a killed worker stops renewing expires, which frees the slot and queues its
entry again. First on the queue structures in real Redis (orders
written by hand from the rule), then end to end on real Celery workers, asserting orders of
events, never durations.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

GENEROUS = 300.0
TENANT_A, TENANT_B = "tenant-x", "tenant-z"


@pytest.fixture
def fair_redis(celery_jobs):
    """The broker's Redis, emptied: no queued entry, lease or message of an earlier test."""
    import redis

    client = redis.Redis.from_url(celery_jobs)
    client.flushdb()
    yield client
    client.flushdb()


def ids(count: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(count)]


def take_entry() -> tuple[str | None, str | None]:
    """Take a turn and free its slot at once: (tenant, item id), (None, None) when nothing is queued."""
    from ctxeng.server import fair_queue

    turn = fair_queue.take()
    if turn.tenant is not None:
        fair_queue._script(fair_queue.RELEASE, turn.tenant, fair_queue.entry_of(turn.kind, turn.item_id))
    return turn.tenant, turn.item_id


# --------------------------------------------------------------------------- the queue in Redis


def test_turns_go_round_robin_over_the_tenants_with_queued_work(fair_redis):
    from ctxeng.server import fair_queue

    a, b, c = ids(4), ids(1), ids(2)
    for tenant, items in (("1", a), ("2", b), ("3", c)):
        for item in items:
            fair_queue.push(kind="assembly", item_id=item, tenant_id=tenant)
    order = [take_entry() for _ in range(8)]
    # Written from the rule: 1, 2, 3, then the tenants that still have work, in the same turn order.
    assert order == [("1", a[0]), ("2", b[0]), ("3", c[0]), ("1", a[1]), ("3", c[1]), ("1", a[2]), ("1", a[3]),
                     (None, None)]


def test_a_tenant_with_nothing_running_goes_before_one_whose_jobs_hold_the_workers(fair_redis):
    """Tenant 1 queued first and holds two workers; tenant 2's entry, queued after tenant 1's
    third, is taken next: fewest entries running first, ring order only among equals."""
    from ctxeng.server import fair_queue

    a, b = ids(3), ids(1)
    for item in a:
        fair_queue.push(kind="assembly", item_id=item, tenant_id="1")
    held = [fair_queue.take(), fair_queue.take()]
    assert [turn.item_id for turn in held] == a[:2]
    fair_queue.push(kind="assembly", item_id=b[0], tenant_id="2")
    assert (fair_queue.take().item_id, fair_queue.take().item_id) == (b[0], a[2])


def test_an_entry_queued_twice_is_taken_once(fair_redis):
    from ctxeng.server import fair_queue

    [item] = ids(1)
    fair_queue.push(kind="assembly", item_id=item, tenant_id="1")
    fair_queue.push(kind="assembly", item_id=item, tenant_id="1")
    assert [take_entry(), take_entry()] == [("1", item), (None, None)]


def test_a_tenant_at_its_cap_is_passed_over_and_a_turn_with_only_capped_tenants_says_so(fair_redis, settings):
    from ctxeng.server import fair_queue

    settings.CTXENG_FAIR_TENANT_MAX_RUNNING = 1
    a, b = ids(2), ids(1)
    for item in a:
        fair_queue.push(kind="assembly", item_id=item, tenant_id="1")
    fair_queue.push(kind="preview", item_id=b[0], tenant_id="2")

    first = fair_queue.take()  # tenant 1's slot is now held
    assert (first.tenant, first.item_id) == ("1", a[0])
    second = fair_queue.take()
    assert (second.tenant, second.kind, second.item_id) == ("2", "preview", b[0])
    capped = fair_queue.take()
    assert (capped.tenant, capped.capped) == (None, True)

    with fair_queue.holding(first):
        pass  # the run ends: the slot is free
    third = fair_queue.take()
    assert (third.tenant, third.item_id, third.capped) == ("1", a[1], False)


def test_an_expired_lease_frees_the_slot_and_queues_its_entry_again_first(fair_redis, settings):
    from ctxeng.server import fair_queue

    settings.CTXENG_FAIR_TENANT_MAX_RUNNING = 1
    settings.CTXENG_FAIR_LEASE_SECONDS = 0.2
    a = ids(2)
    for item in a:
        fair_queue.push(kind="assembly", item_id=item, tenant_id="1")
    lost = fair_queue.take()  # taken by a worker that then dies: its lease is never renewed
    assert lost.item_id == a[0]

    deadline = time.monotonic() + 60
    while (turn := fair_queue.take()).capped:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.05)
    # The lost entry comes back ahead of the tenant's other entry, and a message was sent for it.
    assert (turn.tenant, turn.item_id) == ("1", a[0])
    sent = [m for m in fair_redis.lrange("celery", 0, -1) if a[0].encode() in m]
    assert len(sent) == 1


def take_as(holder: str):
    """`take`, as the process named `holder` (fair_queue.holder_of) would: (tenant, entry)."""
    from django.conf import settings

    from ctxeng.server import fair_queue

    tenant, entry, _capped, *_ = fair_queue._script(
        fair_queue.TAKE, fair_queue._lease_ms(), settings.CTXENG_FAIR_TENANT_MAX_RUNNING, fair_queue.REAP_AT_MOST,
        settings.CTXENG_FAIR_TENANT_MAX_PREVIEWS, fair_queue.LOOK_PAST_PREVIEWS, holder)
    return tenant.decode(), entry.decode()


def test_the_slots_of_a_lost_process_are_freed_at_once_and_only_its_own(fair_redis, settings):
    """Issue 51, N9: a pool process holding tenant 1's slot is gone; its worker releases what it
    held (RELEASE_HOLDER, run by TurnRequest in the worker's main process) long before its lease
    would expire: the entry is first in tenant 1's queue again, with a message, and the slot free.
    The lease of another process (tenant 2's) is left as it is."""
    from ctxeng.server import fair_queue

    settings.CTXENG_FAIR_TENANT_MAX_RUNNING = 1
    settings.CTXENG_FAIR_LEASE_SECONDS = 3600  # no lease expires in this test
    a, b = ids(2), ids(1)
    for item in a:
        fair_queue.push(kind="assembly", item_id=item, tenant_id="1")
    fair_queue.push(kind="assembly", item_id=b[0], tenant_id="2")
    lost, alive = fair_queue.holder_of(101, 100), fair_queue.holder_of(102, 100)
    assert take_as(lost) == ("1", f"assembly:{a[0]}")
    assert take_as(alive) == ("2", f"assembly:{b[0]}")
    assert fair_queue.take().capped  # tenant 1 is at its cap, tenant 2 has nothing waiting

    released = fair_queue._script(fair_queue.RELEASE_HOLDER, lost)
    assert released == [f"1|assembly:{a[0]}".encode()]
    assert fair_redis.zrange("ctxeng:fair:run:1", 0, -1) == []
    assert fair_redis.zrange("ctxeng:fair:run:2", 0, -1) == [f"assembly:{b[0]}".encode()]
    assert fair_redis.lrange("ctxeng:fair:q:1", 0, -1) == [f"assembly:{a[0]}".encode(), f"assembly:{a[1]}".encode()]
    assert fair_redis.hgetall("ctxeng:fair:holders") == {f"2|assembly:{b[0]}".encode(): alive.encode()}
    assert fair_queue._script(fair_queue.RELEASE_HOLDER, lost) == []  # a second release frees nothing
    with fair_queue.holding(fair_queue.Turn(tenant="2", kind="assembly", item_id=b[0], capped=False)):
        pass
    assert fair_redis.hgetall("ctxeng:fair:holders") == {}  # a release forgets the holder too


def test_release_lost_frees_what_a_gone_pool_process_of_this_worker_held_and_sends_it_again(fair_redis, settings, caplog):
    """`release_lost(pid=)`, as the worker's main process calls it when its pool process `pid` is
    gone: the entries that process held go back first in their tenants' queues with a message
    each, the release is logged naming the process, and another process's entry is left alone."""
    import logging
    import os

    from ctxeng.server import fair_queue

    settings.CTXENG_FAIR_LEASE_SECONDS = 3600
    a, b = ids(2), ids(1)
    for item in a:
        fair_queue.push(kind="assembly", item_id=item, tenant_id="1")
    fair_queue.push(kind="preview", item_id=b[0], tenant_id="2")
    assert take_as(fair_queue.holder_of(4242, os.getpid())) == ("1", f"assembly:{a[0]}")
    assert take_as(fair_queue.holder_of(4243, os.getpid())) == ("2", f"preview:{b[0]}")
    fair_redis.delete("celery")

    with caplog.at_level(logging.WARNING, logger=fair_queue.logger.name):
        assert fair_queue.release_lost(pid=4242) == [f"1|assembly:{a[0]}"]
    assert fair_redis.lrange("ctxeng:fair:q:1", 0, -1) == [f"assembly:{a[0]}".encode(), f"assembly:{a[1]}".encode()]
    sent = fair_redis.lrange("celery", 0, -1)
    assert len(sent) == 1 and a[0].encode() in sent[0]
    assert json.loads(sent[0])["headers"]["task"] == fair_queue.TASKS["assembly"]
    [said] = [r.getMessage() for r in caplog.records if r.name == fair_queue.logger.name]
    assert said == f"fair dispatch: assembly:{a[0]} held by tenant 1 was on pool process 4242, which is gone; queued again"
    assert fair_redis.zrange("ctxeng:fair:run:2", 0, -1) == [f"preview:{b[0]}".encode()]
    assert fair_queue.release_lost(pid=4242) == []  # nothing more to free


def test_a_tenants_previews_beyond_the_lane_wait_while_its_jobs_and_others_run(fair_redis, settings):
    """Issue 51, N3: tenant 1 queues two previews, then a job; with one preview of it running
    (the default lane, CTXENG_FAIR_TENANT_MAX_PREVIEWS=1) its turn goes to the job behind the
    second preview, and with only that preview left it is passed over until the first ends."""
    from ctxeng.server import fair_queue

    assert settings.CTXENG_FAIR_TENANT_MAX_PREVIEWS == 1  # the default this test is about
    previews, job = ids(2), ids(1)
    for item in previews:
        fair_queue.push(kind="preview", item_id=item, tenant_id="1")
    fair_queue.push(kind="assembly", item_id=job[0], tenant_id="1")

    first = fair_queue.take()
    assert (first.kind, first.item_id) == ("preview", previews[0])
    second = fair_queue.take()
    assert (second.kind, second.item_id) == ("assembly", job[0])
    waiting = fair_queue.take()
    assert (waiting.tenant, waiting.capped) == (None, True)
    fair_queue.push(kind="assembly", item_id="other", tenant_id="2")
    assert fair_queue.take().tenant == "2"  # another tenant is not held up by it

    with fair_queue.holding(first):
        pass  # the first preview ends: the lane has room
    third = fair_queue.take()
    assert (third.kind, third.item_id) == ("preview", previews[1])


def test_with_the_preview_lane_off_a_tenants_previews_take_turns_like_jobs(fair_redis, settings):
    from ctxeng.server import fair_queue

    settings.CTXENG_FAIR_TENANT_MAX_PREVIEWS = 0
    previews = ids(2)
    for item in previews:
        fair_queue.push(kind="preview", item_id=item, tenant_id="1")
    assert [fair_queue.take().item_id, fair_queue.take().item_id] == previews


@pytest.fixture
def unsent_job(fair_redis, transactional_db, published_policy, agent_user, example_request, settings):
    """A committed, queued job whose message and fair-queue entry were never sent (its enqueue is
    skipped), in tenant A, with A capped at one job on workers."""
    import manifests.tasks  # noqa: F401 - registers the assembly runner with fair_queue, as a worker does
    from manifests import services

    settings.CTXENG_FAIR_TENANT_MAX_RUNNING = 1
    enqueue, services.assembly_job_enqueue = services.assembly_job_enqueue, lambda **kwargs: None
    try:
        job, _ = services.assembly_job_submit(user=agent_user, data=example_request)
    finally:
        services.assembly_job_enqueue = enqueue
    return job


def test_a_message_for_a_job_already_taken_runs_nothing_so_the_cap_holds(unsent_job, fair_redis):
    """Issue 51, N9: the sweep re-sends a job whose entry another message has just taken (leased,
    not yet claimed). That second message finds nothing waiting; it used to run the job it names
    outside the leases, so the tenant passed its cap. Now it runs nothing."""
    from ctxeng.server import fair_queue
    from manifests.models import AssemblyJob

    fair_queue.push(kind="assembly", item_id=str(unsent_job.id), tenant_id=unsent_job.tenant_id)
    taken = fair_queue.take()  # the first message's turn: leased, its worker about to claim
    assert taken.item_id == str(unsent_job.id)

    requeued = []
    assert fair_queue.run_turn(kind="assembly", item_id=str(unsent_job.id), traceparent=None,
                               requeue=requeued.append) is None
    assert AssemblyJob.objects.get(id=unsent_job.id).status == "queued"  # left to the lease holder
    assert fair_redis.zcard(f"ctxeng:fair:run:{unsent_job.tenant_id}") == 1
    assert fair_redis.llen(f"ctxeng:fair:q:{unsent_job.tenant_id}") == 0  # not queued a second time


@pytest.mark.parametrize("kind", ["assembly", "preview"])
def test_a_turn_with_every_waiting_tenant_at_its_cap_sends_its_message_again_later(kind, fair_redis, settings):
    """The task itself (manifests.run_assembly_job, policies.run_impact_preview), run as a worker
    runs it: when the turn finds every waiting tenant at its cap it runs nothing and sends its own
    message again (the same task, item and keyword arguments) CTXENG_FAIR_REQUEUE_SECONDS later."""
    import base64

    from ctxeng.server import fair_queue
    from manifests.tasks import run_assembly_job
    from policies.tasks import run_impact_preview

    settings.CTXENG_FAIR_TENANT_MAX_RUNNING = 1
    settings.CTXENG_FAIR_LEASE_SECONDS = 3600
    assert fair_queue.enabled()
    running, waiting = ids(2)
    for item in (running, waiting):
        fair_queue.push(kind=kind, item_id=item, tenant_id="1")
    assert take_as(fair_queue.holder_of(4242, 4241)) == ("1", f"{kind}:{running}")
    fair_redis.delete("celery")

    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    if kind == "assembly":
        run_assembly_job.apply(args=[waiting], kwargs={"traceparent": traceparent})
    else:
        run_impact_preview.apply(args=[waiting])
    [message] = [json.loads(m) for m in fair_redis.lrange("celery", 0, -1)]
    assert message["headers"]["task"] == fair_queue.TASKS[kind]
    assert message["headers"]["eta"] is not None
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert args == [waiting]
    assert kwargs == ({"traceparent": traceparent} if kind == "assembly" else {})
    assert fair_redis.lrange("ctxeng:fair:q:1", 0, -1) == [f"{kind}:{waiting}".encode()]  # still waiting its turn


def test_a_message_whose_entry_was_lost_runs_its_job_under_a_lease(unsent_job, fair_redis):
    """The entry is gone (a broker restart without persistence) but the message came: the job is
    queued again and runs in a turn of its own, its lease released after."""
    from ctxeng.server import fair_queue
    from manifests.models import AssemblyJob

    leased_during_run = []
    run = fair_queue._runners["assembly"]  # noqa: SLF001 - observe the lease while the job runs

    def observed(item_id, traceparent):
        leased_during_run.append(fair_redis.zcard(f"ctxeng:fair:run:{unsent_job.tenant_id}"))
        return run(item_id, traceparent)

    fair_queue._runners["assembly"] = observed  # noqa: SLF001
    try:
        fair_queue.run_turn(kind="assembly", item_id=str(unsent_job.id), traceparent=None,
                            requeue=lambda countdown: pytest.fail("requeued"))
    finally:
        fair_queue._runners["assembly"] = run  # noqa: SLF001
    assert leased_during_run == [1]
    assert AssemblyJob.objects.get(id=unsent_job.id).status == "ready"
    assert fair_redis.zcard(f"ctxeng:fair:run:{unsent_job.tenant_id}") == 0


# --------------------------------------------------------------------------- on real workers


@pytest.fixture
def two_tenants(published_policy, outsider_user, example_policy_text, api, agent_api):
    """Tenant A (`tenant-x`, agent_api) and tenant B (`tenant-z`), each with the example policy
    (B's published revision: `two_tenants["revision"]`)."""
    from ctxeng.accounts.models import Tenant
    from policies.services import policy_import

    revision = policy_import(tenant=Tenant.objects.get(slug=TENANT_B), text=example_policy_text, user=outsider_user,
                             publish=True)
    return {TENANT_A: agent_api, TENANT_B: api(outsider_user), "revision": revision, "user_b": outsider_user}


def submit(clients, example_request, tenant: str, run_id: str) -> str:
    body = json.loads(json.dumps(example_request).replace(TENANT_A, tenant)) | {"run_id": run_id}
    response = clients[tenant].post("/api/v1/assemblies/", body, format="json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def wait_all_final(job_ids: list[str], workers) -> None:
    from manifests.models import AssemblyJob

    deadline = time.monotonic() + GENEROUS
    while AssemblyJob.objects.filter(id__in=job_ids, status__in=("queued", "running")).exists():
        assert time.monotonic() < deadline, "\n".join(w.log()[-3000:] for w in workers)
        time.sleep(0.25)
    statuses = dict(AssemblyJob.objects.filter(id__in=job_ids).values_list("id", "status"))
    assert set(statuses.values()) == {"ready"}, (statuses, "\n".join(w.log()[-3000:] for w in workers))


def claim_order(job_ids: list[str]) -> list[str]:
    from manifests.models import AssemblyJob

    return [str(pk) for pk in AssemblyJob.objects.filter(id__in=job_ids).order_by("claimed_at").values_list("id", flat=True)]


HEAVY = 6


@pytest.mark.slow
def test_a_small_job_of_one_tenant_runs_before_the_second_of_anothers_backlog(
    fair_redis, two_tenants, example_request, start_worker
):
    """Tenant A queues HEAVY jobs, then tenant B one; one worker with one process takes them all.
    Round-robin over the two tenants gives B the second turn (first in, first out: the last)."""
    backlog = [submit(two_tenants, example_request, TENANT_A, f"a-{n}") for n in range(HEAVY)]
    small = submit(two_tenants, example_request, TENANT_B, "b-0")
    worker = start_worker()
    wait_all_final([*backlog, small], [worker])
    order = claim_order([*backlog, small])
    assert order.index(small) == 1, order
    assert order == [backlog[0], small, *backlog[1:]]


@pytest.mark.slow
def test_with_fair_dispatch_off_the_small_job_waits_for_the_whole_backlog(
    fair_redis, two_tenants, example_request, start_worker, settings
):
    """The same submissions, first in, first out: the test above would see B last without the fix."""
    settings.CTXENG_FAIR_DISPATCH = False
    backlog = [submit(two_tenants, example_request, TENANT_A, f"a-{n}") for n in range(HEAVY)]
    small = submit(two_tenants, example_request, TENANT_B, "b-0")
    worker = start_worker(CTXENG_FAIR_DISPATCH="0")
    wait_all_final([*backlog, small], [worker])
    assert claim_order([*backlog, small]) == [*backlog, small]


@pytest.mark.slow
def test_a_turn_runs_whichever_kind_of_job_is_next_an_assembly_or_an_impact_preview(
    fair_redis, two_tenants, example_request, start_worker
):
    """Tenant A queues two assemblies, then tenant B an impact preview; one worker process. The
    messages come in that order (assembly, assembly, preview), the turns go A, B, A: the second
    assembly's message runs B's preview and the preview's message A's second assembly."""
    from manifests.models import AssemblyJob
    from policies.models import ImpactPreview
    from policies.services import impact_preview_start

    jobs = [submit(two_tenants, example_request, TENANT_A, f"a-{n}") for n in range(2)]
    preview = impact_preview_start(revision=two_tenants["revision"], user=two_tenants["user_b"])
    worker = start_worker()
    wait_all_final(jobs, [worker])
    deadline = time.monotonic() + GENEROUS
    while (preview := ImpactPreview.objects.get(id=preview.id)).status in ("queued", "running"):
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.25)
    assert preview.status == "done", (preview.status, preview.error)
    first, second = (AssemblyJob.objects.get(id=job) for job in jobs)
    assert first.finished_at <= preview.started_at <= preview.finished_at <= second.claimed_at


@pytest.mark.slow
def test_jobs_over_a_tenants_cap_are_requeued_and_still_complete_one_at_a_time(
    fair_redis, two_tenants, example_request, start_worker
):
    """Two worker processes, tenant A capped at one: A's jobs never overlap (each is claimed after
    the one before it finished), the turns that found A at its cap were requeued, and B's job took
    the free worker before A's second job started."""
    from manifests.models import AssemblyJob

    env = {"CTXENG_FAIR_TENANT_MAX_RUNNING": "1", "CTXENG_FAIR_REQUEUE_SECONDS": "0.2",
           "CTXENG_TEST_TASK_SLEEP_SECONDS": "3"}
    workers = [start_worker(**env), start_worker(**env)]
    capped = [submit(two_tenants, example_request, TENANT_A, f"a-{n}") for n in range(3)]
    small = submit(two_tenants, example_request, TENANT_B, "b-0")
    wait_all_final([*capped, small], workers)

    runs = list(AssemblyJob.objects.filter(id__in=capped).order_by("claimed_at").values_list("claimed_at", "finished_at"))
    for (_, finished), (claimed, _) in zip(runs, runs[1:], strict=False):
        assert claimed >= finished, runs
    assert "turn requeued" in "".join(w.log() for w in workers)
    order = claim_order([*capped, small])
    assert order.index(small) < order.index(claim_order(capped)[1]), order


@pytest.mark.slow
def test_the_slot_of_a_killed_worker_is_freed_when_its_lease_expires(
    fair_redis, two_tenants, example_request, start_worker
):
    """Tenant A capped at one; the worker running A's first job is SIGKILLed, so its lease is never
    released. Once the lease expires the next worker runs A's second job, and the first too (sent
    again by the stale-job sweep): without the expiry A would stay at its cap for ever."""
    from manifests.models import AssemblyJob

    quick = {"CTXENG_FAIR_TENANT_MAX_RUNNING": "1", "CTXENG_FAIR_LEASE_SECONDS": "3",
             "CTXENG_FAIR_REQUEUE_SECONDS": "0.2"}
    doomed = start_worker(CTXENG_TEST_TASK_SLEEP_SECONDS="600", **quick)
    first = submit(two_tenants, example_request, TENANT_A, "a-0")
    deadline = time.monotonic() + GENEROUS
    while AssemblyJob.objects.get(id=first).status != "running":
        assert time.monotonic() < deadline, doomed.log()[-3000:]
        time.sleep(0.1)
    doomed.kill()

    second = submit(two_tenants, example_request, TENANT_A, "a-1")
    worker = start_worker(CTXENG_HEARTBEAT_SECONDS="0.5", CTXENG_STALE_AFTER_SECONDS="3", CTXENG_SWEEP_SECONDS="1",
                          **quick)
    wait_all_final([first, second], [worker])
    assert AssemblyJob.objects.get(id=first).attempts == 2
    assert "expired (its lease was not renewed); queued again" in worker.log()


def lease_counts(fair_redis, tenant_id: int, seen: list[int]) -> list[bytes]:
    """The entries the tenant has on workers now, their count added to `seen`."""
    held = fair_redis.zrange(f"ctxeng:fair:run:{tenant_id}", 0, -1)
    seen.append(len(held))
    return held


@pytest.mark.slow
def test_a_killed_pool_process_frees_its_slot_at_once_and_the_tenants_next_job_runs(
    fair_redis, two_tenants, example_request, start_worker
):
    """Issue 51, N9: tenant A capped at one, one worker of two processes; A's first job hangs
    (a test hook for its run), A's second waits at the cap. The pool process running the first
    is SIGKILLed (the process named by its lease's holder; the worker's main process lives on).
    The main process frees the slot when the pool reports the process lost, so A's second job
    runs, on the worker's other process, while every lease is still far from expiring (600 s,
    beyond the test's deadline): without the release the slot stays held and the test fails.
    Every count of A's entries on workers seen along the way is at most the cap."""
    import os
    import signal

    from ctxeng.accounts.models import Tenant
    from manifests.models import AssemblyJob

    tenant_a = Tenant.objects.get(slug=TENANT_A).id
    worker = start_worker(concurrency=2, CTXENG_FAIR_TENANT_MAX_RUNNING="1", CTXENG_FAIR_LEASE_SECONDS="600",
                          CTXENG_FAIR_REQUEUE_SECONDS="0.2", CTXENG_TEST_TASK_SLEEP_SECONDS="600",
                          CTXENG_TEST_TASK_SLEEP_RUN_ID="a-hangs")
    seen: list[int] = []
    first = submit(two_tenants, example_request, TENANT_A, "a-hangs")
    deadline = time.monotonic() + GENEROUS
    while AssemblyJob.objects.get(id=first).status != "running":
        lease_counts(fair_redis, tenant_a, seen)
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.1)
    second = submit(two_tenants, example_request, TENANT_A, "a-next")
    while "turn requeued" not in worker.log():  # the second job's turn found A at its cap
        lease_counts(fair_redis, tenant_a, seen)
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.1)
    assert AssemblyJob.objects.get(id=second).status == "queued"

    holder = fair_redis.hget("ctxeng:fair:holders", f"{tenant_a}|assembly:{first}".encode()).decode()
    pool_pid = int(holder.rsplit(":", 1)[1])
    assert pool_pid != worker.process.pid
    os.kill(pool_pid, signal.SIGKILL)
    killed = time.monotonic()

    freed = None
    while AssemblyJob.objects.get(id=second).status != "ready":
        held = lease_counts(fair_redis, tenant_a, seen)
        if freed is None and f"assembly:{first}".encode() not in held:
            freed = time.monotonic()
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.05)
    assert freed is not None
    assert max(seen) <= 1, seen
    assert worker.process.poll() is None  # the worker lived on; only its pool process died
    assert f"was on pool process {pool_pid}, which is gone" in worker.log()
    print(f"\nslot freed {freed - killed:.2f} s after the SIGKILL; A's next job ready "
          f"{time.monotonic() - killed:.2f} s after it")


PREVIEW_SLEEP = "15"  # each preview holds its worker process this long (a test hook) before it runs


@pytest.mark.slow
def test_a_small_job_of_another_tenant_completes_before_the_previews_of_the_first(
    fair_redis, two_tenants, example_request, example_policy_text, editor_user, start_worker
):
    """Issue 51, N3: one worker of two processes; tenant A's editor starts two impact previews (of
    two revisions), then tenant B submits a small job. Both previews' turns are taken before B
    submits (the first leased, the second requeued at the lane). B's job runs on the free process
    and is done before A's first preview ends; A's second preview starts after the first ended.
    Without the lane (CTXENG_FAIR_TENANT_MAX_PREVIEWS=0) both previews held both processes and
    B's job waited for one of them to end: the order asserted here fails."""
    from ctxeng.accounts.models import Tenant
    from manifests.models import AssemblyJob
    from policies.models import ImpactPreview
    from policies.services import impact_preview_start, policy_import

    tenant_a = Tenant.objects.get(slug=TENANT_A)
    draft = policy_import(tenant=tenant_a, text=example_policy_text.replace("revision: 3", "revision: 4", 1),
                          user=editor_user, publish=False)
    worker = start_worker(concurrency=2, CTXENG_TEST_PREVIEW_SLEEP_SECONDS=PREVIEW_SLEEP,
                          CTXENG_FAIR_REQUEUE_SECONDS="0.5")
    previews = [impact_preview_start(revision=revision, user=editor_user).id
                for revision in (draft.policy.revisions.get(revision=3), draft)]

    def both_turns_taken() -> bool:
        held = [e for e in fair_redis.zrange(f"ctxeng:fair:run:{tenant_a.id}", 0, -1) if e.startswith(b"preview:")]
        return len(held) == 2 or (len(held) == 1 and "turn requeued" in worker.log())

    deadline = time.monotonic() + GENEROUS
    while not both_turns_taken():
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.1)
    small = submit(two_tenants, example_request, TENANT_B, "b-small")
    wait_all_final([small], [worker])
    while ImpactPreview.objects.filter(id__in=previews, status__in=("queued", "running")).exists():
        assert time.monotonic() < deadline, worker.log()[-3000:]
        time.sleep(0.25)

    first, second = sorted(ImpactPreview.objects.filter(id__in=previews), key=lambda p: p.finished_at)
    assert (first.status, second.status) == ("done", "done"), (first.error, second.error)
    assert AssemblyJob.objects.get(id=small).finished_at < first.finished_at
    assert second.started_at >= first.finished_at
