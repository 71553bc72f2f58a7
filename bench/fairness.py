"""Issue 40, finding 5 — one tenant's backlog against another tenant's small job.

`python -m bench.fairness [--heavy 16] [--alone 3]`: for each mode a fresh SQLite file, a private
redis-server as REDIS_URL, two Celery workers of one process each (the production layout's two
workers, on this machine's 2 cores). Tenant A (`tenant-x`) runs the 2,000-candidate bench workload
(`bench.workload`, a different seed per job, so neither the content store nor the count cache
makes a job light); tenant B (`tenant-b`) the worked example's request. In each mode:

- alone: B's small job submitted on idle workers, `--alone` times (the baseline, measured in the
  same run and mode);
- behind A's backlog: A submits `--heavy` heavy jobs in one transaction (so all are queued the
  moment it commits, as a client's burst would be once packing them is done), then B its small
  job at once.

B's wait is its job's submit-to-sealed time (`created_at` to `finished_at`, both written by this
machine's clock). Modes:

- `first in, first out`: CTXENG_FAIR_DISPATCH=0 — the behaviour before the fix;
- `fair dispatch (default)`: round-robin over the tenants with queued work;
- `fair dispatch, cap 1`: also CTXENG_FAIR_TENANT_MAX_RUNNING=1 (a worker stays free for others).

Reports B's wait behind the backlog against its median alone (a ratio), where B's job started
among all the jobs (its claim position), and how long A's backlog took. Writes
bench/results/issue40-fairness.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .infra import ROOT, python_env, redis_server

MODES = {
    "first in, first out": {"CTXENG_FAIR_DISPATCH": "0"},
    "fair dispatch (default)": {},
    "fair dispatch, cap 1": {"CTXENG_FAIR_TENANT_MAX_RUNNING": "1"},
}
WORKERS = 2
TENANT_B = "tenant-b"


def _env(db: Path, redis_url: str, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in python_env().items() if not k.startswith(("DJANGO_", "CTXENG_")) and k != "REDIS_URL"}
    env.update(DJANGO_SETTINGS_MODULE="ctxeng.server.settings", DATABASE_URL=f"sqlite:///{db}", REDIS_URL=redis_url,
               CTXENG_QUOTA_JOBS_PER_MINUTE="6000", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _workers(env: dict[str, str], work: Path) -> list[subprocess.Popen]:
    workers = []
    for n in range(WORKERS):
        log = work / f"worker-{n}.log"
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ctxeng", "worker", "--pool", "prefork", "--concurrency", "1",
             "--loglevel", "INFO", "--hostname", f"bench{n}@%h", "--without-gossip", "--without-mingle"],
            cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.monotonic() + 120
    for n in range(WORKERS):
        while " ready." not in (work / f"worker-{n}.log").read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {n} not ready:\n{(work / f'worker-{n}.log').read_text()}")
            time.sleep(0.2)
    return workers


def _two_tenants():
    """In a child, after django.setup(): the database migrated, the worked example loaded (tenant A
    is `tenant-x`, its user `demo`), tenant B with its agent and the example's policy published.
    Returns A's user, B's user and B's small job (the worked example's request, in tenant B)."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from ctxeng.accounts.models import Tenant
    from ctxeng.accounts.services import tenant_member_add
    from manifests.examples import example_json, example_text
    from policies.services import policy_import

    call_command("migrate", verbosity=0, interactive=False)
    call_command("load_example", stdout=open(os.devnull, "w"))  # tenant-x, user demo
    user_a = get_user_model().objects.get(username="demo")
    tenant_member_add(username="b-agent", tenant_slug=TENANT_B, roles=["agent", "reviewer", "policy_editor"])
    user_b = get_user_model().objects.get(username="b-agent")
    policy_import(tenant=Tenant.objects.get(slug=TENANT_B), text=example_text("policy.yaml"), user=user_b, publish=True)
    small = json.loads(json.dumps(example_json("request.json")).replace("tenant-x", TENANT_B))
    return user_a, user_b, small


def _wait(job_ids: list) -> None:
    from manifests.models import AssemblyJob

    deadline = time.monotonic() + 1800
    while AssemblyJob.objects.filter(id__in=job_ids, status__in=("queued", "running")).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("jobs not done within 30 minutes")
        time.sleep(0.05)


def _waited(job_id) -> float:
    """A sealed job's wait: submit to sealed."""
    from manifests.models import AssemblyJob

    job = AssemblyJob.objects.get(id=job_id)
    assert job.status == "ready", (job.status, job.error)
    return (job.finished_at - job.created_at).total_seconds()


def _alone(user_b, small: dict, alone: int) -> list[float]:
    """B's small job on idle workers, `alone` times after one that warms the workers."""
    from manifests.services import assembly_job_submit

    baseline = []
    for n in range(alone + 1):
        job, _ = assembly_job_submit(user=user_b, data=dict(small, run_id=f"b-alone-{n}"))
        _wait([job.id])
        if n:  # the first warms the workers' imports and caches
            baseline.append(_waited(job.id))
    return baseline


