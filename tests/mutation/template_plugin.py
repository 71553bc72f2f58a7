"""pytest plugin of the templates' mutation target (tests/mutation/templates.py); inert unless asked.

- `CTXENG_TEMPLATE_STATS=<file>`: record which test rendered which template of `templates/`
  (Django sends `template_rendered` for every template the test environment renders, includes
  and partials too) and write `{"rendered": {template: [test ids]}}` to the file at the end (over
  xdist workers too: each worker writes `<file>.<pid>`, merged by the main process at its end).
- `CTXENG_MUTANT_TEMPLATES=<dir>`: render from `<dir>`, a copy of `templates/` holding one mutant,
  instead of the project's directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

_current: list[str] = []
_rendered: dict[str, set[str]] = {}


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    mutant_dir = os.environ.get("CTXENG_MUTANT_TEMPLATES")
    if mutant_dir:
        from django.conf import settings
        from django.template import engines

        settings.TEMPLATES[0]["DIRS"] = [Path(mutant_dir)]
        # The engines are built on first use; drop any built while the suite was set up.
        engines._templates = None
        engines.__dict__.pop("templates", None)
        engines._engines = {}
    if os.environ.get("CTXENG_TEMPLATE_STATS"):
        from django.test.signals import template_rendered

        template_rendered.connect(_record, weak=False)


def _record(sender, template, context, **kwargs) -> None:
    name = getattr(template, "name", None)
    origin = getattr(getattr(template, "origin", None), "name", "") or ""
    root = Path(__file__).resolve().parents[2] / "templates"
    if name and _current and str(origin).startswith(str(root)):
        _rendered.setdefault(name, set()).add(_current[0])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[:] = [item.nodeid]
    yield
    _current[:] = []


def pytest_sessionfinish(session, exitstatus) -> None:
    path = os.environ.get("CTXENG_TEMPLATE_STATS")
    if not path:
        return
    records = {k: sorted(v) for k, v in sorted(_rendered.items())}
    if hasattr(session.config, "workerinput"):  # an xdist worker: a file of its own, merged by the main process
        if records:
            Path(f"{path}.{os.getpid()}").write_text(json.dumps(records))
        return
    for part in Path(path).parent.glob(Path(path).name + ".*"):
        for name, tests in json.loads(part.read_text()).items():
            records[name] = sorted(set(records.get(name, [])) | set(tests))
        part.unlink()
    Path(path).write_text(json.dumps({"rendered": dict(sorted(records.items()))}))
