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
    python -m tests.mutation.targets sample --size 20 sdk api    # `make mutate-sample`: a new seed

`sample` draws a new seed unless given one (printed first and with its closing table), judges a
sample of each target named and appends the seed and the scores to `.mutate/scores.jsonl`;
survivors listed in tests/mutation/equivalents.txt are left out of the score and named.
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
import fnmatch
import json
import os
import secrets
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
# The provider adapters and the renderer they serialize; the SDK's framework adapters.
ADAPTERS = ("ctxeng/engine/adapters.py", "ctxeng/engine/render.py", "ctxeng/sdk/langchain.py", "ctxeng/sdk/openai_agents.py")

TARGETS: dict[str, Target] = {
    # The whole engine, adapters and renderer included (the `adapters` target judges those two
    # files again with the SDK's tests as well). Not the slow tests: they install the package
    # into a fresh virtualenv, whose copy of a mutated module cannot import mutmut.
    "engine": Target(mutate=("ctxeng/engine/*",), tests=("tests/engine",)),
    # The SDK but its framework adapters (those are `adapters`): builders, messages, the session.
    "sdk": Target(
        mutate=("ctxeng/sdk/*",),
        tests=("tests/sdk",),
        do_not_mutate=("*/migrations/*", "ctxeng/sdk/langchain.py", "ctxeng/sdk/openai_agents.py"),
    ),
    "adapters": Target(mutate=ADAPTERS, tests=("tests/engine", "tests/sdk")),
    "content": Target(mutate=("ctxeng/content/*",), tests=("tests/content",)),
    "services": Target(mutate=("manifests/services.py",), tests=SERVICE.tests, ignore=SERVICE.ignore),
    "selectors": Target(mutate=("manifests/selectors.py",), tests=SERVICE.tests, ignore=SERVICE.ignore),
    # Tenants, roles and tokens: every API request reads them (`roles_in`, `tenant_for_role`).
    "accounts": Target(
        mutate=("ctxeng/accounts/services.py", "ctxeng/accounts/selectors.py"),
        tests=("tests/accounts", *SERVICE.tests),
        ignore=SERVICE.ignore,
    ),
    # The DRF views' logic lives in undecorated module-level functions (mutmut skips decorated
    # functions, and every view method carries `@extend_schema`).
    "api": Target(
        mutate=("manifests/api.py", "policies/api.py"),
        tests=("tests/policies", *SERVICE.tests),
        ignore=SERVICE.ignore,
    ),
    "policies": Target(
        mutate=("policies/services.py", "policies/selectors.py"),
        # Every fast test that imports, publishes, previews or upgrades a policy (grep for
        # policy_import, upgrades and the policy editor's pages).
        tests=(
            "tests/policies",
            "tests/dashboard/test_policy_editor.py",
            "tests/dashboard/test_impact_job.py",
            "tests/dashboard/test_impact_selection.py",
            "tests/dashboard/test_policy_restore.py",
            "tests/dashboard/test_retired_revision.py",
            "tests/dashboard/test_upgrades.py",
            "tests/manifests/test_commands.py",
            "tests/manifests/test_api_submit.py",
            "tests/service/test_policy_yaml_work.py",
            "tests/service/test_hardening_iii.py",
        ),
    ),
    # The dashboard's selectors: the run, inspector and compare pages' reads, and the policy pages'.
    "dashboard": Target(
        mutate=("manifests/dashboard_selectors.py", "policies/dashboard_selectors.py"),
        tests=("tests/dashboard", "tests/policies/test_impact_deltas.py", "tests/manifests/test_reinjection.py"),
        ignore=BROWSER_TESTS,
    ),
}
# What `make mutate-sample` draws from, in this order: the list first.
SAMPLED = ("engine", "sdk", "adapters", "services", "selectors", "dashboard", "api", "accounts", "policies", "content")
# Survivors judged equivalent by hand, one `name  reason` a line: a report leaves them out of
# the score and lists them.
EQUIVALENTS = Path(__file__).resolve().parent / "equivalents.txt"


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
        # Fork each mutant's test process from a server that only collected the tests, not from
        # mutmut's own process, which ran the suite for its statistics: a child forked from that
        # one inherited its event loop and waited on it for ever (no CPU, a "timeout" to mutmut).
        'process_isolation = "forkserver"',
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
        if link.is_symlink() and link.readlink() != ROOT / entry.rstrip("/"):
            link.unlink()  # a workspace copied from another checkout: link this one
        if not link.is_symlink():
            link.symlink_to(ROOT / entry.rstrip("/"))
    pyproject = project_pyproject_without_mutmut() + "\n" + mutmut_section(target)
    path = ws / "pyproject.toml"
    if not path.exists() or path.read_text() != pyproject:
        path.write_text(pyproject)
    return ws


