"""Issue 51, N4 — tenant A's parallel large submits against `/healthz` and tenant B's API.

`python -m bench.big_submits [--workers 4] [--submits 6] [--mb 4] [--probes 8]`: the production
settings on a fresh SQLite file, gunicorn with `--workers` sync workers (no nginx in front: the
client sends each body over loopback at once, as nginx would hand it over), a private
redis-server as REDIS_URL (the broker, no Celery worker: a submitted job stays queued; and where
the workers count the large requests together). Tenant A (`tenant-x`, the example's `demo`)
submits `--submits` assembly requests of about `--mb` MB each at once (the bench workload, 1,250
candidates per MB, a seed each, so every one stores new content), each from its own thread, and
sends a refused one again after its Retry-After, as the Python client does. Meanwhile `/healthz`
and tenant B's small API call (`GET assemblies/?limit=1` with B's token) are probed in turn, one
request at a time, until A's last submit is stored; before, the same probes with nothing else
running are the baseline (measured in the same run and mode). Modes:

- `no bound`: CTXENG_LARGE_BODY_BYTES=0 — every body is parsed in whichever worker took it, the
  behaviour before the fix;
- `bounds (defaults)`: 1 large request per tenant, 2 overall (ctxeng.server.large_requests).

Reports each probe's median alone and its median and slowest during A's submits (the issue's goal:
the slowest ≤ 1 s), how many of A's attempts were refused (429/503) and how long A's submits took
from the first sent to the last stored (the price: they run one at a time). Writes
bench/results/issue51-big-submits.md; `make bench` runs it as section 13 (`run()`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from .infra import ROOT, redis_server
from .login_flood import _env, _gunicorn

MODES = {
    "no bound (before)": {"CTXENG_LARGE_BODY_BYTES": "0"},
    "bounds (defaults)": {},
}
GOAL_SECONDS = 1.0
PREPARE = """
import json, django
django.setup()
from rest_framework.authtoken.models import Token
from bench.fairness import _two_tenants
user_a, user_b, _ = _two_tenants()
print(json.dumps({"a": Token.objects.get_or_create(user=user_a)[0].key, "b": Token.objects.get_or_create(user=user_b)[0].key}))
"""


def _tokens(env: dict[str, str]) -> dict[str, str]:
    """The database migrated, tenant A (the example) and tenant B set up; their agents' tokens."""
    out = subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _bodies(count: int, mb: float) -> list[bytes]:
    from . import workload

    return [workload.dumps(workload.make_request(n_items=int(1250 * mb), total_bytes=int(325_000 * mb), seed=500 + n))
            for n in range(count)]


def _probe(session: requests.Session, url: str) -> float:
    t0 = time.perf_counter()
    response = session.get(url, timeout=300)
    elapsed = time.perf_counter() - t0
    assert response.status_code == 200, (url, response.status_code, response.text[:200])
    return elapsed


def _submit(url: str, token: str, body: bytes, key: str, outcome: dict) -> None:
    """One of A's submits, sent again after each refusal's Retry-After (plus the client's jitter)."""
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json", "Idempotency-Key": key}
    while True:
        response = requests.post(f"{url}/api/v1/assemblies/", data=body, headers=headers, timeout=300)
        if response.status_code in (429, 503) and "Retry-After" in response.headers:
            outcome["refused"] += 1
            time.sleep(float(response.headers["Retry-After"]) + random.uniform(0, 0.5))
            continue
        outcome["status"] = response.status_code
        outcome["done"] = time.perf_counter()
        return


