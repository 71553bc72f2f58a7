"""/healthz says ok or not ok to anyone; the database's error (host, port, user) goes to the log only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import django
django.setup()
from django.test import Client
response = Client().get('/healthz')
print(response.status_code, response.content.decode())
"""


def test_it_answers_ok_when_the_database_answers(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_it_answers_503_without_the_databases_error_and_logs_it():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ctxeng.server.settings",
           "DATABASE_URL": "postgres://ctxeng:s3cret-pw@127.0.0.1:9/ctxeng"}  # port 9: nothing listens
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    status, body = out.stdout.strip().split(" ", 1)
    assert status == "503" and json.loads(body) == {"status": "unavailable"}
    assert "127.0.0.1" in out.stderr and "healthz: the database is unreachable" in out.stderr  # the operator's log
