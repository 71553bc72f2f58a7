"""A fresh process serves its very first request: settings, middleware and DRF import cleanly.

Import cycles between the middleware, DRF's settings and `ctxeng.server.rest` only show in a process
where nothing imported DRF first (gunicorn, runserver), never inside the test process, so this
runs a new interpreter.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import django
django.setup()
from django.test import Client
client = Client()
print(client.get('/healthz').status_code, client.get('/api/v1/policies/').status_code)
"""


def test_a_fresh_process_answers_its_first_api_request():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ctxeng.server.settings"}
    env.pop("DATABASE_URL", None)  # no query reaches the database: healthz and a 401
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["200", "401"]