def _stop(workers: list[subprocess.Popen]) -> None:
    for worker in workers:
        os.killpg(worker.pid, signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)


def _child(heavy_dir: Path, heavy: int, alone: int, work: Path) -> dict:
    """In a process configured for the mode (its env): set up, start the workers, measure."""
    import django

    django.setup()
    import yaml
    from django.db import transaction

    from ctxeng.accounts.models import Tenant
    from manifests.models import AssemblyJob
    from manifests.services import assembly_job_submit
    from policies.services import policy_import

    from . import workload

    user_a, user_b, small = _two_tenants()
    policy_doc = workload.make_policy()
    policy_doc["policy"]["id"] = "bench-workload"  # a policy of its own: no upgrade records to write
    revision = policy_import(tenant=Tenant.objects.get(slug="tenant-x"), text=yaml.safe_dump(policy_doc, sort_keys=False),
                             user=user_a, publish=True)
    heavy_bodies = [json.loads(path.read_text()) for path in sorted(heavy_dir.glob("heavy-*.json"))[:heavy]]
    for body in heavy_bodies:
        body["policy"] = {"id": revision.policy.policy_id, "revision": revision.revision}

    workers = _workers(dict(os.environ), work)
    try:
        baseline = _alone(user_b, small, alone)
        with transaction.atomic():  # queued together: each is enqueued when the transaction commits
            backlog = [assembly_job_submit(user=user_a, data=dict(body, run_id=f"a-{n}"))[0].id
                       for n, body in enumerate(heavy_bodies)]
        job, _ = assembly_job_submit(user=user_b, data=dict(small, run_id="b-behind"))
        _wait([job.id, *backlog])
        claims = list(AssemblyJob.objects.filter(id__in=[job.id, *backlog]).order_by("claimed_at").values_list("id", flat=True))
        first = AssemblyJob.objects.filter(id__in=backlog).order_by("created_at").first()
        last = AssemblyJob.objects.filter(id__in=backlog).order_by("-finished_at").first()
        return {"alone": baseline, "behind": _waited(job.id), "position": claims.index(job.id) + 1,
                "jobs": len(claims), "backlog_seconds": (last.finished_at - first.created_at).total_seconds()}
    finally:
        _stop(workers)


def run(heavy: int, alone: int) -> list[dict]:
    from . import workload

    work = Path(tempfile.mkdtemp(prefix="ctxeng-fairness-"))
    for n in range(heavy):  # distinct content per job, written once for every mode
        (work / f"heavy-{n:03d}.json").write_text(json.dumps(workload.make_request(seed=100 + n)))
    try:
        return [_mode(work, index, mode, extra, heavy, alone) for index, (mode, extra) in enumerate(MODES.items())]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _mode(work: Path, index: int, mode: str, extra: dict[str, str], heavy: int, alone: int) -> dict:
    """One mode in a child process configured by its environment (a fresh database and Redis)."""
    mode_dir = work / f"mode-{index}"
    mode_dir.mkdir()
    with redis_server() as redis_url:
        out = subprocess.run([sys.executable, "-m", "bench.fairness", "--child", str(work), "--heavy", str(heavy),
                              "--alone", str(alone), "--work", str(mode_dir)],
                             cwd=ROOT, env=_env(mode_dir / "db.sqlite3", redis_url, extra), capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"mode {mode!r} failed:\n{out.stderr[-4000:]}")
    return {"mode": mode, **json.loads(out.stdout.strip().splitlines()[-1])}


def report(rows: list[dict], heavy: int) -> str:
    lines = [f"# Issue 40, finding 5: tenant B's small job behind tenant A's {heavy} heavy jobs", "",
             f"{WORKERS} Celery workers of one process each, production settings, SQLite, Redis; tenant A's jobs the "
             "2,000-candidate bench workload (a seed each), B's the worked example's request; B's wait is submit to "
             f"sealed. `python -m bench.fairness` on {os.cpu_count()} cores.", "",
             "| mode | B alone (median) | B behind A's backlog | ratio | B's job started | A's backlog took |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        alone = statistics.median(r["alone"])
        lines.append(f"| {r['mode']} | {alone:.2f} s | {r['behind']:.2f} s | {r['behind'] / alone:.1f}x | "
                     f"{r['position']} of {r['jobs']} | {r['backlog_seconds']:.1f} s |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heavy", type=int, default=16)
    parser.add_argument("--alone", type=int, default=3)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.heavy, args.alone, args.work)))
        return
    text = report(run(args.heavy, args.alone), args.heavy)
    (ROOT / "bench" / "results" / "issue40-fairness.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
