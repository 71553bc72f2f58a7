"""The engine is pure Python: importing and running it loads no Django."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_importing_and_running_the_engine_imports_no_django():
    code = (
        "import json, sys\n"
        "from ctxeng.engine import assemble, parse_policy, parse_request, policy_digest, InvalidInput, AssemblyResult\n"
        "from tests.engine.builders import request, run\n"
        "run(request())\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework', 'celery'))))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
