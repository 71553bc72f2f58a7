"""Issue 40, finding 2 — held long-polls against `/healthz` latency.

`python -m bench.longpoll [--workers 4] [--polls 4,8] [--probes 5] [--wait 20]`: the production
settings on a fresh SQLite file, gunicorn with `--workers` sync workers, a private redis-server as
REDIS_URL (the broker, and where the workers count long-polls together; no Celery worker runs, so
a submitted job stays queued), the example tenant's token. For each mode and each number of
clients, that many threads long-poll the queued job (`?wait=--wait`), and `/healthz` is probed
one request at a time meanwhile:

- `no caps`: CTXENG_LONGPOLL_MAX_TOTAL and _PER_TENANT 1000 — the behaviour before the fix;
- `caps (defaults)`: the defaults, 3 overall (the 4 workers less one) and 2 per tenant.

Reports `/healthz`'s first probe and slowest probe with the long-polls held (the first waits for a
free worker; the probes are sequential, so once one long-poll ends the rest are quick) against its
median alone (a ratio measured in the same run), and how many long-polls waited and how many were answered at once (Retry-After).
Writes bench/results/issue40-longpoll.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import requests

from .infra import ROOT, redis_server
from .login_flood import _env, _gunicorn, _token

MODES = {
    "no caps": {"CTXENG_LONGPOLL_MAX_TOTAL": "1000", "CTXENG_LONGPOLL_MAX_PER_TENANT": "1000"},
    "caps (defaults)": {},
}


def _healthz(url: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        response = requests.get(f"{url}/healthz", timeout=120)
        times.append(time.perf_counter() - t0)
        assert response.status_code == 200, response.status_code
    return times


def _submit(url: str, token: str) -> str:
    import django

    django.setup()
    from manifests.examples import example_json

    response = requests.post(f"{url}/api/v1/assemblies/", json=example_json("request.json"), timeout=60,
                             headers={"Authorization": f"Token {token}", "Idempotency-Key": os.urandom(8).hex()})
    assert response.status_code == 202, (response.status_code, response.text[:300])
    return response.json()["id"]


def _mode(mode: str, env: dict[str, str], work: Path, token: str, workers: int, polls: list[int], probes: int,
          wait: float, index: int) -> list[dict]:
    process, url = _gunicorn(env, workers, work / f"gunicorn-{index}.log")
    rows = []
    try:
        job_id = _submit(url, token)
        _healthz(url, probes * 2)  # warm every worker
        alone = _healthz(url, probes)
        for count in polls:
            outcomes: list[str] = []
            lock = threading.Lock()

            def poll(outcomes: list[str] = outcomes, lock: threading.Lock = lock) -> None:
                response = requests.get(f"{url}/api/v1/assemblies/{job_id}/?wait={wait:g}", timeout=wait + 120,
                                        headers={"Authorization": f"Token {token}"})
                with lock:
                    outcomes.append("at once" if "Retry-After" in response.headers else "waited")

            threads = [threading.Thread(target=poll) for _ in range(count)]
            for thread in threads:
                thread.start()
            time.sleep(1)  # the long-polls reach the workers
            held = _healthz(url, probes)
            for thread in threads:
                thread.join()
            rows.append({"mode": mode, "polls": count, "alone_p50": statistics.median(alone),
                         "held_first": held[0], "held_p50": statistics.median(held), "held_max": max(held),
                         "waited": outcomes.count("waited"), "at_once": outcomes.count("at once")})
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    return rows


def run(workers: int, polls: list[int], probes: int, wait: float) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="ctxeng-longpoll-"))
    token = _token(_env(work / "db.sqlite3"))
    rows: list[dict] = []
    for index, (mode, extra) in enumerate(MODES.items()):
        with redis_server() as redis_url:
            rows += _mode(mode, _env(work / "db.sqlite3", REDIS_URL=redis_url, **extra), work, token, workers, polls,
                          probes, wait, index)
    return rows


def report(rows: list[dict], workers: int, probes: int, wait: float) -> str:
    lines = [f"# Issue 40, finding 2: held long-polls (`?wait={wait:g}` of a queued job) vs /healthz latency", "",
             f"gunicorn {workers} sync workers, production settings, SQLite, Redis; {probes} sequential /healthz "
             f"probes 1 s after the long-polls start; `python -m bench.longpoll` on {os.cpu_count()} cores.", "",
             "| mode | long-polls | /healthz p50 alone | first probe while held | max while held | max / alone p50 | "
             "waited | answered at once |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['polls']} | {r['alone_p50'] * 1000:.1f} ms | {r['held_first'] * 1000:.1f} ms | "
                     f"{r['held_max'] * 1000:.1f} ms | {r['held_max'] / r['alone_p50']:.1f}x | {r['waited']} | "
                     f"{r['at_once']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--polls", default="4,8")
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--wait", type=float, default=20)
    args = parser.parse_args()
    polls = [int(n) for n in args.polls.split(",")]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxeng.server.settings")
    text = report(run(args.workers, polls, args.probes, args.wait), args.workers, args.probes, args.wait)
    (ROOT / "bench" / "results" / "issue40-longpoll.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
