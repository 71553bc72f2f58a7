"""Benchmark 4 — the service on real components: Redis broker, prefork Celery workers, committed rows.

Runs in a child interpreter with its own SQLite file and a private redis-server:

- engine time: the worked example parsed and assembled in process (median);
- latency: the worked example submitted through `assembly_job_submit` (what the REST API calls),
  one at a time; submit -> `ready` seen in the database, p50 against engine time + 150 ms;
- throughput: a burst of jobs on `WORKERS` prefork processes, against 0.8 x workers / engine time;
  the CPU each process spent per job during that burst (worker pool, worker parent, Redis, and
  this process, which submits and polls like the REST API and a client would) is reported too,
  with the bound it implies on this machine: cores / CPU per job;
- ceiling: the same worker fed a burst of deliveries that find nothing to claim (the real task,
  one guarded UPDATE, no engine): jobs/s of Celery + Redis + one query on these cores;
- queue drain: a burst committed in one transaction (enqueued together), so only the workers run
  while the clock does: what the workers alone sustain, against the same target (reported);
- worker CPU per job against the engine's (issue 28, restating issue 13), in this process (no
  Celery), interleaved rounds as `bench.timing` runs them: a submitted job claimed and assembled
  as a worker does (`assembly_job_claim` + `assembly_job_assemble`: load, read the request from
  the content store, parse, artifacts and events, engine, pack, seal) against the engine on the
  same request bytes (`parse_request` + `assemble`, what bench 1 times), both with the same
  process's count cache. Targets: on the worked example the worker within the engine + 10 ms, on
  the 2,000-candidate bench workload (`bench.workload`, its policy published) within 1.15x the
  engine, cold (a fresh count cache and an empty read memo before each call: a fresh worker, as
  bench 1's cold row) and as the agent's next step (the same candidates again under a new step id,
  counts warm and the worker's read memo, `CTXENG_CONTENT_READ_MEMO_MB`, holding the last step's
  blobs: reported against the same bound). Under Celery the workers' CPU per no-op delivery is
  added to the bound (the burst row's CPU per job against it);
- a second burst during which one pool process is SIGKILLed: every job must end final (none lost:
  acks_late + reject_on_worker_lost requeue it, the stale-job sweeper is tuned to seconds here) and
  no job may have more than one manifest; both counts are reported.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .infra import ROOT, python, python_env, redis_server
from .timing import Row, at_least, at_most, interleaved, median, ms

WORKERS = 2


def run(*, quick: bool = False) -> list[Row]:
    if not (ROOT / "manifests" / "tasks.py").exists():
        return [Row("4 service", "section", "not run: the service (manifests.tasks) is not built yet")]
    with tempfile.TemporaryDirectory(prefix="ctxeng-bench-svc-") as tmp, redis_server() as url:
        env = python_env()
        env.update(
            DJANGO_SETTINGS_MODULE="ctxeng.server.settings",
            DATABASE_URL=f"sqlite:///{tmp}/bench.sqlite3",
            REDIS_URL=url,
            CTXENG_HEARTBEAT_SECONDS="1",
            CTXENG_STALE_AFTER_SECONDS="4",
            CTXENG_SWEEP_SECONDS="1",
            CTXENG_REQUEUE_QUEUED_AFTER_SECONDS="20",
            DJANGO_DEBUG="0",
            DJANGO_SECRET_KEY="bench-only-not-secret-" + "x" * 40,
        )
        out = subprocess.run(
            [python(), "-m", "bench.service", "child", "quick" if quick else "full"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
        )
    if out.returncode != 0:
        return [Row("4 service", "section", "not run: " + (out.stderr.strip().splitlines() or ["child failed"])[-1][:300], data={"stderr": out.stderr[-3000:]})]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    e = r["engine_seconds"]
    rows = [
        at_most(
            "4 service", "submit -> ready p50, worked example", f"{ms(r['latency_p50'])} (engine {ms(e)}, target {ms(e + 0.150)})",
            r["latency_p50"] / (e + 0.150), 1.0, latencies=r["latencies"],
        ),
        at_least(
            "4 service", f"throughput, {WORKERS} prefork workers", f"{r['throughput']:.1f} jobs/s (0.8 x {WORKERS} / engine = {0.8 * WORKERS / e:.1f})",
            r["throughput"] / (0.8 * WORKERS / e), 1.0, **{k: r[k] for k in ("burst", "burst_seconds", "cpu_ms_per_job")},
        ),
        Row(
            "4 service", "CPU per job in the throughput burst",
            "workers {pool:.1f} ms (engine {engine:.1f} ms), worker parent {parent:.1f} ms, Redis {redis:.1f} ms, "
            "submitter + poller {submitter:.1f} ms; {cpus} cores / {total:.1f} ms = {bound:.1f} jobs/s".format(
                engine=1000 * e, cpus=r["cpus"], total=r["cpu_total_ms"], bound=r["cpu_bound"], **r["cpu_ms_per_job"]),
            round(r["throughput"] / r["cpu_bound"], 3), "(reported)", None,
            "throughput / the bound these CPU costs set on this machine", {"cpu_ms_per_job": r["cpu_ms_per_job"]},
        ),
        Row(
            "4 service", "CPU per job by step, in process (no Celery), worked example",
            ", ".join([f"claim {r['phases_ms']['claim']:.1f}"]
                      + [f"{label} {r['phases_ms'][name]:.1f}" for name, label in PHASES.items()]
                      + [f"rest {r['phases_ms']['rest']:.1f}", f"total {r['phases_ms']['total']:.1f} ms"]),
            round(r["phases_ms"]["total"] / r["phases_ms"]["assemble"], 3), "(reported)", None,
            "total / the engine's part; rest: loading the job, the seal's status update and commit, the manifest's JSON form",
            {"phases_ms": r["phases_ms"]},
        ),
        Row(
            "4 service", "CPU per job, the least a worker could do to seal a job, in process (no Celery), worked example",
            "total {total:.1f} ms, engine {assemble:.1f} ms; with the workers' CPU per no-op delivery ({noop:.1f} ms) "
            "under Celery: {celery:.2f}x the engine".format(
                noop=r["noop_cpu_ms"]["pool"], celery=(r["least_ms"]["total"] + r["noop_cpu_ms"]["pool"]) / r["least_ms"]["assemble"],
                **r["least_ms"]),
            round(r["least_ms"]["total"] / r["least_ms"]["assemble"], 3), "(reported)", None,
            "total / the engine's part; claim, load, read and parse the request, engine, the manifest and payload as one "
            "JSON row with the status update: no content store, item rows, artifacts, events or packing",
            {"least_ms": r["least_ms"]},
        ),
        Row(
            "4 service", "ceiling: deliveries that claim nothing, same worker",
            f"{r['noop_throughput']:.1f} deliveries/s ({r['noop']} in {r['noop_seconds']:.2f} s); CPU per delivery: "
            f"workers {r['noop_cpu_ms']['pool']:.1f} ms, worker parent {r['noop_cpu_ms']['parent']:.1f} ms",
            round(r["throughput"] / r["noop_throughput"], 3), "(reported)", None,
            "throughput / this ceiling of Celery + Redis + one query; the workers' CPU per delivery is what every job "
            "pays before its claim", {"noop": r["noop"], "noop_seconds": r["noop_seconds"], "noop_cpu_ms": r["noop_cpu_ms"]},
        ),
        Row(
            "4 service", f"queue drain: {r['burst']} jobs committed at once, {WORKERS} prefork workers",
            f"{r['drain']:.1f} jobs/s (workers {r['drain_pool_ms']:.1f} ms CPU per job; 0.8 x {WORKERS} / engine = {0.8 * WORKERS / e:.1f})",
            round(r["drain"] / (0.8 * WORKERS / e), 3), "(reported)", None,
            "the submitter idle while the clock runs", {"drain_seconds": r["drain_seconds"]},
        ),
        Row(
            "4 service", "SIGKILL a worker mid-burst: lost jobs / duplicate manifests",
            f"{r['lost']} lost, {r['duplicates']} duplicate of {r['kill_burst']} (killed pid {r['killed_pid']})",
            None, "0 and 0", r["lost"] == 0 and r["duplicates"] == 0, data={"final_statuses": r["final_statuses"]},
        ),
        *_worker_rows(r),
    ]
    return rows


EXAMPLE_SLACK_MS = 10.0  # issue 28: the worker within the engine's CPU + 10 ms on the worked example
WORKLOAD_RATIO = 1.15  # issue 28: the worker within 1.15x the engine on the 2,000-candidate workload


def _worker_rows(r: dict) -> list[Row]:
    """Issue 28's worker targets (restating issue 13's), from `_worker_vs_engine`'s medians."""
    ex, noop, pool = r["worker_example"], r["noop_cpu_ms"]["pool"], r["cpu_ms_per_job"]["pool"]
    rows = [
        Row("4 service", "worker CPU per job vs the engine's, in process (no Celery), worked example",
            f"worker {ex['worker_ms']:.1f} ms, engine {ex['engine_ms']:.1f} ms: +{ex['worker_ms'] - ex['engine_ms']:.1f} ms "
            f"({ex['rounds']} interleaved rounds)",
            round(ex["worker_ms"] / ex["engine_ms"], 3), f"<= engine + {EXAMPLE_SLACK_MS:g} ms",
            ex["worker_ms"] - ex["engine_ms"] <= EXAMPLE_SLACK_MS, "issue 28; the least-worker row is the reference", ex),
        Row("4 service", "worker CPU per job vs the engine's, under Celery, worked example (the throughput burst's workers)",
            f"workers {pool:.1f} ms a job; bound: engine {ex['engine_ms']:.1f} + {EXAMPLE_SLACK_MS:g} + no-op delivery "
            f"{noop:.1f} = {ex['engine_ms'] + EXAMPLE_SLACK_MS + noop:.1f} ms",
            round(pool / ex["engine_ms"], 3), f"<= engine + {EXAMPLE_SLACK_MS:g} ms + no-op delivery",
            pool <= ex["engine_ms"] + EXAMPLE_SLACK_MS + noop, "issue 28: the measured no-op delivery cost added to the bound"),
    ]
    nxt, least, phases = r["worker_workload_next"], r["least_workload_ms"], r["phases_workload_ms"]
    rows += [
        Row("4 service", "CPU per job by step, in process (no Celery), 2,000-candidate workload, next step",
            ", ".join([f"claim {phases['claim']:.0f}"] + [f"{label} {phases[name]:.0f}" for name, label in PHASES.items()]
                      + [f"rest {phases['rest']:.0f}", f"total {phases['total']:.0f} ms"]),
            round(phases["total"] / phases["assemble"], 3), "(reported)", None,
            "total / the engine's part; where the worker's CPU beyond the engine goes at this size", {"phases_ms": phases}),
        Row("4 service", "CPU per job, the least a worker could do to seal a job, in process (no Celery), 2,000-candidate workload, next step",
            f"total {least['total']:.0f} ms (its engine part {least['assemble']:.0f} ms); the engine on the same request bytes, "
            f"parse included, {nxt['engine_ms']:.0f} ms (the next-step row below)",
            round(least["total"] / nxt["engine_ms"], 3), "(reported)", None,
            "total / the engine's CPU with its parse: the floor under the 1.15x target, as the least-worker row is for the "
            "worked example (one JSON row in, one out: no content store, item rows, artifacts, events or packing)",
            {"least_ms": least}),
    ]
    for key, label in (("worker_workload_cold", "cold (fresh count cache and read memo)"),
                       ("worker_workload_next", "next step (same candidates, new step id; counts and read memo warm)")):
        w = r[key]
        rows.append(at_most(
            "4 service", f"worker CPU per job vs the engine's, in process (no Celery), 2,000-candidate workload, {label}",
            f"worker {w['worker_ms']:.0f} ms, engine {w['engine_ms']:.0f} ms ({w['rounds']} interleaved rounds)",
            w["worker_ms"] / w["engine_ms"], WORKLOAD_RATIO, "issue 28", **w))
    return rows


