"""Issue 51, N3 — another tenant's small job behind one tenant's impact previews.

`python -m bench.preview_fairness [--history 8] [--alone 3]`: for each mode a fresh SQLite file, a
private redis-server as REDIS_URL, and the workers of bench.fairness (two Celery workers of one
process each). Tenant A (`tenant-x`) first runs `--history` jobs of the 2,000-candidate bench
workload (not timed: the history its previews replay); then A's policy editor starts two impact
previews (of two revisions of that policy, so neither cancels the other), and once
both previews' turns are taken (both running, or one running and the other's turn requeued at
the lane) tenant B (`tenant-b`) submits the worked example's request. B's wait is submit to sealed;
its baseline is the same job alone on idle workers, `--alone` times, in the same run and mode.

Modes: `previews take turns like jobs` (CTXENG_FAIR_TENANT_MAX_PREVIEWS=0, before issue 51) and
`previews in their own lane (default)` (1 per tenant). Writes bench/results/issue51-preview-fairness.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .fairness import WORKERS, _alone, _env, _stop, _two_tenants, _wait, _waited, _workers
from .infra import ROOT, redis_server

MODES = {
    "previews take turns like jobs (lane off)": {"CTXENG_FAIR_TENANT_MAX_PREVIEWS": "0"},
    "previews in their own lane (default)": {},
}


def _child(history: int, alone: int, work: Path) -> dict:
    """In a process configured for the mode (its env): set up, start the workers, measure."""
    import django

    django.setup()
    import yaml

    from ctxeng.accounts.models import Tenant
    from manifests.services import assembly_job_submit
    from policies.models import ImpactPreview
    from policies.services import impact_preview_start, policy_import

    from . import workload

    user_a, user_b, small = _two_tenants()
    tenant_a = Tenant.objects.get(slug="tenant-x")
    policy_doc = workload.make_policy()
    policy_doc["policy"]["id"] = "bench-workload"
    published = policy_import(tenant=tenant_a, text=yaml.safe_dump(policy_doc, sort_keys=False), user=user_a,
                              publish=True)
    policy_doc["policy"]["revision"] += 1
    draft = policy_import(tenant=tenant_a, text=yaml.safe_dump(policy_doc, sort_keys=False), user=user_a,
                          publish=False)

    workers = _workers(dict(os.environ), work)
    try:
        baseline = _alone(user_b, small, alone)
        past = []
        for n in range(history):
            body = workload.make_request(seed=100 + n)
            body["policy"] = {"id": published.policy.policy_id, "revision": published.revision}
            past.append(assembly_job_submit(user=user_a, data=dict(body, run_id=f"a-{n}"))[0].id)
        _wait(past)
        previews = [impact_preview_start(revision=revision, user=user_a).id for revision in (published, draft)]
        def both_turns_taken() -> bool:
            """Both previews running, or one running and the other's turn requeued at the lane."""
            running = ImpactPreview.objects.filter(id__in=previews, status="running").count()
            logs = "".join((work / f"worker-{n}.log").read_text(errors="replace") for n in range(WORKERS))
            return running == 2 or (running == 1 and "turn requeued" in logs)

        deadline = time.monotonic() + 600
        while not both_turns_taken():
            if time.monotonic() > deadline:
                raise RuntimeError("the previews' turns were not taken within 10 minutes")
            time.sleep(0.05)
        job, _ = assembly_job_submit(user=user_b, data=dict(small, run_id="b-behind"))
        _wait([job.id])
        while ImpactPreview.objects.filter(id__in=previews, status__in=("queued", "running")).exists():
            if time.monotonic() > deadline + 1800:
                raise RuntimeError("previews not done within 40 minutes")
            time.sleep(0.2)
        rows = list(ImpactPreview.objects.filter(id__in=previews).order_by("started_at"))
        assert all(row.status == "done" for row in rows), [(row.status, row.error) for row in rows]
        return {"alone": baseline, "behind": _waited(job.id),
                "previews": [(row.finished_at - row.started_at).total_seconds() for row in rows],
                "previews_seconds": (max(row.finished_at for row in rows) - rows[0].started_at).total_seconds()}
    finally:
        _stop(workers)


def _mode(work: Path, index: int, mode: str, extra: dict[str, str], history: int, alone: int) -> dict:
    mode_dir = work / f"mode-{index}"
    mode_dir.mkdir()
    with redis_server() as redis_url:
        out = subprocess.run([sys.executable, "-m", "bench.preview_fairness", "--child", "--history", str(history),
                              "--alone", str(alone), "--work", str(mode_dir)],
                             cwd=ROOT, env=_env(mode_dir / "db.sqlite3", redis_url, extra), capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"mode {mode!r} failed:\n{out.stderr[-4000:]}")
    return {"mode": mode, **json.loads(out.stdout.strip().splitlines()[-1])}


def report(rows: list[dict], history: int) -> str:
    lines = [f"# Issue 51, N3: tenant B's small job behind tenant A's two impact previews ({history} jobs replayed)",
             "", f"{WORKERS} Celery workers of one process each, SQLite, Redis; each preview replays tenant A's "
             f"{history} past jobs of the 2,000-candidate bench workload; B's job is the worked example's request, "
             f"submitted once both previews' turns were taken; B's wait is submit to sealed. `python -m bench.preview_fairness` on "
             f"{os.cpu_count()} cores.", "",
             "| mode | B alone (median) | B behind A's previews | ratio | each preview ran | A's previews took |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        alone = statistics.median(r["alone"])
        each = ", ".join(f"{seconds:.1f} s" for seconds in r["previews"])
        lines.append(f"| {r['mode']} | {alone:.2f} s | {r['behind']:.2f} s | {r['behind'] / alone:.1f}x | {each} | "
                     f"{r['previews_seconds']:.1f} s |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=8)
    parser.add_argument("--alone", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.history, args.alone, args.work)))
        return
    work = Path(tempfile.mkdtemp(prefix="ctxeng-preview-fairness-"))
    try:
        rows = [_mode(work, index, mode, extra, args.history, args.alone)
                for index, (mode, extra) in enumerate(MODES.items())]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(rows, args.history)
    (ROOT / "bench" / "results" / "issue51-preview-fairness.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
