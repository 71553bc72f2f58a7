"""The templates' own mutation target: mutate what a page decides, render it through the tests.

mutmut mutates Python only, and 1,645 lines of `templates/**/*.html` decide what a page shows: which
branch of an `{% if %}`, which rows of a `{% for %}`, which filter formats or escapes a value. This
module mutates those decisions the way mutmut mutates code, one change a mutant:

- `{% if X %}` / `{% elif X %}` → `not X` (or `X` for `not X`); with `and`/`or` in X, the first
  `and` ↔ `or` instead (Django's `if` has no parentheses, so `not` would bind to one operand);
- `{% for a in xs %}` → `{% for a in xs|slice:"1:" %}` (the loop skips its first row);
- `{{ v|f }}`, `{{ v|f:arg }}` → the filter dropped (each filter of each variable tag: `default`,
  `urlencode`, `floatformat`, the project's own filters...).

A mutant's name is `templates.<path>:<line>:<column>:<kind>` (its diff is the key of
tests/mutation/equivalents.txt, as for mutmut's). It is judged by the tests that render its
template: `stats` runs the Django selection once with a pytest plugin
(tests/mutation/template_plugin.py) recording, through Django's `template_rendered` test signal,
which test rendered which template, includes and partials too; `judge` then runs, for each mutant,
those tests in a fresh pytest process whose template directory is a copy of `templates/` with the
one change (the plugin points `TEMPLATES[0]["DIRS"]` at it). A failing test kills the mutant; none
failing is a survivor, and a template no test renders leaves its mutants "not reached", counted as
survivors. The verdicts are kept in `.mutate/templates/verdicts.json`.

    python -m tests.mutation.templates stats            # the Django selection, once
    python -m tests.mutation.templates list             # every mutant's name
    python -m tests.mutation.targets run templates NAME ...   # judge some
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
WORKSPACE = ROOT / ".mutate" / "templates"
STATS = WORKSPACE / "rendered.json"
VERDICTS = WORKSPACE / "verdicts.json"
PREFIX = "templates."

CONDITION = re.compile(r"\{%-?\s*(if|elif)\s+(.+?)\s*-?%\}")
LOOP = re.compile(r"\{%-?\s*for\s+(.+?)\s+in\s+(.+?)(\s+reversed)?\s*-?%\}")
VARIABLE = re.compile(r"\{\{(.+?)\}\}")
FILTER = re.compile(r"""\|\s*(\w+)(?::("[^"]*"|'[^']*'|[^\s|}]+))?""")
BOOLEAN = re.compile(r"\s(and|or)\s")


def template_files() -> list[str]:
    return sorted(p.relative_to(TEMPLATES).as_posix() for p in TEMPLATES.rglob("*.html"))


def line_mutants(line: str) -> list[tuple[int, str, str]]:
    """Each mutant of one line: (column, kind, the mutated line)."""
    out = []
    for m in CONDITION.finditer(line):
        expr, start, end = m.group(2), m.start(2), m.end(2)
        boolean = BOOLEAN.search(expr)
        if boolean:
            swapped = "or" if boolean.group(1) == "and" else "and"
            new = expr[: boolean.start(1)] + swapped + expr[boolean.end(1):]
            kind = f"{m.group(1)}-{boolean.group(1)}-to-{swapped}"
        elif expr.startswith("not "):
            new, kind = expr[4:], f"{m.group(1)}-drop-not"
        else:
            new, kind = "not " + expr, f"{m.group(1)}-negate"
        out.append((start + 1, kind, line[:start] + new + line[end:]))
    for m in LOOP.finditer(line):
        end = m.end(2)
        out.append((m.start(2) + 1, "for-skip-first", line[:end] + '|slice:"1:"' + line[end:]))
    for v in VARIABLE.finditer(line):
        for f in FILTER.finditer(v.group(1)):
            start, end = v.start(1) + f.start(), v.start(1) + f.end()
            out.append((start + 1, f"drop-{f.group(1)}", line[:start] + line[end:]))
    return out


