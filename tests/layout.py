"""The production layout in tests: gunicorn with sync workers on a loopback port, and
deploy/nginx.conf (the file the README tells operators to install) in front of it.

Registered as a plugin by tests/conftest.py. Fixtures (use with `transactional_db`, so the rows a
test writes are committed and the server processes see them):

- `gunicorn(workers=2, **env)`: starts `gunicorn ctxeng.server.wsgi` (the README's command, with
  production settings: DEBUG off, a secret key, 127.0.0.1 allowed, no TLS redirect on loopback)
  on the test database and waits until `/healthz` answers; returns a `Server` (`.url`, `.port`,
  `.log()`). Stopped after the test.
- `nginx(upstream)`: starts Debian's nginx with deploy/nginx.conf included unchanged but for its
  two machine-specific lines (`listen`, the upstream `server`), in a private prefix (pid, logs,
  temp files); waits until `/healthz` answers through it. Fails, never skips, without nginx.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.service_fixtures import REPO, _free_port, database_url_for_subprocess

NGINX_CONF = REPO / "deploy" / "nginx.conf"
# The README's command (Operating in production > Layout), less --bind, which the test picks.
GUNICORN_ARGS = ["ctxeng.server.wsgi", "--timeout", "60", "--limit-request-line", "8190"]


class Server:
    """A server subprocess in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], port: int, log_path: Path) -> None:
        self.name, self.port, self.log_path = name, port, log_path
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{self.name} not answering /healthz within {timeout} s:\n{self.log()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self._log.close()


def production_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CTXENG_TEST_", "DJANGO_")) and k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        DJANGO_SETTINGS_MODULE="ctxeng.server.settings",
        DATABASE_URL=database_url_for_subprocess(),
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY="layout-test-" + "k" * 60,
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SECURE_SSL_REDIRECT="false",  # plain HTTP on loopback
        PYTHONUNBUFFERED="1",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _private_control_socket(path: Path) -> list[str]:
    """gunicorn 27 opens a control socket at one path per user (~/.gunicorn/gunicorn.ctl): two
    test servers at once would share it. Older versions have none."""
    import gunicorn as gunicorn_package

    major = int(gunicorn_package.__version__.split(".")[0])
    return ["--control-socket", str(path)] if major >= 27 else []


@pytest.fixture
def gunicorn(transactional_db, tmp_path):
    servers: list[Server] = []

    def start(workers: int = 2, **env: str) -> Server:
        port = _free_port()
        argv = [sys.executable, "-m", "gunicorn", *GUNICORN_ARGS, "--workers", str(workers),
                "--bind", f"127.0.0.1:{port}", *_private_control_socket(tmp_path / f"gunicorn-{port}.ctl")]
        server = Server(f"gunicorn-{len(servers) + 1}", argv, production_env(**env), port,
                        tmp_path / f"gunicorn-{len(servers) + 1}.log")
        servers.append(server)
        server.wait_healthy()
        return server

    yield start
    for server in servers:
        server.stop()


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if found is None:
        pytest.fail("no nginx binary: install it (apt-get install nginx; `make test` does as root)")
    return found


def site_conf(listen_port: int, upstream_port: int) -> str:
    """deploy/nginx.conf with its two machine-specific lines pointed at the test's ports."""
    text = NGINX_CONF.read_text()
    for line, replacement in (("listen 80 default_server;", f"listen 127.0.0.1:{listen_port} default_server;"),
                              ("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};")):
        assert text.count(line) == 1, f"deploy/nginx.conf: expected one `{line}`"
        text = text.replace(line, replacement)
    return text


@pytest.fixture
def nginx():
    servers: list[Server] = []
    prefix = Path(tempfile.mkdtemp(prefix="ctxeng-nginx-"))

    def start(upstream: Server) -> Server:
        port = _free_port()
        (prefix / "ctxeng.conf").write_text(site_conf(port, upstream.port))
        temp = {name: prefix / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
        for path in temp.values():
            path.mkdir(exist_ok=True)
        # Root starts nginx's workers as `nobody`, who cannot write a private temp directory.
        user = "user root;\n" if os.geteuid() == 0 else ""
        (prefix / "nginx.conf").write_text(
            f"{user}daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log info;\n"
            "events { worker_connections 512; }\n"
            "http {\n"
            f"  access_log {prefix}/access.log;\n"
            + "".join(f"  {name}_temp_path {path};\n" for name, path in
                      (("client_body", temp["body"]), ("proxy", temp["proxy"]), ("fastcgi", temp["fastcgi"]),
                       ("uwsgi", temp["uwsgi"]), ("scgi", temp["scgi"])))
            + f"  include {prefix}/ctxeng.conf;\n}}\n"
        )
        argv = [nginx_binary(), "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", str(prefix / "error.log")]
        server = Server("nginx", argv, dict(os.environ), port, prefix / "stdout.log")
        servers.append(server)
        server.wait_healthy()
        return server

    yield start
    for server in servers:
        server.stop()
    shutil.rmtree(prefix, ignore_errors=True)