def _mode(mode: str, env: dict[str, str], work: Path, tokens: dict[str, str], bodies: list[bytes], workers: int,
          probes: int, index: int) -> dict:
    process, url = _gunicorn(env, workers, work / f"gunicorn-{index}.log")
    b_session = requests.Session()
    b_session.headers["Authorization"] = f"Token {tokens['b']}"
    health_session = requests.Session()
    targets = {"healthz": (health_session, f"{url}/healthz"), "b_api": (b_session, f"{url}/api/v1/assemblies/?limit=1")}
    try:
        for _ in range(2 * workers):  # every worker has imported and connected
            for session, target in targets.values():
                _probe(session, target)
        alone = {name: [_probe(session, target) for _ in range(probes)] for name, (session, target) in targets.items()}
        outcomes = [{"refused": 0, "status": None, "done": None} for _ in bodies]
        threads = [threading.Thread(target=_submit, args=(url, tokens["a"], body, f"{mode}-{n}", outcomes[n]))
                   for n, body in enumerate(bodies)]
        during: dict[str, list[float]] = {name: [] for name in targets}
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for name, (session, target) in targets.items():
                during[name].append(_probe(session, target))
        for thread in threads:
            thread.join()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    return {"mode": mode, "alone": alone, "during": during, "statuses": [o["status"] for o in outcomes],
            "refused": sum(o["refused"] for o in outcomes),
            "a_seconds": max(o["done"] for o in outcomes) - started, "body_mb": statistics.mean(map(len, bodies)) / 1e6}


def measure(workers: int = 4, submits: int = 6, mb: float = 4.0, probes: int = 8) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="ctxeng-big-submits-"))
    bodies = _bodies(submits, mb)
    rows = []
    for index, (mode, extra) in enumerate(MODES.items()):
        with redis_server() as redis_url:
            env = _env(work / f"db-{index}.sqlite3", REDIS_URL=redis_url, **extra)
            rows.append(_mode(mode, env, work, _tokens(env), bodies, workers, probes, index))
    return rows


def _figures(r: dict, name: str) -> tuple[float, float, float]:
    return statistics.median(r["alone"][name]), statistics.median(r["during"][name]), max(r["during"][name])


def report(rows: list[dict], workers: int) -> str:
    r0 = rows[0]
    lines = [f"# Issue 51, N4: {len(r0['statuses'])} parallel {r0['body_mb']:.1f} MB submits from tenant A vs /healthz "
             "and tenant B's API", "",
             f"gunicorn {workers} sync workers, production settings, SQLite, Redis, no Celery worker; probes one at a "
             f"time while A's submits run; `python -m bench.big_submits` on {os.cpu_count()} cores.", "",
             "| mode | probe | alone (median) | during (median) | during (slowest) | slowest / alone | "
             "A's attempts refused | A's submits stored | A's submits took |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        for name, label in (("healthz", "/healthz"), ("b_api", "tenant B's `GET assemblies/`")):
            alone, median, slowest = _figures(r, name)
            lines.append(f"| {r['mode']} | {label} | {alone * 1000:.0f} ms | {median * 1000:.0f} ms | "
                         f"{slowest * 1000:.0f} ms | {slowest / alone:.1f}x | {r['refused']} | "
                         f"{r['statuses'].count(202)} of {len(r['statuses'])} | {r['a_seconds']:.1f} s |")
    return "\n".join(lines) + "\n"


def run(*, quick: bool = False) -> list:
    """Section 13 of `make bench`: the slowest probe during A's submits, before and after."""
    from .timing import Row

    rows = measure(mb=1.5 if quick else 4.0, probes=4 if quick else 8)
    (ROOT / "bench" / "results" / "issue51-big-submits.md").write_text(report(rows, 4))
    name = "13 big submits"
    out = []
    for r in rows:
        bounded = r["mode"] == "bounds (defaults)"
        for probe, label in (("healthz", "/healthz"), ("b_api", "tenant B's API")):
            alone, median, slowest = _figures(r, probe)
            out.append(Row(name, f"{label}, slowest during {len(r['statuses'])} parallel {r['body_mb']:.1f} MB submits "
                                 f"from tenant A, {r['mode']}", f"{slowest * 1000:.0f} ms",
                           ratio=round(slowest / alone, 1), target="<= 1 s" if bounded else "",
                           met=(slowest <= GOAL_SECONDS) if bounded else None,
                           note=f"alone {alone * 1000:.0f} ms, median during {median * 1000:.0f} ms; A: "
                                f"{r['statuses'].count(202)} stored in {r['a_seconds']:.1f} s, {r['refused']} refusals",
                           data=r))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--submits", type=int, default=6)
    parser.add_argument("--mb", type=float, default=4.0)
    parser.add_argument("--probes", type=int, default=8)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxeng.server.settings")
    text = report(measure(args.workers, args.submits, args.mb, args.probes), args.workers)
    (ROOT / "bench" / "results" / "issue51-big-submits.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