def mutated_files(name: str) -> list[str]:
    """The target's source files mutmut mutates (relative paths, in name order)."""
    target = TARGETS[name]
    files = []
    for source in SOURCE_PATHS:
        files += [p.relative_to(ROOT).as_posix() for p in (ROOT / source).rglob("*.py")]
    return sorted(
        f for f in files
        if any(fnmatch.fnmatch(f, pattern) for pattern in target.mutate)
        and not any(fnmatch.fnmatch(f, pattern) for pattern in target.do_not_mutate)
    )


def population(name: str) -> list[str]:
    """Every mutant of the target, in a fixed order: files in name order, each file's names sorted."""
    meta_root = workspace(name) / "mutants"
    names: list[str] = []
    for path in mutated_files(name):
        meta = meta_root / (path + ".meta")
        if meta.exists():
            names.extend(sorted(json.loads(meta.read_text())["exit_code_by_key"]))
    return names


def equivalents() -> dict[str, str]:
    """The survivors judged equivalent (tests/mutation/equivalents.txt): name -> why."""
    found = {}
    for line in EQUIVALENTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.strip().partition(" ")
            found[name] = why.strip()
    return found


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
        # Generate the mutants (again for the files changed since) and the test statistics,
        # judging none: mutmut stops (an assertion, logged in generate.log) at a name that
        # matches no mutant. The population is then the source as it is now.
        with (ws / "generate.log").open("w") as log:
            mutmut(ws, "run", "--max-children", str(children), "no.such.mutant*", stdout=log)
        import random

        if seed is None:
            seed = new_seed()
        pool = population(name)
        if not pool:
            print(f"{name}: no mutants generated (see {ws / 'generate.log'})")
            return 1
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


def report(name: str, sample: int | None, seed: int | None) -> dict[str, object]:
    """Print (and return) the sample's counts: killed, survived, equivalent, other; the score."""
    from tests.mutation.sample import status, wilson

    codes: dict[str, int | None] = {}
    for meta in (workspace(name) / "mutants").rglob("*.py.meta"):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    pool = population(name)
    names = pool if sample is None else sample_path(name, seed, sample).read_text().split()
    by = {n: status(codes.get(n)) for n in names}
    known = equivalents()
    equivalent = sorted(n for n, s in by.items() if s == "survived" and n in known)
    killed = sum(1 for s in by.values() if s in ("killed", "timeout"))
    survived = sum(1 for s in by.values() if s == "survived") - len(equivalent)
    judged = killed + survived
    lo, hi = wilson(killed, judged)
    score = 100 * killed / judged if judged else None
    print(f"{name}: {len(pool)} mutants, {len(names)} looked at: killed {killed}, survived {survived}, "
          f"equivalent {len(equivalent)}, other {len(names) - judged - len(equivalent)}; "
          + (f"{score:.1f}% killed excl. equivalents (95% {100 * lo:.1f}-{100 * hi:.1f}%)" if judged else "none judged"))
    if names and not judged and not equivalent:
        print(f"  nothing judged: see mutmut's output above ({workspace(name)})")
    for n in equivalent:
        print(f"  equivalent: {n}  ({known[n]})")
    for n in sorted(n for n, s in by.items() if s not in ("killed", "timeout") and n not in equivalent):
        print(f"  {by[n]}: {n}")
    return {
        "target": name, "mutants": len(pool), "sampled": len(names), "killed": killed, "survived": survived,
        "equivalent": equivalent, "other": len(names) - judged - len(equivalent),
        "score": None if score is None else round(score, 1), "interval": [round(100 * lo, 1), round(100 * hi, 1)],
        "survivors": sorted(n for n, s in by.items() if s == "survived" and n not in equivalent),
    }