def generate() -> dict[str, tuple[str, str]]:
    """Every mutant: name -> (template path, the whole mutated text)."""
    found = {}
    for path in template_files():
        lines = (TEMPLATES / path).read_text().split("\n")
        for number, line in enumerate(lines, start=1):
            for column, kind, mutated in line_mutants(line):
                text = "\n".join(lines[: number - 1] + [mutated] + lines[number:])
                found[f"{PREFIX}{path}:{number}:{column}:{kind}"] = (path, text)
    return found


def diffs() -> dict[str, str]:
    """Every mutant's unified diff, three lines of context, as mutmut's show prints a mutant."""
    out = {}
    for name, (path, text) in generate().items():
        before = (TEMPLATES / path).read_text().split("\n")
        out[name] = "\n".join(difflib.unified_diff(before, text.split("\n"), fromfile=f"templates/{path}",
                                                   tofile=f"templates/{path}", lineterm=""))
    return out


def selection() -> list[str]:
    from tests.mutation.targets import FAST

    return FAST.selection()


def pytest_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly",
            "-p", "tests.mutation.template_plugin", *args]


def environment(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # SQLite, as for mutmut's targets
    env.update(extra)
    return env


def stats(tests: list[str] | None = None, workers: int = 1) -> int:
    """Run the selection (or `tests`) once, over `workers` xdist workers, and record which tests
    render which template."""
    WORKSPACE.mkdir(parents=True, exist_ok=True)
    for part in WORKSPACE.glob(STATS.name + ".*"):  # a worker's records left by a run that was stopped
        part.unlink()
    args = tests or selection()
    start = time.monotonic()
    command = [a for a in pytest_command(args) if a != "-x"] + (["-n", str(workers)] if workers > 1 else [])
    code = subprocess.call(command, cwd=ROOT, env=environment(CTXENG_TEMPLATE_STATS=str(STATS)))
    data = json.loads(STATS.read_text()) if STATS.exists() else {}
    data["selection"] = args
    data["seconds"] = round(time.monotonic() - start)
    STATS.write_text(json.dumps(data, indent=1, sort_keys=True))
    print(f"templates: statistics of {len(data.get('rendered', {}))} templates in {data['seconds']} s (exit {code})")
    return code


def tests_rendering(path: str) -> list[str]:
    rendered = json.loads(STATS.read_text())["rendered"] if STATS.exists() else {}
    return sorted(rendered.get(path, []))


def verdicts() -> dict[str, str]:
    return json.loads(VERDICTS.read_text()) if VERDICTS.exists() else {}


def judge(names: list[str], workers: int = 1) -> int:
    """Judge each mutant with the tests that render its template; record the verdicts."""
    if not STATS.exists():
        stats(workers=workers)
    mutants = generate()
    recorded = verdicts()
    for name in names:
        if name not in mutants:
            print(f"templates: no mutant {name}")
            return 1
        path, text = mutants[name]
        tests = tests_rendering(path)
        start = time.monotonic()
        if not tests:
            verdict = "not reached"
        else:
            with tempfile.TemporaryDirectory(prefix="tpl-mutant-") as copy:
                shutil.copytree(TEMPLATES, copy, dirs_exist_ok=True)
                (Path(copy) / path).write_text(text)
                code = subprocess.call(pytest_command(tests), cwd=ROOT, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, env=environment(CTXENG_MUTANT_TEMPLATES=copy))
            # pytest: 1 a test failed; 0 all passed; anything else (an error in collection, a
            # usage error) is neither and is recorded as such.
            verdict = {0: "survived", 1: "killed"}.get(code, f"error (pytest exit {code})")
        recorded[name] = verdict
        VERDICTS.parent.mkdir(parents=True, exist_ok=True)
        VERDICTS.write_text(json.dumps(recorded, indent=1, sort_keys=True))
        print(f"templates: {verdict}: {name} ({len(tests)} tests, {time.monotonic() - start:.0f} s)", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["stats"]:
        return stats(argv[1:] or None)
    if argv[:1] == ["list"]:
        print("\n".join(generate()))
        return 0
    if argv[:1] == ["judge"]:
        return judge(argv[1:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
