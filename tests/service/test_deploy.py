"""Deploy safety: production settings pass `check --deploy` and fail loudly when unreadable, each in
a fresh `manage.py` process. (The agent token throttle: tests/service/test_agent_throttle.py; the
settings readers in process: tests/service/test_settings_readers.py; the Content-Security-Policy:
tests/dashboard/test_csp.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "a-production-secret-key-that-is-long-and-random-0123456789-abcdefghij",
    "DJANGO_ALLOWED_HOSTS": "ctxeng.example.com",
    "DATABASE_URL": "sqlite:///:memory:",
}


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CTXENG_")) and k != "DATABASE_URL"}
    return subprocess.run([sys.executable, *args], cwd=REPO, env={**base, **PRODUCTION, **env},
                          capture_output=True, text=True, timeout=120)


def _setting(name: str, **env: str) -> str:
    result = _run("-c", f"import django; django.setup(); from django.conf import settings; print(repr(settings.{name}))",
                  DJANGO_SETTINGS_MODULE="ctxeng.server.settings", **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_check_deploy_is_clean_with_production_settings():
    result = _run("manage.py", "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_defaults_are_secure_cookies_hsts_and_ssl_redirect():
    assert _setting("SESSION_COOKIE_SECURE") == _setting("CSRF_COOKIE_SECURE") == "True"
    assert _setting("SECURE_SSL_REDIRECT") == "True"
    assert _setting("SECURE_HSTS_SECONDS") == "31536000"
    assert _setting("SECURE_PROXY_SSL_HEADER") == "None"  # trust no forwarded header unless told to


def test_behind_a_tls_proxy_the_forwarded_header_and_redirect_are_configurable():
    env = {"DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto=https", "DJANGO_SECURE_SSL_REDIRECT": "false"}
    assert _setting("SECURE_PROXY_SSL_HEADER", **env) == "('HTTP_X_FORWARDED_PROTO', 'https')"
    assert _setting("SECURE_SSL_REDIRECT", **env) == "False"


@pytest.mark.parametrize(("name", "value"), [
    ("DJANGO_SECURE_PROXY_SSL_HEADER", "X Forwarded Proto"),
    ("CTXENG_THROTTLE_AGENT", "lots"),
    ("DJANGO_SECURE_SSL_REDIRECT", "maybe"),
])
def test_an_unreadable_setting_stops_the_process_and_names_it(name, value):
    result = _run("manage.py", "check", **{name: value})
    assert result.returncode != 0
    assert name in result.stderr