def _child(quick: bool) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import transaction

    from ctxeng.engine import assemble, parse_policy, parse_request
    from manifests.examples import example_json, example_text
    from manifests.models import AssemblyJob, Manifest
    from manifests.services import assembly_job_submit

    call_command("migrate", verbosity=0, interactive=False)
    call_command("load_example", stdout=open(os.devnull, "w"))
    user = get_user_model().objects.get(username="demo")
    base = example_json("request.json")

    policy = parse_policy(example_text("policy.yaml"))
    engine = []
    for _ in range(15):
        t0 = time.perf_counter()
        assemble(parse_request(base), policy)
        engine.append(time.perf_counter() - t0)
    engine_seconds = statistics.median(engine)

    import redis

    from manifests.tasks import run_assembly_job

    broker = redis.Redis.from_url(os.environ["REDIS_URL"])
    redis_pid = int(broker.info("server")["process_id"])
    log = open(Path(os.environ["DATABASE_URL"].removeprefix("sqlite:///")).with_suffix(".worker.log"), "w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "ctxeng", "worker", "--pool", "prefork", "-c", str(WORKERS), "--loglevel", "WARNING", "-O", "fair"],
        cwd=ROOT, env=os.environ, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    final = {"ready", "blocked", "failed"}
    seq = [0]

    def submit():
        seq[0] += 1
        body = dict(base, step_id=f"bench-{seq[0]}")
        job, _ = assembly_job_submit(user=user, data=body, idempotency_key=None)
        return job.id

    def wait(ids, timeout):
        deadline = time.monotonic() + timeout
        pending = set(ids)
        while pending and time.monotonic() < deadline:
            done = set(AssemblyJob.objects.filter(id__in=pending, status__in=final).values_list("id", flat=True))
            pending -= done
            if pending:
                time.sleep(0.005 if len(pending) == 1 else 0.05)
        return pending

    try:
        if wait([submit()], 60):  # the worker is up once it has finished one job
            raise RuntimeError("the Celery worker did not finish a job within 60 s")
        latencies = []
        for _ in range(8 if quick else 25):
            t0 = time.perf_counter()
            jid = submit()
            if wait([jid], 30):
                raise RuntimeError("a latency job did not finish within 30 s")
            latencies.append(time.perf_counter() - t0)

        burst = 40 if quick else 120
        pool = _children(worker.pid)
        before = _cpu_seconds(worker.pid, pool, redis_pid)
        t0 = time.perf_counter()
        ids = [submit() for _ in range(burst)]
        left = wait(ids, 120)
        burst_seconds = time.perf_counter() - t0
        throughput = (burst - len(left)) / burst_seconds
        after = _cpu_seconds(worker.pid, pool, redis_pid)
        cpu_ms_per_job = {k: 1000 * (after[k] - before[k]) / burst for k in before}
        cpu_total_ms = sum(cpu_ms_per_job.values())

        # The ceiling: deliveries of the real task for jobs already final (each claims nothing).
        noop = burst
        done = list(AssemblyJob.objects.filter(status__in=final).values_list("id", flat=True)[:noop])
        before = _cpu_seconds(worker.pid, pool, redis_pid)
        t0 = time.perf_counter()
        for n in range(noop):
            run_assembly_job.apply_async(args=[str(done[n % len(done)])])
        while broker.llen("celery") or broker.hlen("unacked"):
            if time.perf_counter() - t0 > 60:
                raise RuntimeError("the no-op deliveries did not drain within 60 s")
            time.sleep(0.002)
        noop_seconds = time.perf_counter() - t0
        after = _cpu_seconds(worker.pid, pool, redis_pid)
        noop_cpu_ms = {k: 1000 * (after[k] - before[k]) / noop for k in ("pool", "parent")}

        # The workers alone: a burst committed in one transaction (enqueued together on commit),
        # so the submitter is idle while the clock runs.
        before = _cpu_seconds(worker.pid, pool, redis_pid)
        with transaction.atomic():
            ids = [submit() for _ in range(burst)]
            t0 = time.perf_counter()
        left = wait(ids, 120)
        drain_seconds = time.perf_counter() - t0
        drain = (burst - len(left)) / drain_seconds
        drain_pool_ms = 1000 * (_cpu_seconds(worker.pid, pool, redis_pid)["pool"] - before["pool"]) / burst

        kill_burst = 40 if quick else 80
        ids = [submit() for _ in range(kill_burst)]
        time.sleep(0.3)
        children = _children(worker.pid)
        killed = children[0] if children else None
        if killed:
            os.kill(killed, signal.SIGKILL)
        left = wait(ids, 90)
        statuses = dict.fromkeys(final, 0)
        for s in AssemblyJob.objects.filter(id__in=ids).values_list("status", flat=True):
            statuses[s] = statuses.get(s, 0) + 1
        per_job = {}
        for jid in Manifest.objects.filter(job_id__in=ids).values_list("job_id", flat=True):
            per_job[jid] = per_job.get(jid, 0) + 1
        duplicates = sum(n - 1 for n in per_job.values() if n > 1)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
    phases = _phases(submit, 10 if quick else 40)
    least = _least_worker(submit, 10 if quick else 40)
    worker_example = _worker_vs_engine(submit, base, policy, 8 if quick else 30)
    workload_submit, workload_body, workload_policy = _workload(user)
    worker_workload_cold = _worker_vs_engine(workload_submit, workload_body, workload_policy, 2 if quick else 5, cold=True)
    worker_workload_next = _worker_vs_engine(workload_submit, workload_body, workload_policy, 2 if quick else 5)
    phases_workload = _phases(workload_submit, 2 if quick else 5)
    least_workload = _least_worker(workload_submit, 2 if quick else 6)
    print(json.dumps({
        "worker_example": worker_example,
        "worker_workload_cold": worker_workload_cold,
        "worker_workload_next": worker_workload_next,
        "phases_workload_ms": phases_workload,
        "least_workload_ms": least_workload,
        "phases_ms": phases,
        "least_ms": least,
        "engine_seconds": engine_seconds,
        "latencies": latencies,
        "latency_p50": statistics.median(latencies),
        "burst": burst,
        "burst_seconds": burst_seconds,
        "throughput": throughput,
        "cpu_ms_per_job": cpu_ms_per_job,
        "cpu_total_ms": cpu_total_ms,
        "cpus": os.cpu_count() or 1,
        "cpu_bound": (os.cpu_count() or 1) * 1000 / cpu_total_ms,
        "noop": noop,
        "noop_seconds": noop_seconds,
        "noop_throughput": noop / noop_seconds,
        "noop_cpu_ms": noop_cpu_ms,
        "drain": drain,
        "drain_seconds": drain_seconds,
        "drain_pool_ms": drain_pool_ms,
        "kill_burst": kill_burst,
        "killed_pid": killed,
        "lost": len(left),
        "duplicates": duplicates,
        "final_statuses": statuses,
    }))


# The worker's steps a job's CPU goes to, as `assembly_job_assemble` calls them (module globals of
# manifests.services, wrapped for the measure); what is left of a job's CPU (loading the job row,
# the seal's status update and commit, the manifest's JSON form) is "rest".
PHASES = {
    "job_request": "read the request (content store)",
    "parse_request": "parse it",
    "request_as_assembled": "artifacts and lifecycle events",
    "assemble": "engine",
    "_prepare_manifest": "pack the manifest",
    "_write_manifest": "write the manifest",
}


def _phases(submit, jobs: int) -> dict[str, float]:
    """CPU per job by step, in this process (no Celery): jobs submitted (their messages go to a
    stopped worker's queue) and then claimed and assembled here, as a worker does."""
    import manifests.services as services

    spent = dict.fromkeys([*PHASES, "claim", "total"], 0.0)

    def timed(name, fn):
        def run(*args, **kwargs):
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.process_time() - t0
        return run

    originals = {name: getattr(services, name) for name in PHASES}
    ids = [submit() for _ in range(jobs + 5)]
    try:
        for name, fn in originals.items():
            setattr(services, name, timed(name, fn))
        for n, job_id in enumerate(ids):
            if n == 5:  # the first few warm this process's caches, as a worker's first jobs do
                spent = dict.fromkeys(spent, 0.0)
            t0 = time.process_time()
            attempt = services.assembly_job_claim(job_id=job_id)
            spent["claim"] += time.process_time() - t0
            services.assembly_job_assemble(job_id=job_id, attempt=attempt)
            spent["total"] += time.process_time() - t0
    finally:
        for name, fn in originals.items():
            setattr(services, name, fn)
    per_job = {name: 1000 * value / jobs for name, value in spent.items()}
    per_job["rest"] = per_job["total"] - sum(per_job[name] for name in (*PHASES, "claim"))
    return per_job


def _workload(user) -> tuple:
    """The 2,000-candidate bench workload (`bench.workload`, as bench 1 assembles it) made
    submittable here: its policy published in the worked example's tenant as a policy of its own
    (`bench-workload`), the request pinned to it. Returns (submit, request document, parsed policy)."""
    import yaml

    from ctxeng.accounts.models import Tenant
    from ctxeng.engine import parse_policy
    from manifests.services import assembly_job_submit
    from policies.services import policy_import

    from . import workload

    policy_doc = workload.make_policy()
    # A policy of its own (as bench.fairness publishes it): a revision of the worked example's would
    # widen what it loads (admission.min_relevance) and need an upgrade record with confirmed
    # failures to address (seed §8), which a benchmark has none of.
    policy_doc["policy"] = {**policy_doc["policy"], "id": "bench-workload", "revision": 1}
    revision = policy_import(tenant=Tenant.objects.get(slug="tenant-x"), text=yaml.safe_dump(policy_doc, sort_keys=False),
                             user=user, publish=True, note="bench workload")
    body = workload.make_request()
    body["policy"] = {"id": revision.policy.policy_id, "revision": revision.revision}
    seq = [0]

    def submit():
        seq[0] += 1
        job, _ = assembly_job_submit(user=user, data=dict(body, step_id=f"bench-workload-{seq[0]}"), idempotency_key=None)
        return job.id

    return submit, body, parse_policy(policy_doc)


def _worker_vs_engine(submit, body: dict, policy, rounds: int, *, cold: bool = False) -> dict:
    """CPU per job of the product's worker in this process (claim + assemble a submitted job, as
    `run_assembly_job` does without Celery) against the engine on the same request bytes, in
    interleaved rounds (`bench.timing.interleaved`: the order rotates, a full collection before
    each call). Submitting is set-up, not timed. `cold`: this process's tokenizers are made afresh
    and the worker's read memo emptied before each call, so neither contender finds a count it made
    before and the worker decodes every blob it reads (it reads no shared count cache in this
    process either). Two warm-up rounds first (a worker's first jobs)."""
    import manifests.services as services
    from ctxeng.content.store import read_memo
    from ctxeng.engine import assemble, parse_request, tokens

    data = json.dumps(body).encode()
    pending: list = []

    def setup(name: str) -> None:
        if name == "worker":
            pending.append(submit())
        if cold:  # a fresh worker: no count, and no decoded blob of its read memo, from before
            tokens._TOKENIZERS.clear()
            read_memo().clear()

    def worker() -> None:
        job_id = pending.pop()
        status = services.assembly_job_assemble(job_id=job_id, attempt=services.assembly_job_claim(job_id=job_id))
        if status not in ("ready", "blocked"):
            raise RuntimeError(f"bench job {job_id} ended {status}")

    def engine() -> None:
        assemble(parse_request(data), policy)

    contenders = {"worker": worker, "engine": engine}
    interleaved(contenders, 2, setup=setup)
    times = interleaved(contenders, rounds, setup=setup)
    return {"worker_ms": 1000 * median(times["worker"]), "engine_ms": 1000 * median(times["engine"]), "rounds": rounds,
            "cold": cold, "worker_seconds": times["worker"], "engine_seconds": times["engine"]}


def _least_worker(submit, jobs: int) -> dict[str, float]:
    """CPU per job, in this process, of the least a worker could do and still seal a job: claim
    it, load it, read its request from one JSON row and parse it, run the engine, and write the
    manifest and payload as one JSON row next to the status update, in one transaction. No content
    store, no item rows, no artifacts or lifecycle events, no packing: what the product's worker
    adds to this is what those features cost. Returns the total and the engine's part, medians of
    per-job CPU."""
    from django.db import connection, transaction
    from django.utils import timezone

    import manifests.services as services
    from ctxeng.engine import assemble, parse_request
    from manifests.models import AssemblyJob, JobStatus

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_least_request (job_id TEXT PRIMARY KEY, body TEXT NOT NULL)")
        cursor.execute("CREATE TABLE IF NOT EXISTS bench_least_manifest (job_id TEXT PRIMARY KEY, body TEXT NOT NULL)")
    ids = [submit() for _ in range(jobs + 5)]
    with connection.cursor() as cursor:  # each request also as one JSON row, read without the content store
        cursor.executemany("INSERT INTO bench_least_request (job_id, body) VALUES (%s, %s)",
                           [(str(job_id), json.dumps(services.job_request(AssemblyJob.objects.get(id=job_id)))) for job_id in ids])
    totals, engines = [], []
    for job_id in ids:
        t0 = time.process_time()
        attempt = services.assembly_job_claim(job_id=job_id)
        job = AssemblyJob.objects.select_related("policy_revision").defer("policy_revision__body").get(id=job_id)
        policy = services._parsed_policy(job.policy_revision.pk, job.policy_revision.digest)
        with connection.cursor() as cursor:
            cursor.execute("SELECT body FROM bench_least_request WHERE job_id = %s", [str(job_id)])
            request = parse_request(json.loads(cursor.fetchone()[0]))
        t1 = time.process_time()
        result = assemble(request, policy)
        t2 = time.process_time()
        body = json.dumps({"manifest": result.manifest_dict(), "payload": result.serialized_input}, separators=(",", ":"))
        now = timezone.now()
        with transaction.atomic():
            AssemblyJob.objects.filter(id=job_id, status=JobStatus.RUNNING, attempts=attempt).update(
                status=result.status, finished_at=now, heartbeat_at=now, updated_at=now)
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO bench_least_manifest (job_id, body) VALUES (%s, %s)", [str(job_id), body])
        totals.append(time.process_time() - t0)
        engines.append(t2 - t1)
    totals, engines = totals[5:], engines[5:]  # the first few warm this process's caches
    return {"total": 1000 * statistics.median(totals), "assemble": 1000 * statistics.median(engines)}


def _cpu_seconds(parent: int, pool: list[int], redis_pid: int) -> dict[str, float]:
    """User + system CPU so far of the worker pool, its parent, Redis and this process."""

    def of(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    return {"pool": sum(of(pid) for pid in pool), "parent": of(parent), "redis": of(redis_pid),
            "submitter": time.process_time()}


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return sorted(out)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "child":
    _child(sys.argv[2] == "quick")