def new_seed() -> int:
    """A seed nobody has written tests against: drawn afresh each time (printed and recorded)."""
    return secrets.randbelow(1_000_000)


def sample(names: list[str], *, size: int, seed: int | None, children: int) -> int:
    """`make mutate-sample`: judge a random sample of `size` mutants of each target, then record the
    seed and the scores in `.mutate/scores.jsonl` (one JSON line a run) and print them."""
    seed = new_seed() if seed is None else seed
    print(f"mutation sample: seed {seed}, {size} mutants of each of {', '.join(names)}", flush=True)
    started = time.time()
    rows = []
    for name in names:
        start = time.monotonic()
        code = run(name, children=children, sample=size, seed=seed, names=[])
        row = report(name, size, seed)
        row["seconds"] = round(time.monotonic() - start)
        row["exit"] = code
        rows.append(row)
        print(flush=True)
    killed = sum(r["killed"] for r in rows)
    judged = killed + sum(r["survived"] for r in rows)
    record = {
        "seed": seed, "size": size, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started), "commit": _commit(), "targets": rows,
        "killed": killed, "judged": judged, "score": round(100 * killed / judged, 1) if judged else None,
    }
    WORKSPACES.mkdir(exist_ok=True)
    with (WORKSPACES / "scores.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"mutation sample, seed {seed} (recorded in .mutate/scores.jsonl):")
    print("| target | mutants | sampled | killed | survived | equivalent | other | score excl. equivalents | 95% interval | s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        score = "-" if r["score"] is None else f"{r['score']}% ({r['killed']}/{r['killed'] + r['survived']})"
        print(f"| `{r['target']}` | {r['mutants']:,} | {r['sampled']} | {r['killed']} | {r['survived']} | "
              f"{len(r['equivalent'])} | {r['other']} | {score} | {r['interval'][0]}-{r['interval'][1]}% | {r['seconds']} |")
    print(f"all targets, seed {seed}: {record['score']}% ({killed}/{judged}) killed excl. equivalents")
    return max((r["exit"] for r in rows), default=0)


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    r = sub.add_parser("run")
    r.add_argument("target", choices=sorted(TARGETS))
    r.add_argument("names", nargs="*", help="mutant names or globs (mutmut's); default: all")
    r.add_argument("--max-children", type=int, default=1)
    r.add_argument("--sample", type=int)
    r.add_argument("--seed", type=int, help="with --sample; default: a fresh one, printed")
    s = sub.add_parser("report")
    s.add_argument("target", choices=sorted(TARGETS))
    s.add_argument("--sample", type=int)
    s.add_argument("--seed", type=int, help="the seed of the sample (required with --sample)")
    m = sub.add_parser("sample", help="judge a freshly seeded sample of each target and record the scores")
    m.add_argument("targets", nargs="*", choices=sorted(TARGETS), metavar="TARGET", help="default: every target")
    m.add_argument("--size", type=int, default=20)
    m.add_argument("--seed", type=int, help="default: a fresh one, printed")
    m.add_argument("--max-children", type=int, default=1)
    args = p.parse_args(argv)
    if args.cmd == "list":
        for name, target in TARGETS.items():
            print(f"{name}: {' '.join(target.mutate)} <- {' '.join(target.selection())}")
        return 0
    if args.cmd == "run":
        return run(args.target, children=args.max_children, sample=args.sample, seed=args.seed, names=args.names)
    if args.cmd == "sample":
        return sample(args.targets or list(SAMPLED), size=args.size, seed=args.seed, children=args.max_children)
    if args.sample is not None and args.seed is None:
        p.error("report --sample needs the sample's --seed")
    report(args.target, args.sample, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
