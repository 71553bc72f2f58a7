"""Issue 40, finding 6 — an unauthenticated login flood against the API's latency.

`python -m bench.login_flood [--seconds 15] [--workers 4] [--threads 8]`: the production settings
on a fresh SQLite file (the default PBKDF2 hasher, DEBUG off), gunicorn with `--workers` sync
workers, a private redis-server as REDIS_URL (where the workers count together), a tenant's token. For each mode the API's latency (`GET /api/v1/policies/`, one request
at a time) is measured alone, then while `--threads` threads POST `/login/` with random usernames
(each a fresh CSRF session: what axes' per username-and-address lockout never stops):

- `no login rates`: CTXENG_LOGIN_RATE_PER_ADDRESS, _PER_USERNAME and _TOTAL empty — the behaviour before the fix;
- `login rates, one address`: the defaults (10/min per address, 1/s overall), the flood from
  one address;
- `login rates, many addresses`: the defaults behind one trusted proxy (CTXENG_PROXY_HOPS=1), each
  attempt claiming a different X-Forwarded-For address, so only the overall rate holds it.

Reports the API's median and 90th percentile under the flood against its median alone (a ratio
measured in the same run), and how many login attempts were checked (200) or refused (429).
Writes bench/results/issue40-login-flood.md.

`python -m bench.login_flood --users` (issue 51, N1): the same server behind one trusted proxy,
eight flooding threads, each with an address of its own, sending wrong passwords for random
usernames without pause; meanwhile user `demo` logs in with the right password LOGINS times from
the address it logged in from before the flood, and LOGINS times from addresses new to it. Two
modes: `before`, the rates of issue 40 (1/s overall, no per-username window, no known addresses:
CTXENG_LOGIN_RATE_TOTAL=1/s, CTXENG_LOGIN_RATE_PER_USERNAME="", CTXENG_LOGIN_KNOWN_ADDRESS_DAYS=0),
and `after`, the defaults. Writes bench/results/issue51-login-users.md.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import requests

from .infra import ROOT, free_port, python_env, redis_server

MODES = {
    "no login rates": {"CTXENG_LOGIN_RATE_PER_ADDRESS": "", "CTXENG_LOGIN_RATE_PER_USERNAME": "", "CTXENG_LOGIN_RATE_TOTAL": ""},
    "login rates, one address": {},
    "login rates, many addresses": {"CTXENG_PROXY_HOPS": "1"},
}


def _env(db: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in python_env().items() if not k.startswith(("DJANGO_", "CTXENG_")) and k not in ("REDIS_URL",)}
    env.update(DJANGO_SETTINGS_MODULE="ctxeng.server.settings", DATABASE_URL=f"sqlite:///{db}", DJANGO_DEBUG="false",
               DJANGO_SECRET_KEY="bench-" + "k" * 60, DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
               DJANGO_SECURE_SSL_REDIRECT="false", DJANGO_SECURE_COOKIES="false", CTXENG_THROTTLE_AGENT="",
               PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _token(env: dict[str, str]) -> str:
    subprocess.run([sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"], cwd=ROOT, env=env,
                   check=True)  # the login page's stylesheet, as the README's production steps do
    subprocess.run([sys.executable, "manage.py", "load_example"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    code = ("from rest_framework.authtoken.models import Token;from django.contrib.auth import get_user_model;"
            "print(Token.objects.get_or_create(user=get_user_model().objects.get(username='demo'))[0].key)")
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    return re.findall(r"[0-9a-f]{40}", out)[-1]


def _gunicorn(env: dict[str, str], workers: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "ctxeng.server.wsgi", "--workers", str(workers), "--timeout", "60",
         "--bind", f"127.0.0.1:{port}", "--control-socket", str(log.with_suffix(".ctl"))],
        cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/healthz", timeout=2).status_code == 200:
                return process, url
        except requests.RequestException:
            time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer:\n{log.read_text()}")


def _api_latencies(url: str, token: str, seconds: float) -> list[float]:
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    times = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        response = session.get(f"{url}/api/v1/policies/", timeout=120)
        times.append(time.perf_counter() - t0)
        assert response.status_code == 200, response.status_code
    return times


def _flood(url: str, stop: threading.Event, counts: dict[int, int], lock: threading.Lock) -> None:
    while not stop.is_set():
        session = requests.Session()
        try:
            page = session.get(f"{url}/login/", timeout=120)
            found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
            if found is None:
                raise RuntimeError(f"GET /login/: {page.status_code} {page.text[:300]!r}")
            csrf = found.group(1)
            address = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
            response = session.post(f"{url}/login/", data={"csrfmiddlewaretoken": csrf, "password": "guess",
                                                           "username": f"random-{uuid.uuid4().hex[:10]}"},
                                    headers={"Referer": f"{url}/login/", "X-Forwarded-For": address}, timeout=120)
            status = response.status_code
        except requests.RequestException:
            status = 0
        with lock:
            counts[status] = counts.get(status, 0) + 1


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def run(seconds: float, workers: int, threads: int) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="ctxeng-login-flood-"))
    token = _token(_env(work / "db.sqlite3"))
    rows = []
    for mode, extra in MODES.items():
        with redis_server() as redis_url:  # the rates' counts, shared by the workers (a fresh count per mode)
            rows.append(_mode(mode, _env(work / "db.sqlite3", REDIS_URL=redis_url, **extra), work, token, seconds,
                              workers, threads, len(rows)))
    return rows


def _mode(mode: str, env: dict[str, str], work: Path, token: str, seconds: float, workers: int, threads: int,
          index: int) -> dict:
    process, url = _gunicorn(env, workers, work / f"gunicorn-{index}.log")
    try:
        _api_latencies(url, token, 2)  # warm every worker's imports and connections
        alone = _api_latencies(url, token, seconds / 2)
        stop, lock, counts = threading.Event(), threading.Lock(), {}
        flooders = [threading.Thread(target=_flood, args=(url, stop, counts, lock)) for _ in range(threads)]
        for thread in flooders:
            thread.start()
        time.sleep(1)
        flooded = _api_latencies(url, token, seconds)
        stop.set()
        for thread in flooders:
            thread.join()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    return {"mode": mode, "alone_p50": statistics.median(alone), "flood_p50": statistics.median(flooded),
            "flood_p90": _percentile(flooded, 0.9), "api_calls": len(flooded), "logins": dict(sorted(counts.items()))}


def report(rows: list[dict], seconds: float, workers: int, threads: int) -> str:
    lines = [f"# Issue 40, finding 6: login flood ({threads} threads, random usernames) vs API latency",
             "", f"gunicorn {workers} sync workers, production settings, SQLite, {seconds:.0f} s of flood per mode; "
             f"`python -m bench.login_flood` on {os.cpu_count()} cores.", "",
             "| mode | API p50 alone | API p50 under flood | API p90 under flood | p50 ratio | logins checked (200) | refused (429) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['alone_p50'] * 1000:.0f} ms | {r['flood_p50'] * 1000:.0f} ms | "
                     f"{r['flood_p90'] * 1000:.0f} ms | {r['flood_p50'] / r['alone_p50']:.1f}x | "
                     f"{r['logins'].get(200, 0)} | {r['logins'].get(429, 0)} |")
    return "\n".join(lines) + "\n"


USER_MODES = {
    "before (1/s overall)": {"CTXENG_LOGIN_RATE_TOTAL": "1/s", "CTXENG_LOGIN_RATE_PER_USERNAME": "",
                             "CTXENG_LOGIN_KNOWN_ADDRESS_DAYS": "0"},
    "after (defaults)": {},
}
LOGINS = 8  # within one address's 10/min with the login before the flood
HOME = "198.51.100.10"


def _login(url: str, username: str, password: str, address: str) -> int:
    session = requests.Session()
    page = session.get(f"{url}/login/", timeout=120)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return session.post(f"{url}/login/", data={"csrfmiddlewaretoken": csrf, "username": username, "password": password},
                        headers={"Referer": f"{url}/login/", "X-Forwarded-For": address}, allow_redirects=False,
                        timeout=120).status_code


def _address_flood(url: str, address: str, stop: threading.Event, counts: dict[int, int], lock: threading.Lock) -> None:
    while not stop.is_set():
        try:
            status = _login(url, f"random-{uuid.uuid4().hex[:10]}", "guess", address)
        except requests.RequestException:
            status = 0
        with lock:
            counts[status] = counts.get(status, 0) + 1


def run_users(workers: int) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="ctxeng-login-users-"))
    _token(_env(work / "db.sqlite3"))
    rows = []
    for index, (mode, extra) in enumerate(USER_MODES.items()):
        with redis_server() as redis_url:
            env = _env(work / "db.sqlite3", REDIS_URL=redis_url, CTXENG_PROXY_HOPS="1", **extra)
            process, url = _gunicorn(env, workers, work / f"gunicorn-users-{index}.log")
            try:
                before_flood = _login(url, "demo", "demo", HOME)  # HOME is known from here on (after)
                stop, lock, counts = threading.Event(), threading.Lock(), {}
                flooders = [threading.Thread(target=_address_flood, args=(url, f"192.0.2.{i}", stop, counts, lock))
                            for i in range(1, 9)]
                for thread in flooders:
                    thread.start()
                while sum(counts.values()) < 40:  # the flood is under way: every address has sent
                    time.sleep(0.1)
                home = [_login(url, "demo", "demo", HOME) for _ in range(LOGINS)]
                new = [_login(url, "demo", "demo", f"203.0.113.{i}") for i in range(1, LOGINS + 1)]
                stop.set()
                for thread in flooders:
                    thread.join()
            finally:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(30)
        rows.append({"mode": mode, "before_flood": before_flood, "home": home, "new": new,
                     "flood": dict(sorted(counts.items()))})
    return rows


def report_users(rows: list[dict], workers: int) -> str:
    lines = ["# Issue 51, N1: a real user's right-password logins during a login flood from 8 addresses", "",
             f"gunicorn {workers} sync workers behind one trusted proxy (CTXENG_PROXY_HOPS=1), production settings "
             f"(PBKDF2), SQLite, Redis counts; `python -m bench.login_flood --users` on {os.cpu_count()} cores. "
             f"The flood: 8 threads, one address each, wrong passwords for random usernames without pause.", "",
             f"| mode | logins from the known address (302 of {LOGINS}) | from new addresses (302 of {LOGINS}) | "
             "flood attempts checked (200) | flood refused (429) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['home'].count(302)} | {r['new'].count(302)} | {r['flood'].get(200, 0)} | "
                     f"{r['flood'].get(429, 0)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--users", action="store_true", help="issue 51: a real user's logins during the flood")
    args = parser.parse_args()
    if args.users:
        text = report_users(run_users(args.workers), args.workers)
        (ROOT / "bench" / "results" / "issue51-login-users.md").write_text(text)
        print(text)
        return
    text = report(run(args.seconds, args.workers, args.threads), args.seconds, args.workers, args.threads)
    (ROOT / "bench" / "results" / "issue40-login-flood.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
