"""`make run PORT=8123` serves on that port; plain `make run` on 8000 (dry runs: nothing is started)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dry_run(*args: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return subprocess.run(["make", "-n", "run", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_make_run_serves_on_the_port_given():
    assert "manage.py runserver 127.0.0.1:8123" in dry_run("PORT=8123")


def test_make_run_serves_on_8000_by_default():
    assert "manage.py runserver 127.0.0.1:8000" in dry_run()
