"""Mutation testing per module of the product: the target table and the driver that runs mutmut on one.

mutmut 3 reads its configuration only from `pyproject.toml` in the directory it runs in, and keeps
its mutants and results in `./mutants/`. So each target gets a workspace of its own,
`.mutate/<target>/` (git-ignored): symbolic links to every top-level entry of the project, and a
`pyproject.toml` that is the project's with a `[tool.mutmut]` section written from the table
below. `mutmut run` there mutates only that target's files and judges each mutant with that
target's tests; its results stay cached in `.mutate/<target>/mutants/`, so a second run of the
whole target re-judges only what changed (names given on the command line are always re-judged).

    python -m tests.mutation.targets run content                 # every mutant of the target
    python -m tests.mutation.targets run content --sample 50 --seed 3101
    python -m tests.mutation.targets report content --sample 50 --seed 3101
    python -m tests.mutation.targets list

`--sample N --seed S` judges a uniform random sample of N of the target's mutants (drawn with
tests/mutation/sample.py's population: every mutant of the target's files, files in name order,
names sorted) and writes the names to `.mutate/<target>/sample-<seed>-<N>.txt`; `report` prints
the sample's counts, Wilson interval and survivors. mutmut puts `mutants/` first on `sys.path`
and removes the workspace directory from it, so the tests import the mutated copy, not the
editable install (tests/mutation/test_targets.py checks the table; docs/mutation.md says how a
planted mutant was seen killed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKSPACES = ROOT / ".mutate"
# Every Django app and the package: mutmut copies these into mutants/ and puts that copy first on
# sys.path, so the whole product is imported from one place whichever file is mutated.
SOURCE_PATHS = ("ctxeng/", "manifests/", "policies/")
# Not linked into a workspace: the virtual environment, version control, caches, the workspaces.
NOT_LINKED = {".venv", ".git", ".mutate", "mutants", "pyproject.toml", ".pytest_cache", ".ruff_cache"}

# The service tests that start a real worker, a subprocess, a browser or a web server, or that
# rebuild a database: too slow to run once per mutant, and the fast tests reach the same code.
SLOW_SERVICE_TESTS = (
    "tests/service/test_isolation_matrix.py",
    "tests/service/test_live_worker.py",
    "tests/service/test_crash_consistency.py",
    "tests/service/test_database_outage.py",
    "tests/service/test_deploy.py",
    "tests/service/test_production_layout.py",
    "tests/service/test_concurrency.py",
    "tests/service/test_startup.py",
    "tests/service/test_worker_startup_checks.py",
    "tests/service/test_sdk_examples.py",
)
BROWSER_TESTS = (
    "tests/dashboard/test_browser.py",
    "tests/dashboard/test_browser_editor.py",
    "tests/dashboard/test_browser_layouts.py",
    "tests/dashboard/test_browser_window.py",
)


@dataclass(frozen=True)
class Target:
    """One module (or a few) to mutate, and the tests that judge its mutants."""

    mutate: tuple[str, ...]
    tests: tuple[str, ...]
    ignore: tuple[str, ...] = ()
    # Passed to pytest with the selection: `-m "not slow"` drops the marked end-to-end tests.
    marker: str = "not slow"
    do_not_mutate: tuple[str, ...] = field(default=("*/migrations/*",))

    def selection(self) -> list[str]:
        args = list(self.tests) + [f"--ignore={path}" for path in self.ignore]
        return args + (["-m", self.marker] if self.marker else [])


SERVICE = Target(
    mutate=(),
    tests=("tests/manifests", "tests/service"),
    ignore=SLOW_SERVICE_TESTS,
)

TARGETS: dict[str, Target] = {
    "engine": Target(mutate=("ctxeng/engine/*",), tests=("tests/engine",), marker=""),
    "content": Target(mutate=("ctxeng/content/*",), tests=("tests/content",)),
    "services": Target(mutate=("manifests/services.py",), tests=SERVICE.tests, ignore=SERVICE.ignore),
    "selectors": Target(mutate=("manifests/selectors.py",), tests=SERVICE.tests, ignore=SERVICE.ignore),
    "api": Target(mutate=("manifests/api.py",), tests=SERVICE.tests, ignore=SERVICE.ignore),
    "policies": Target(
        mutate=("policies/services.py",),
        # Every fast test that imports, publishes, previews or upgrades a policy (grep for
        # policy_import, upgrades and the policy editor's pages).
        tests=(
            "tests/policies",
            "tests/dashboard/test_policy_editor.py",
            "tests/dashboard/test_impact_job.py",
            "tests/dashboard/test_retired_revision.py",
            "tests/dashboard/test_upgrades.py",
            "tests/manifests/test_commands.py",
            "tests/manifests/test_api_submit.py",
            "tests/service/test_policy_yaml_work.py",
            "tests/service/test_hardening_iii.py",
        ),
    ),
    "dashboard": Target(
        mutate=("manifests/dashboard_selectors.py", "policies/selectors.py"),
        tests=("tests/dashboard",),
        ignore=BROWSER_TESTS,
    ),
}


def workspace(name: str) -> Path:
    return WORKSPACES / name


def mutmut_section(target: Target) -> str:
    lines = [
        "[tool.mutmut]",
        "# Written by tests/mutation/targets.py for this workspace; edit the table there.",
        f"source_paths = {json.dumps(list(SOURCE_PATHS))}",
        f"only_mutate = {json.dumps(list(target.mutate))}",
        f"do_not_mutate = {json.dumps(list(target.do_not_mutate))}",
        # Everything else the tests read: manage.py first (pytest-django puts the nearest
        # directory holding one on sys.path), templates, static files, docs, examples.
        f"also_copy = {json.dumps(linked_entries(exclude_sources=True))}",
        f"pytest_add_cli_args_test_selection = {json.dumps(target.selection())}",
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:randomly"]',
    ]
    return "\n".join(lines) + "\n"


def linked_entries(*, exclude_sources: bool = False) -> list[str]:
    sources = {p.rstrip("/") for p in SOURCE_PATHS}
    names = []
    for entry in sorted(ROOT.iterdir()):
        if entry.name in NOT_LINKED or entry.name.endswith(".egg-info") or entry.name == "__pycache__":
            continue
        if exclude_sources and entry.name in sources:
            continue
        names.append(entry.name + ("/" if entry.is_dir() else ""))
    return names


def project_pyproject_without_mutmut() -> str:
    out, skipping = [], False
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("["):
            skipping = line.strip() == "[tool.mutmut]"
        if not skipping:
            out.append(line)
    return "\n".join(out).rstrip() + "\n"


def prepare(name: str) -> Path:
    target = TARGETS[name]
    ws = workspace(name)
    ws.mkdir(parents=True, exist_ok=True)
    for entry in linked_entries():
        link = ws / entry.rstrip("/")
        if not link.is_symlink():
            link.symlink_to(ROOT / entry.rstrip("/"))
    pyproject = project_pyproject_without_mutmut() + "\n" + mutmut_section(target)
    path = ws / "pyproject.toml"
    if not path.exists() or path.read_text() != pyproject:
        path.write_text(pyproject)
    return ws


def population(name: str) -> list[str]:
    """Every mutant of the target, in a fixed order: files in name order, each file's names sorted."""
    meta_root = workspace(name) / "mutants"
    names: list[str] = []
    for pattern in TARGETS[name].mutate:
        for meta in sorted(meta_root.glob(pattern.rstrip("*") + "*.py.meta" if pattern.endswith("*") else pattern + ".meta")):
            names.extend(sorted(json.loads(meta.read_text())["exit_code_by_key"]))
    return names


