"""Benchmark 5 — the dashboard's manifest page on a huge manifest.

In a child interpreter (own SQLite file, jobs in process): the worked example's policy is
published, then two synthetic requests under it are assembled through the real job path, one
with 100 candidates and one with 10,000 (so 10,000 manifest item rows). `/assemblies/<id>/` is
rendered for each with Django's test client, logged in as a reviewer; figures are the SQL query
count of one render (target <= 10) and the median render time, 10k against 100 (target <= 2x).
The same for the inspector with an item selected (`?item=`, the last included item that a
transform touched: its record, position in the list, lineage, transforms and place in the
payload); a search (`?q=doc`), the list grouped by zone, the window tab (tokens grouped by source,
source type, kind and partition) and the list sorted by tokens are reported, not held to 2x: each
reads every row of the manifest (in a bounded number of queries, held to <= 10 like the page).

The run page (issue 41): a generated 200-step run (tests/dashboard/long_run.py: the worked
example's sealed manifests copied step by step) and a 20-step one; `/runs/<id>/` is rendered for
each — its server time (target <= 300 ms), its query count (the same for both) and its bytes
(<= 150 KB) — and its two regions, the window summary and the item × step matrix, are reported.

Issue 52: on the same runs, the inspector on the last step's first included item (<= 300 ms, the
same queries for 200 steps as for 20, <= 300 KB) and the timeline CSV export read to its end
(streamed: a StreamingHttpResponse, never built whole). Then a draft of the example's policy (a
relevance floor of 0.9, which flips items at every step) is previewed over each run, as the
dashboard runs a preview without REDIS_URL (on the in-process thread; polled here): the impact
page after the 200-request preview is held to <= 300 ms, the queries of the 20-request one and
<= 300 KB, its second page of rows to <= 300 KB, and its CSV export must stream.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from .infra import ROOT, python, python_env
from .timing import Row, at_most, ms


def run(*, quick: bool = False) -> list[Row]:
    if not (ROOT / "manifests" / "views.py").exists():
        return [Row("5 dashboard", "section", "not run: the dashboard (manifests.views) is not built yet")]
    with tempfile.TemporaryDirectory(prefix="ctxeng-bench-dash-") as tmp:
        env = python_env()
        env.pop("REDIS_URL", None)
        env.update(
            DJANGO_SETTINGS_MODULE="ctxeng.server.settings",
            DATABASE_URL=f"sqlite:///{tmp}/bench.sqlite3",
            # Debug settings serve static files unhashed (no collectstatic step); templates and
            # queries are the same as in production.
            DJANGO_DEBUG="1",
            DJANGO_ALLOWED_HOSTS="testserver,localhost",
        )
        out = subprocess.run(
            [python(), "-m", "bench.dashboard", "child", "quick" if quick else "full"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
        )
    if out.returncode != 0:
        return [Row("5 dashboard", "section", "not run: " + (out.stderr.strip().splitlines() or ["child failed"])[-1][:300], data={"stderr": out.stderr[-3000:]})]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    rows = []
    runs = r.get("runs")
    if runs:
        long, short = runs["200"], runs["20"]
        page = long["page"]
        rows.append(Row("5 dashboard", "run page, 200-step run: server time", ms(page["median"]), None, "<= 300 ms",
                        page["median"] <= 0.3, data={"200": long, "20": short}))
        rows.append(Row("5 dashboard", "run page, SQL queries, 200 vs 20 steps", f"{page['queries']} vs {short['page']['queries']}",
                        None, "equal", page["queries"] == short["page"]["queries"]))
        rows.append(Row("5 dashboard", "run page, HTML bytes, 200-step run", f"{page['bytes'] / 1024:.1f} KB", None, "<= 150 KB",
                        page["bytes"] <= 150 * 1024))
        for region in ("window", "matrix"):
            rows.append(Row("5 dashboard", f"run page region {region}, 200-step run", f"{ms(long[region]['median'])}, "
                            f"{long[region]['queries']} queries, {long[region]['bytes'] / 1024:.1f} KB", None, "(reported)"))
        rows += _page_rows("inspector, last step of the 200-step run (?item=)", long["inspector"], short["inspector"])
        export, small = long["timeline_export"], short["timeline_export"]
        rows.append(Row("5 dashboard", "timeline CSV export, 200-step run (read to its end)",
                        f"{ms(export['median'])}, {export['bytes'] / 1024:.0f} KB, {export['queries']} queries "
                        f"(20 steps: {small['queries']})", None, "streamed", export["streamed"] and small["streamed"],
                        data={"200": export, "20": small}))
    impact = r.get("impact")
    if impact:
        long, short = impact["200"], impact["20"]
        rows.append(Row("5 dashboard", "impact preview of 200 requests, on the in-process thread (start to done)",
                        f"{long['replay_seconds']:.1f} s ({long['replayed']} replayed; 20: {short['replay_seconds']:.1f} s), "
                        f"rows stored {long['rows_bytes'] / 1024:.0f} KB", None, "(reported)"))
        rows += _page_rows("impact page after a 200-request preview", long["page"], short["page"])
        page_2 = long["page_2"]
        rows.append(Row("5 dashboard", "impact rows, page 2 of the 200-request preview", f"{ms(page_2['median'])}, "
                        f"{page_2['queries']} queries, {page_2['bytes'] / 1024:.1f} KB", None, "<= 300 KB",
                        page_2["bytes"] <= 300 * 1024))
        export = long["export"]
        rows.append(Row("5 dashboard", "impact CSV export, 200-request preview (read to its end)",
                        f"{ms(export['median'])}, {export['bytes'] / 1024:.0f} KB, {export['queries']} queries", None,
                        "streamed", export["streamed"], data={"200": export, "20": short["export"]}))
    for view, label in VIEWS:
        small, large = r["100"][view], r["10000"][view]
        q = large["queries"]
        rows.append(Row("5 dashboard", f"SQL queries, {label}, 10,000 items", f"{q} queries (100 items: {small['queries']})",
                        None, "<= 10", q <= 10, data={"100": small, "10000": large}))
        figure, ratio = f"{ms(large['median'])} vs {ms(small['median'])}", large["median"] / small["median"]
        if view in TIMED:
            rows.append(at_most("5 dashboard", f"{label} time, 10,000 vs 100 items", figure, ratio, 2.0,
                                bytes=[small["bytes"], large["bytes"]]))
        else:  # a search reads every row's text: it grows with the manifest, as any unindexed search does
            rows.append(Row("5 dashboard", f"{label} time, 10,000 vs 100 items", figure, round(ratio, 3), "(reported)"))
    return rows


def _page_rows(label: str, long: dict, short: dict) -> list[Row]:
    """A page of the long case: its server time (<= 300 ms), its queries (the same as the short
    case's) and its bytes (<= 300 KB)."""
    return [
        Row("5 dashboard", f"{label}: server time", ms(long["median"]), None, "<= 300 ms", long["median"] <= 0.3,
            data={"long": long, "short": short}),
        Row("5 dashboard", f"{label}: SQL queries, vs the 20-step case", f"{long['queries']} vs {short['queries']}", None,
            "equal", long["queries"] == short["queries"]),
        Row("5 dashboard", f"{label}: HTML bytes", f"{long['bytes'] / 1024:.1f} KB", None, "<= 300 KB",
            long["bytes"] <= 300 * 1024),
    ]


VIEWS = (("page", "manifest page"), ("item", "inspector with ?item="), ("search", "inspector list, search ?q="),
         ("zone", "inspector list, grouped by zone"), ("window", "window tab"), ("largest", "inspector list, ?sort=tokens"))
TIMED = ("page", "item")


def _child(quick: bool) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from bench import workload
    from manifests.models import Manifest
    from manifests.selectors import manifest_document
    from manifests.services import assembly_job_submit

    call_command("migrate", verbosity=0, interactive=False)
    call_command("load_example", stdout=open(os.devnull, "w"))
    user = get_user_model().objects.get(username="demo")
    client = Client()
    client.force_login(user)
    rounds = 3 if quick else 7
    out = {}
    for n in (100, 10_000):
        body = workload.make_request(n_items=n, total_bytes=n * 400, n_tool_pairs=min(40, n // 10), seed=n, context_limit=16_000)
        body["policy"] = {"id": body["policy"]["id"]}
        job, _ = assembly_job_submit(user=user, data=body, idempotency_key=None)
        job.refresh_from_db()
        document = manifest_document(Manifest.objects.get(job=job))
        transformed = {t["output_item_id"] for t in document["transforms"]}
        selected = [row["item_id"] for row in document["included"] if row["item_id"] in transformed][-1]
        base = f"/assemblies/{job.id}/"
        out[str(n)] = {view: _measure(client, url, rounds) | {"job_status": job.status} for view, url in (
            ("page", base), ("item", f"{base}?item={selected}"), ("search", f"{base}?q=doc"), ("zone", f"{base}?group=zone"),
            ("window", f"{base}window/"), ("largest", f"{base}?sort=tokens"))}
    out["runs"] = _runs(user, client, rounds)
    out["impact"] = _impact(user, client, rounds)
    print(json.dumps(out))


def _runs(user, client, rounds: int) -> dict:
    """The run page of a generated 200-step run and of a 20-step one (copies of the example's steps),
    the inspector on the last step's first included item, and the run's timeline export."""
    from manifests.models import AssemblyJob, Manifest
    from manifests.selectors import manifest_document
    from tests.dashboard.long_run import long_run

    sources = list(AssemblyJob.objects.filter(run__run_id="run-42", manifest__isnull=False).order_by("created_at"))
    found = {}
    for steps in (20, 200):
        run_id = f"bench-run-{steps}"
        last = long_run(sources, steps=steps, run_id=run_id)[-1]
        item = manifest_document(Manifest.objects.get(job=last))["included"][0]["item_id"]
        base = f"/runs/{run_id}/"
        found[str(steps)] = {view: _measure(client, url, rounds) for view, url in (
            ("page", base), ("window", f"{base}window/"), ("matrix", f"{base}matrix/"),
            ("inspector", f"/assemblies/{last.id}/?item={item}"))}
        found[str(steps)]["timeline_export"] = _measure(client, f"{base}timeline.csv", rounds)
    return found


def _impact(user, client, rounds: int) -> dict:
    """The impact page after a preview of a draft (the example's policy with a relevance floor that
    flips items at every step) over the 200-step run and over the 20-step one, each run as the
    dashboard runs it without REDIS_URL (on the in-process thread, polled here), and its export."""
    from django.conf import settings

    from policies.models import ImpactPreview, PolicyRevision, PreviewStatus, RevisionStatus
    from policies.services import impact_preview_start, policy_revision_create

    assert settings.CTXENG_JOBS_INLINE
    from manifests.models import AssemblyJob

    policy = AssemblyJob.objects.filter(run__run_id="bench-run-200").select_related("policy_revision__policy").first().policy_revision.policy
    published = PolicyRevision.objects.get(policy=policy, status=RevisionStatus.PUBLISHED)
    body = json.loads(json.dumps(published.body))
    body["policy"]["revision"] = published.revision + 1
    body["policy"].pop("digest", None)
    body["admission"]["min_relevance"] = 0.9
    draft = policy_revision_create(tenant=published.policy.tenant, body=body, user=user)
    page = f"/policies/{published.policy.policy_id}/revisions/{draft.revision}/impact/"
    found = {}
    for steps in (20, 200):
        t0 = time.perf_counter()
        preview = impact_preview_start(revision=draft, user=user, selection={"runs": [f"bench-run-{steps}"], "limit": steps})
        while (preview := ImpactPreview.objects.get(pk=preview.pk)).active:
            time.sleep(0.2)
        if preview.status != PreviewStatus.DONE or preview.done < steps:
            raise RuntimeError(f"the {steps}-request preview ended {preview.status} at {preview.done}: {preview.error}")
        found[str(steps)] = {"replay_seconds": time.perf_counter() - t0, "replayed": preview.done,
                             "rows_bytes": len(json.dumps(preview.rows)),
                             "page": _measure(client, page, rounds),
                             "page_2": _measure(client, f"{page}{preview.id}/?page=2", rounds),
                             "export": _measure(client, f"{page}{preview.id}/export.csv", rounds)}
    return found


def _body(response) -> bytes:
    """The whole body; a streamed one read to its end (the time of a download, not of its first byte)."""
    return b"".join(response.streaming_content) if response.streaming else response.content


def _measure(client, url: str, rounds: int) -> dict:
    """Queries of one render of `url`, then the median of `rounds` timed renders (a streamed
    response read to its end); `streamed` says whether it was a StreamingHttpResponse."""
    from django.db import connection

    first = client.get(url, secure=True)
    if first.status_code != 200:
        raise RuntimeError(f"{url} answered {first.status_code}")
    _body(first)
    executed: list[str] = []

    def counting(execute, sql, params, many, context):
        executed.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counting):
        page = client.get(url, secure=True)
        content = _body(page)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        _body(client.get(url, secure=True))
        times.append(time.perf_counter() - t0)
    return {"url": url, "queries": len(executed), "sql": executed, "median": statistics.median(times), "times": times,
            "bytes": len(content), "streamed": page.streaming}


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "child":
    _child(sys.argv[2] == "quick")
