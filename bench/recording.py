"""Recording (issue 49): what `record=` costs the agent, what the service takes, what the spool holds.

    python -m bench.recording [--part overhead,service,outage] [--steps 200] [--rounds 3] [--outage 60]

- overhead: a 200-step local run with `record=` off and on (and on with `batch_delay=0`, a request
  per step, the recorder before batching). Per step, this process's CPU time
  (`time.process_time`: the agent's thread and the recorder's upload thread together) and wall
  time, over the loop and the final flush; the ratio on / off is the figure the issue's goal
  (<= 1.10x) is about. The service is a stand-in in another process that answers
  `POST /api/v1/recorded-steps/` as the service does (`stored` per key) without storing or
  verifying, so its own CPU is not counted here.
- service: the real service (production settings, SQLite, a private redis-server). Steps recorded
  from local runs (`--runs` runs of 25 steps, the starter `chat-agent`) are POSTed in the
  recorder's batches (50) by one client to gunicorn with one sync worker: recorded steps per
  second one web worker accepts. No Celery worker runs meanwhile, so each verification waits in
  Redis; then one worker process (prefork, concurrency 1) starts and verifies them all:
  verifications per second, from its first `verified_at` to its last (its start-up not counted).
- outage: a local run recording to a service that is down for `--outage` seconds (connections
  refused), with a spool; then the stand-in comes up on the same port and the recorder drains the
  spool. Steps taken, spooled, dropped, sent after, and lost (taken - sent - dropped: must be 0
  while the spool's bound is not reached).

`make bench` runs the three as its section 12 (`run()`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxeng import sdk

# Stores nothing: answers `stored` for each step. argv[1]: the port (0: any free one, printed).
STAND_IN = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        raw = json.dumps({"results": [{"idempotency_key": s["idempotency_key"], "outcome": "stored"} for s in body["steps"]],
                          "dropped": body["dropped"]}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw))); self.end_headers(); self.wfile.write(raw)
server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

PRINCIPAL = {"id": "agent", "tenant": "tenant-x", "project": "bench"}
RUN_STEPS = 25  # steps per run in the service and outage parts


def _stand_in(port: int = 0) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-c", STAND_IN, str(port)], stdout=subprocess.PIPE, text=True)
    return process, f"http://127.0.0.1:{process.stdout.readline().strip()}"


def _history() -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are a careful research agent."}, {"role": "user", "content": "Begin."}]


def _turn(history: list[dict[str, str]], n: int) -> None:
    history += [{"role": "assistant", "content": f"Step {n}: I read the next file and noted what it says. " * 4},
                {"role": "user", "content": f"Continue with part {n + 1}."}]


# --------------------------------------------------------------------------- overhead


def _timed_run(steps: int, recorder: sdk.Recorder | None) -> tuple[float, float]:
    """(CPU s, wall s) of one run of `steps` steps, the flush included."""
    history = _history()
    session = sdk.Session("chat-agent", principal=PRINCIPAL, record=recorder)
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(steps):
        session.step(history)
        _turn(history, n)
    session.close(timeout=120)
    return time.process_time() - cpu, time.perf_counter() - wall


def overhead(steps: int = 200, rounds: int = 3) -> dict[str, Any]:
    stand_in, url = _stand_in()
    try:
        _timed_run(20, None)  # warm: the tokenizer, the starter policy
        results: dict[str, list[tuple[float, float]]] = {"off": [], "on": [], "unbatched": []}
        for _ in range(rounds):
            results["off"].append(_timed_run(steps, None))
            for mode, delay in (("on", 0.5), ("unbatched", 0.0)):  # unbatched: a request per step, as before batch_delay
                recorder = sdk.Recorder(url, "bench", batch_delay=delay)
                results[mode].append(_timed_run(steps, recorder))
                status = recorder.close()
                assert status["sent"] == steps and status["pending"] == 0, status
    finally:
        stand_in.terminate()
    best = {mode: (min(c for c, _ in rows), min(w for _, w in rows)) for mode, rows in results.items()}
    return {
        "steps": steps, "rounds": rounds,
        "cpu_ms_per_step": {m: round(1000 * c / steps, 3) for m, (c, _) in best.items()},
        "wall_ms_per_step": {m: round(1000 * w / steps, 3) for m, (_, w) in best.items()},
        "cpu_ratio_on_off": round(best["on"][0] / best["off"][0], 3),
        "wall_ratio_on_off": round(best["on"][1] / best["off"][1], 3),
        "cpu_ratio_unbatched_off": round(best["unbatched"][0] / best["off"][0], 3),
    }


# --------------------------------------------------------------------------- the service


class _Kept:
    """A `record=` that keeps each step's JSON (as sdk.Recorder sends it) instead of sending it."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    def record(self, request: dict[str, Any], manifest: Any) -> None:
        from ctxeng.sdk._recorder import _Entry

        self.bodies.append(_Entry(key=f"{request['run_id']}/{request['step_id']}", tenant="", run_id="",
                                  request=request, manifest=manifest).text())

    def flush(self, timeout: float | None = None) -> bool:
        return True


