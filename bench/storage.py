"""Benchmark 6 — database growth per assembly (issue 14).

Each part runs in a child interpreter with its own SQLite file and jobs in process (the inline
runner assembles and seals the job before `assembly_job_submit` returns): migrate, `load_example`,
user `demo`, then requests submitted through `manifests.services.assembly_job_submit` (what the
REST API calls) under the worked example's published policy.

The database's size is its used pages, `(page_count - freelist_count) * page_size`, read after
`PRAGMA wal_checkpoint(TRUNCATE)`, so the WAL is folded in and freed pages do not count. A
request's size is its JSON bytes as the agent sends them (`workload.dumps(body)`). Every figure is
growth / request size:

- first step: the 2,040-candidate, ~7.5 MB workload submitted once (target <= 1.2x);
- repeat step: the same candidates again under a new step id (target <= 0.05x); the rows it adds
  (ManifestItem and every table) and the bytes it adds per table and index (SQLite's `dbstat`)
  are in the row's data;
- a run of 50 steps on a fresh database, each step `workload.next_step` of the one before with 10%
  of the synthetic non-tool candidates re-fetched with new content (tool results and the worked
  example's own candidates never change): total growth / the sum of the 50 requests' sizes
  (target <= 0.3x); `--quick` runs 10 steps and says so;
- what a 10,000-item manifest costs: one submit of 10,000 small (~400 B) candidates on a fresh
  database, growth in bytes and rows (reported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from .infra import ROOT, python, python_env
from .timing import Row, at_most

BENCH = "6 storage"
N_ITEMS, TOTAL_BYTES, SEED = 2040, 7_500_000, 5
STEPS, QUICK_STEPS, CHANGED = 50, 10, 0.10


def _child_run(part: str, arg: str, timeout: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="ctxeng-bench-storage-") as tmp:
        env = python_env()
        env.pop("REDIS_URL", None)  # jobs in process
        env.pop("CTXENG_CONTENT_STORE", None)  # content in the database (the default), so it is measured
        env.update(DJANGO_SETTINGS_MODULE="ctxeng.server.settings", DATABASE_URL=f"sqlite:///{tmp}/bench.sqlite3", DJANGO_DEBUG="0",
                   DJANGO_SECRET_KEY="bench-only-not-secret-" + "x" * 40)
        out = subprocess.run([python(), "-m", "bench.storage", "child", part, arg], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{part}: " + (out.stderr.strip().splitlines() or ["child failed"])[-1][:300])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB"


def run(*, quick: bool = False) -> list[Row]:
    if not (ROOT / "manifests" / "services.py").exists():
        return [Row(BENCH, "section", "not run: the service (manifests.services) is not built yet")]
    steps = QUICK_STEPS if quick else STEPS
    rows: list[Row] = []

    r = _child_run("steps", "-", 900)
    first, repeat = r["first"], r["repeat"]
    rows.append(at_most(
        BENCH, f"growth of a first step, {first['candidates']:,} candidates",
        f"{_mb(first['growth'])} for a {_mb(first['request_bytes'])} request", first["growth"] / first["request_bytes"], 1.2,
        **first,
    ))
    items = repeat["rows"].get("ManifestItem")
    rows.append(at_most(
        BENCH, "growth of a repeat step (same candidates, new step id)",
        f"{_mb(repeat['growth'])} for a {_mb(repeat['request_bytes'])} request; {repeat['rows_total']:,} rows"
        + (f" ({items:,} ManifestItem)" if items is not None else ""),
        repeat["growth"] / repeat["request_bytes"], 0.05, **repeat,
    ))

    r = _child_run("run", str(steps), 3600)
    note = "" if steps == STEPS else f"--quick: {steps} steps, not {STEPS}"
    rows.append(at_most(
        BENCH, f"growth of a {steps}-step run, {CHANGED:.0%} of candidates new each step",
        f"{_mb(r['growth'])} for {_mb(r['request_bytes'])} of requests ({_mb(r['growth'] / steps)}/step)",
        r["growth"] / r["request_bytes"], 0.3, note, **r,
    ))

    r = _child_run("large", "-", 900)
    items = r["rows"].get("ManifestItem")
    rows.append(Row(
        BENCH, f"a {r['candidates']:,}-item manifest (~400 B candidates): bytes and rows",
        f"{_mb(r['growth'])} for a {_mb(r['request_bytes'])} request; {r['rows_total']:,} rows"
        + (f" ({items:,} ManifestItem)" if items is not None else ""),
        round(r["growth"] / r["request_bytes"], 3), "(reported)", None, "growth / request size", r,
    ))
    return rows


# --------------------------------------------------------------------------- child


def _size(connection) -> dict:
    """Used bytes of the database after folding the WAL in, with per-table bytes and row counts."""
    with connection.cursor() as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        busy = c.fetchone()[0]
        c.execute("PRAGMA page_size")
        page = c.fetchone()[0]
        c.execute("PRAGMA page_count")
        pages = c.fetchone()[0]
        c.execute("PRAGMA freelist_count")
        free = c.fetchone()[0]
        tables: dict[str, int] = {}
        try:
            c.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
            tables = dict(c.fetchall())
        except Exception:  # noqa: BLE001 - dbstat is a compile-time option of SQLite
            pass
        c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        counts = {}
        for (name,) in c.fetchall():
            c.execute(f'SELECT COUNT(*) FROM "{name}"')
            counts[name] = c.fetchone()[0]
    return {"bytes": (pages - free) * page, "checkpoint_busy": busy, "tables": tables, "rows": counts}


def _delta(before: dict, after: dict) -> dict:
    from django.apps import apps

    names = {m._meta.db_table: m.__name__ for m in apps.get_models()}
    rows = {names.get(t, t): n - before["rows"].get(t, 0) for t, n in after["rows"].items() if n != before["rows"].get(t, 0)}
    tables = {t: n - before["tables"].get(t, 0) for t, n in after["tables"].items() if n != before["tables"].get(t, 0)}
    return {
        "growth": after["bytes"] - before["bytes"],
        "rows": rows,
        "rows_total": sum(rows.values()),
        "table_bytes": dict(sorted(tables.items(), key=lambda kv: -kv[1])),
        "checkpoint_busy": after["checkpoint_busy"],
    }


def _child(part: str, arg: str) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from bench import workload
    from manifests.services import assembly_job_submit

    call_command("migrate", verbosity=0, interactive=False)
    call_command("load_example", stdout=open(os.devnull, "w"))
    user = get_user_model().objects.get(username="demo")

    def submit(body: dict) -> dict:
        size = len(workload.dumps(body))
        before = _size(connection)
        t0 = time.perf_counter()
        job, _ = assembly_job_submit(user=user, data=body, idempotency_key=None)
        seconds = time.perf_counter() - t0
        job.refresh_from_db()
        if job.status not in ("ready", "blocked"):
            raise RuntimeError(f"job {job.id} ended {job.status}: {job.error[:200]}")
        return {"request_bytes": size, "candidates": len(body["candidates"]), "job_status": job.status,
                "submit_seconds": round(seconds, 2)} | _delta(before, _size(connection))

    def request(**kw) -> dict:
        body = workload.make_request(**kw)
        body["policy"] = {"id": body["policy"]["id"]}
        return body

    if part == "steps":
        body = request(n_items=N_ITEMS, total_bytes=TOTAL_BYTES, seed=SEED)
        first = submit(body)
        repeat = submit(dict(body, step_id=body["step_id"] + "-repeat"))
        out = {"first": first, "repeat": repeat}
    elif part == "run":
        steps = int(arg)
        body = request(n_items=N_ITEMS, total_bytes=TOTAL_BYTES, seed=SEED)
        start = _size(connection)
        per_step = [submit(step) for step in workload.step_run(body, steps, changed=CHANGED)]
        total = _delta(start, _size(connection))
        out = {"steps": steps, "changed": CHANGED, "request_bytes": sum(s["request_bytes"] for s in per_step),
               "growth": total["growth"], "rows": total["rows"], "table_bytes": total["table_bytes"],
               "per_step_growth": [s["growth"] for s in per_step],
               "per_step_seconds": [s["submit_seconds"] for s in per_step],
               "statuses": sorted({s["job_status"] for s in per_step})}
    elif part == "large":
        out = submit(request(n_items=10_000, total_bytes=10_000 * 400, n_tool_pairs=40, seed=10_000, context_limit=16_000))
    else:
        raise SystemExit(f"unknown part {part!r}")
    print(json.dumps(out))


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "child":
    _child(sys.argv[2], sys.argv[3])