def sample_path(name: str, seed: int, size: int) -> Path:
    return workspace(name) / f"sample-{seed}-{size}.txt"


def mutmut(ws: Path, *args: str, stdout=None) -> int:
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # SQLite: PostgreSQL test database names collide between checkouts
    command = [str(Path(sys.executable).parent / "mutmut"), *args]
    return subprocess.call(command, cwd=ws, env=env, stdout=stdout, stderr=subprocess.STDOUT if stdout else None)


def run(name: str, *, children: int, sample: int | None, seed: int | None, names: list[str]) -> int:
    ws = prepare(name)
    if sample is not None:
        if not (ws / "mutants").exists() or not population(name):
            # Generate the mutants and the test statistics once, judging none: mutmut stops
            # (an assertion, logged in generate.log) at a name that matches no mutant.
            with (ws / "generate.log").open("w") as log:
                mutmut(ws, "run", "--max-children", str(children), "no.such.mutant*", stdout=log)
        import random

        pool = population(name)
        names = random.Random(seed).sample(pool, min(sample, len(pool)))
        sample_path(name, seed, sample).write_text("\n".join(names) + "\n")
        print(f"{name}: {len(pool)} mutants, judging a sample of {len(names)} (seed {seed})")
    start = time.monotonic()
    code = mutmut(ws, "run", "--max-children", str(children), *names)
    elapsed = time.monotonic() - start
    if names:
        print(f"{name}: judged {len(names)} mutants in {elapsed:.0f} s ({elapsed / len(names):.1f} s a mutant)")
    elif code == 0:
        mutmut(ws, "export-cicd-stats")
        from tests.mutation.score import main as score

        os.chdir(ROOT)
        return score([name])
    return code


def report(name: str, sample: int | None, seed: int | None) -> int:
    from tests.mutation.sample import status, wilson

    codes: dict[str, int | None] = {}
    for meta in (workspace(name) / "mutants").rglob("*.py.meta"):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    pool = population(name)
    names = pool if sample is None else sample_path(name, seed, sample).read_text().split()
    by = {n: status(codes.get(n)) for n in names}
    killed = sum(1 for s in by.values() if s in ("killed", "timeout"))
    survived = sum(1 for s in by.values() if s == "survived")
    judged = killed + survived
    lo, hi = wilson(killed, judged)
    print(f"{name}: {len(pool)} mutants, {len(names)} looked at: killed {killed}, survived {survived}, "
          f"other {len(names) - judged}; {100 * killed / max(judged, 1):.1f}% killed (95% {100 * lo:.1f}-{100 * hi:.1f}%)")
    for n in sorted(n for n, s in by.items() if s not in ("killed", "timeout")):
        print(f"  {by[n]}: {n}")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    r = sub.add_parser("run")
    r.add_argument("target", choices=sorted(TARGETS))
    r.add_argument("names", nargs="*", help="mutant names or globs (mutmut's); default: all")
    r.add_argument("--max-children", type=int, default=1)
    r.add_argument("--sample", type=int)
    r.add_argument("--seed", type=int, default=3101)
    s = sub.add_parser("report")
    s.add_argument("target", choices=sorted(TARGETS))
    s.add_argument("--sample", type=int)
    s.add_argument("--seed", type=int, default=3101)
    args = p.parse_args(argv)
    if args.cmd == "list":
        for name, target in TARGETS.items():
            print(f"{name}: {' '.join(target.mutate)} <- {' '.join(target.selection())}")
        return 0
    if args.cmd == "run":
        return run(args.target, children=args.max_children, sample=args.sample, seed=args.seed, names=args.names)
    return report(args.target, args.sample, args.seed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
