"""Real components for the benchmarks: a private redis-server, and small process helpers."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The real agent histories other projects recorded (mini-swe-agent/, swe-agent/; MIT, their
# licences beside them). Benchmarks and tests read them from $CTXENG_TRACES when set, else from the
# `shared/` folder beside the repository, else from the copy vendored in bench/traces/ (the same
# files: tests/bench/test_traces.py checks both against bench/traces/SHA256SUMS), so a clone
# anywhere runs the suite, as tests/golden.py's examples_dir does for the worked examples.
VENDORED_TRACES = ROOT / "bench" / "traces"


def traces_dir() -> Path:
    env = os.environ.get("CTXENG_TRACES")
    if env:
        return Path(env)
    shared = ROOT.parent / "shared" / "traces"
    return shared if (shared / "mini-swe-agent").is_dir() else VENDORED_TRACES


TRACES = traces_dir()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway redis-server on a free port (no persistence); yields its URL."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="ctxeng-bench-redis-")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def python() -> str:
    return sys.executable
