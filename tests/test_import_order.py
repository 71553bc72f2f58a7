"""The REST module can be the first of the service's modules a process imports.

DRF builds `APIView` from DEFAULT_PARSER_CLASSES (ctxeng.server.rest.BoundedJSONParser) the first time
`rest_framework.views` is imported; ctxeng.server.rest importing that module at its top made a cycle
whenever ctxeng.server.rest came first, as in a Celery worker's start-up, where DRF's pagination check
imports ctxeng.server.rest.BoundedPagination: the worker exited with an ImportError.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_rest_module_imports_first_in_a_fresh_process():
    code = ("import os, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'ctxeng.server.settings'; django.setup(); "
            "import ctxeng.server.rest; from rest_framework.settings import api_settings; "
            "print(api_settings.DEFAULT_PAGINATION_CLASS.__name__, api_settings.DEFAULT_PARSER_CLASSES[0].__name__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["BoundedPagination", "BoundedJSONParser"]
