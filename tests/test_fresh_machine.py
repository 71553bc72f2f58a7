"""A fresh machine: `make test` checks its system packages before anything long starts.

scripts/check-system runs with a PATH that holds only what the test puts there, so
`redis-server` and `chromium` are missing as on a new machine; `id` and `apt-get` are stand-ins
(root or not; an apt-get that records its arguments and "installs" by writing the binaries),
so the install path runs without touching the real system.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check-system"


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.fixture
def bare_path(tmp_path):
    """A PATH directory with a shell and nothing else; `as_user(uid)` adds an `id` stand-in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "make", "cat", "touch", "chmod", "test", "uname"):
        real = shutil.which(tool)
        if real:
            (bin_dir / tool).symlink_to(real)

    def as_user(uid: int) -> Path:
        _script(bin_dir / "id", f'echo {uid}\n')
        return bin_dir

    return as_user


def _run(bin_dir: Path, *needs: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {"PATH": str(bin_dir), "PY": sys.executable, "HOME": str(bin_dir.parent)}
    return subprocess.run(["sh", str(SCRIPT), *needs], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60, executable=shutil.which("sh"))


def _fake_apt(bin_dir: Path, *, installs: bool) -> Path:
    log = bin_dir.parent / "apt.log"
    make = f'for p in "$@"; do case "$p" in redis-server|chromium|nginx) printf "#!/bin/sh\\n" > {bin_dir}/$p; ' \
           f'chmod +x {bin_dir}/$p;; esac; done\n' if installs else ""
    _script(bin_dir / "apt-get", f'echo "$@" >> {log}\n{make}')
    return log


def test_a_user_without_the_packages_is_stopped_at_once_with_the_command(bare_path):
    result = _run(bare_path(1000), "redis-server", "chromium")
    assert result.returncode == 1
    assert "sudo apt-get update && sudo apt-get install -y redis-server chromium" in result.stderr


def test_root_installs_the_missing_packages_with_apt(bare_path):
    bin_dir = bare_path(0)
    log = _fake_apt(bin_dir, installs=True)
    result = _run(bin_dir, "redis-server", "chromium")
    assert result.returncode == 0, result.stderr
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq redis-server chromium"]
    assert (bin_dir / "redis-server").exists() and (bin_dir / "chromium").exists()


def test_root_is_stopped_when_the_install_leaves_a_package_missing(bare_path):
    bin_dir = bare_path(0)
    _fake_apt(bin_dir, installs=False)
    result = _run(bin_dir, "chromium")
    assert result.returncode == 1 and "still missing after the install: chromium" in result.stderr


def test_nothing_is_installed_when_everything_is_present(bare_path):
    bin_dir = bare_path(0)
    log = _fake_apt(bin_dir, installs=True)
    for binary in ("redis-server", "chromium"):
        _script(bin_dir / binary, "")
    result = _run(bin_dir, "redis-server", "chromium")
    assert (result.returncode, result.stderr) == (0, "") and not log.exists()


def test_only_the_packages_asked_for_are_checked(bare_path):
    assert _run(bare_path(1000), "venv").returncode == 0  # this venv exists; redis/chromium not asked


def test_make_test_stops_before_pytest_on_a_machine_without_them(bare_path):
    """`make test` itself, redis-server and chromium hidden from PATH, not root: a stop before any test runs."""
    bin_dir = bare_path(1000)
    env = {"PATH": str(bin_dir), "HOME": str(bin_dir.parent)}
    done = subprocess.run(["make", "--no-print-directory", "test", f"PY={sys.executable}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, executable=shutil.which("make"))
    assert done.returncode != 0
    # nginx is found in /usr/sbin even off PATH (a user's PATH often lacks it), so only a machine
    # without it at all names it.
    nginx = "" if os.access("/usr/sbin/nginx", os.X_OK) else "nginx "
    assert f"sudo apt-get install -y chromium {nginx}redis-server" in done.stderr
    assert "pytest" not in done.stdout and "passed" not in done.stdout


@pytest.mark.skipif(not os.path.exists("/usr/bin/apt-get"), reason="a Debian-family system")
def test_the_package_names_exist_in_the_system_package_index():
    """The names check-system installs are packages apt knows (a cache lookup; nothing installs)."""
    for name in ("redis-server", "chromium", "nginx", "python3-venv"):
        shown = subprocess.run(["apt-cache", "show", "--no-all-versions", name], capture_output=True, text=True)
        assert shown.returncode == 0 and f"Package: {name}" in shown.stdout, name