def _recorded_bodies(runs: int) -> list[str]:
    kept = _Kept()
    for r in range(runs):
        history = _history()
        session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id=f"bench-rec-{os.getpid()}-{r}", record=kept)
        for n in range(RUN_STEPS):
            session.step(history)
            _turn(history, n)
    return kept.bodies


def _verified_times(db: Path) -> tuple[int, list[datetime]]:
    """(steps still pending, each verified step's verified_at) read from the service's database."""
    with sqlite3.connect(db, timeout=30) as conn:
        rows = conn.execute("SELECT verification, verified_at FROM manifests_assemblyjob WHERE origin = 'recorded'").fetchall()
    pending = sum(1 for v, _ in rows if v == "pending")
    return pending, sorted(datetime.fromisoformat(at) for v, at in rows if at is not None)


def service(runs: int = 8) -> dict[str, Any]:
    from ctxeng.client import Client

    from .infra import ROOT, redis_server
    from .login_flood import _env, _gunicorn, _token

    work = Path(tempfile.mkdtemp(prefix="ctxeng-bench-rec-"))
    db = work / "db.sqlite3"
    bodies = _recorded_bodies(runs)
    batches = [bodies[i:i + 50] for i in range(0, len(bodies), 50)]
    try:
        with redis_server() as redis_url:
            env = _env(db, REDIS_URL=redis_url)
            token = _token(env)
            web, url = _gunicorn(env, 1, work / "gunicorn.log")
            try:
                client = Client(url, token, request_timeout=300, max_retries=0)
                started = time.perf_counter()
                outcomes = []
                for batch in batches:
                    answer = client.record_steps(f'{{"steps":[{",".join(batch)}],"dropped":[]}}'.encode())
                    outcomes += [r["outcome"] for r in answer["results"]]
                accepting = time.perf_counter() - started
            finally:
                os.killpg(web.pid, signal.SIGTERM)
                web.wait(30)
            assert outcomes == ["stored"] * len(bodies), outcomes
            log = (work / "worker.log").open("w")
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "ctxeng", "worker", "--pool", "prefork", "-c", "1",
                 "--loglevel", "WARNING"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                deadline = time.monotonic() + 900
                while (pending := _verified_times(db)[0]) and time.monotonic() < deadline:
                    time.sleep(0.5)
            finally:
                os.killpg(worker.pid, signal.SIGTERM)
                worker.wait(60)
            assert pending == 0, f"{pending} verifications still pending; see {work / 'worker.log'}"
            with sqlite3.connect(db) as conn:
                outcomes_v = dict(conn.execute("SELECT verification, count(*) FROM manifests_assemblyjob "
                                               "WHERE origin = 'recorded' GROUP BY verification").fetchall())
            times = _verified_times(db)[1]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    span = (times[-1] - times[0]).total_seconds()
    return {
        "steps": len(bodies), "batches": len(batches), "mean_step_kb": round(sum(map(len, bodies)) / len(bodies) / 1024, 1),
        "accepted_steps_per_s_one_web_worker": round(len(bodies) / accepting, 1),
        "verifications_per_s_one_worker": round((len(times) - 1) / span, 1) if span > 0 else None,
        "verifications": outcomes_v,
    }


