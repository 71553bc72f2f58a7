"""`make run PORT=8123` serves on that port; plain `make run` on 8000 (dry runs: nothing is started)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def dry_run(*args: str) -> str:
    assert shutil.which("make") is not None, "make is not installed (apt-get install make)"
    return subprocess.run(["make", "-n", "run", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_make_run_serves_on_the_port_given():
    assert "manage.py runserver 127.0.0.1:8123" in dry_run("PORT=8123")


def test_make_run_serves_on_8000_by_default():
    assert "manage.py runserver 127.0.0.1:8000" in dry_run()


def test_make_run_on_a_fresh_machine_installs_only_the_server_extra(tmp_path):
    """The first run serves a dashboard: no test tools, framework adapters or browser drivers."""
    commands = dry_run(f"VENV={tmp_path / 'venv'}")
    installs = [line for line in commands.splitlines() if "pip install" in line and " -e " in line]
    assert installs == [line for line in installs if line.rstrip().endswith("-e '.[server]'")], installs
    assert len(installs) == 1, installs
