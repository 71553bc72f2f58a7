"""Benchmark 4 — the service on real components: Redis broker, prefork Celery workers, committed rows.

Runs in a child interpreter with its own SQLite file and a private redis-server:

- engine time: the worked example parsed and assembled in process (median);
- latency: the worked example submitted through `assembly_job_submit` (what the REST API calls),
  one at a time; submit -> `ready` seen in the database, p50 against engine time + 150 ms;
- throughput: a burst of jobs on `WORKERS` prefork processes, against 0.8 x workers / engine time;
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
from .timing import Row, at_least, at_most, ms

WORKERS = 2


def run(*, quick: bool = False) -> list[Row]:
    if not (ROOT / "manifests" / "tasks.py").exists():
        return [Row("4 service", "section", "not run: the service (manifests.tasks) is not built yet")]
    with tempfile.TemporaryDirectory(prefix="ctxeng-bench-svc-") as tmp, redis_server() as url:
        env = python_env()
        env.update(
            DJANGO_SETTINGS_MODULE="ctxeng.settings",
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
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=420,
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
            r["throughput"] / (0.8 * WORKERS / e), 1.0, **{k: r[k] for k in ("burst", "burst_seconds")},
        ),
        Row(
            "4 service", "SIGKILL a worker mid-burst: lost jobs / duplicate manifests",
            f"{r['lost']} lost, {r['duplicates']} duplicate of {r['kill_burst']} (killed pid {r['killed_pid']})",
            None, "0 and 0", r["lost"] == 0 and r["duplicates"] == 0, data={"final_statuses": r["final_statuses"]},
        ),
    ]
    return rows


def _child(quick: bool) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

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
        t0 = time.perf_counter()
        ids = [submit() for _ in range(burst)]
        left = wait(ids, 120)
        burst_seconds = time.perf_counter() - t0
        throughput = (burst - len(left)) / burst_seconds

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
    print(json.dumps({
        "engine_seconds": engine_seconds,
        "latencies": latencies,
        "latency_p50": statistics.median(latencies),
        "burst": burst,
        "burst_seconds": burst_seconds,
        "throughput": throughput,
        "kill_burst": kill_burst,
        "killed_pid": killed,
        "lost": len(left),
        "duplicates": duplicates,
        "final_statuses": statuses,
    }))


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