# --------------------------------------------------------------------------- an outage


def outage(seconds: float = 60.0, max_spool: int = 10_000) -> dict[str, Any]:
    from .infra import free_port

    port = free_port()
    spool = Path(tempfile.mkdtemp(prefix="ctxeng-bench-spool-"))
    recorder = sdk.Recorder(f"http://127.0.0.1:{port}", "bench", spool_dir=spool, max_spool=max_spool)
    taken = runs = 0
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # the service is down: nothing listens on the port
            history = _history()
            session = sdk.Session("chat-agent", principal=PRINCIPAL, run_id=f"bench-outage-{runs}", record=recorder)
            runs += 1
            for n in range(RUN_STEPS):
                session.step(history)
                _turn(history, n)
                taken += 1
                if time.monotonic() >= end:
                    break
        during = recorder.status
        spooled_mb = sum(f.stat().st_size for f in spool.glob("*.step")) / 2**20
        stand_in, _ = _stand_in(port)  # the service is back
        try:
            started = time.perf_counter()
            drained = recorder.flush(timeout=600)
            drain_seconds = time.perf_counter() - started
            after = recorder.close()
        finally:
            stand_in.terminate()
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    return {
        "outage_s": seconds, "max_spool": max_spool, "steps_taken": taken,
        "during": {"pending": during["pending"], "spooled": during["spooled"], "dropped": during["dropped"],
                   "spool_mb": round(spooled_mb, 1)},
        "drained": drained, "drain_s": round(drain_seconds, 1),
        "after": after, "lost": taken - after["sent"] - after["dropped"],
    }


# --------------------------------------------------------------------------- make bench


def run(*, quick: bool = False) -> list:
    """Section 11 of `make bench`: the three parts as rows of the results table."""
    from .timing import Row, at_most

    o = overhead(steps=60 if quick else 200, rounds=1 if quick else 3)
    s = service(runs=2 if quick else 8)
    d = outage(seconds=10 if quick else 60)
    name = "12 recording"
    return [
        at_most(name, f"CPU per step, recording on vs off ({o['steps']}-step run, upload thread included)",
                f"{o['cpu_ms_per_step']['on']:.1f} ms vs {o['cpu_ms_per_step']['off']:.1f} ms", o["cpu_ratio_on_off"], 1.10,
                note=f"wall {o['wall_ratio_on_off']:g}x; a request per step {o['cpu_ratio_unbatched_off']:g}x", **o),
        Row(name, "recorded steps accepted per second, one gunicorn sync worker",
            f"{s['accepted_steps_per_s_one_web_worker']:g}/s", note=f"{s['steps']} steps of {s['mean_step_kb']} KB "
            f"in batches of 50", data=s),
        Row(name, "verifications completed per second, one Celery worker process",
            f"{s['verifications_per_s_one_worker']}/s", note=f"outcomes {s['verifications']}", data=s),
        Row(name, f"a {d['outage_s']:g} s outage: steps lost (taken - sent - dropped)", str(d["lost"]), target="0",
            met=d["lost"] == 0 and d["after"]["dropped"] == 0,
            note=f"{d['steps_taken']} steps taken, {d['during']['spooled']} spooled ({d['during']['spool_mb']} MB), "
                 f"all sent {d['drain_s']:g} s after the service came back", data=d),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="overhead", help="comma-separated: overhead, service, outage")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=8, help=f"service: runs of {RUN_STEPS} steps recorded")
    parser.add_argument("--outage", type=float, default=60.0, help="outage: seconds the service is down")
    args = parser.parse_args()
    parts = {"overhead": lambda: overhead(args.steps, args.rounds), "service": lambda: service(args.runs),
             "outage": lambda: outage(args.outage)}
    chosen = args.part.split(",")
    unknown = [p for p in chosen if p not in parts]
    if unknown:
        parser.error(f"--part: {unknown[0]!r} is not one of {', '.join(parts)}")
    print(json.dumps({part: parts[part]() for part in chosen}, indent=2))


if __name__ == "__main__":
    main()
