"""Mutation testing of the whole product: the target table and the driver that runs mutmut on it.

mutmut 3 reads its configuration only from `pyproject.toml` in the directory it runs in, and keeps
its mutants and results in `./mutants/`. So each target gets a workspace of its own,
`.mutate/<target>/` (git-ignored): symbolic links to the project's top-level entries, a copy of
the sources with module-level decorators rewritten (tests/mutation/mutants.py: mutmut skips
decorated functions), and a `pyproject.toml` that is the project's with a `[tool.mutmut]` section
written from the table below. `mutmut run` there mutates only that target's files and judges each
mutant with the tests; its results stay cached in `.mutate/<target>/mutants/`, so a second run of
the whole target re-judges only what changed (names given on the command line are always
re-judged). Every product module with a function is in exactly one target, and every target is
judged by every test that runs in the test process (tests/mutation/test_targets.py checks both).

    python -m tests.mutation.targets run content                 # every mutant of the target
    python -m tests.mutation.targets run content --sample 50 --seed 3101
    python -m tests.mutation.targets report content --sample 50 --seed 3101
    python -m tests.mutation.targets list
    python -m tests.mutation.targets sample                      # `make mutate-sample`: the whole product

`sample` draws a new seed unless given one and one stratified sample over the targets (139 by
default: ±5 points at 90%), each target's share in proportion to its mutant count; mutmut's
targets are judged together in `.mutate/product/`, the templates by tests/mutation/templates.py.
Each drawn mutant's name, key, verdict and diff go to tests/mutation/samples/seed-<seed>/ (to
commit), the scores also to `.mutate/scores.jsonl`. A mutant no test reaches is a survivor;
survivors whose diff key is in tests/mutation/equivalents.txt are left out of the score and named,
and an equivalent whose diff no longer exists is reported stale. (Until 2026-12-07 `--size N` meant
N of each target, uniformly; the populations and the draw changed since, so earlier seeds do not
draw their samples again.) `--sample N --seed S` judges a uniform random sample of one target and
writes the names to `.mutate/<target>/sample-<seed>-<N>.txt`; `report` prints its counts, Wilson
interval and survivors. mutmut puts `mutants/` first on `sys.path` and removes the workspace
directory from it, so the tests import the mutated copy, not the editable install.
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
from dataclasses import dataclass, field, replace
from pathlib import Path

from tests.mutation import xdist_stats

ROOT = Path(__file__).resolve().parents[2]
WORKSPACES = ROOT / ".mutate"
# Every Django app and the package: mutmut copies these into mutants/ and puts that copy first on
# sys.path, so the whole product is imported from one place whichever file is mutated.
SOURCE_PATHS = ("ctxeng/", "manifests/", "policies/")
# Not linked into a workspace: the virtual environment, version control, caches, the workspaces.
NOT_LINKED = {".venv", ".git", ".mutate", "mutants", "pyproject.toml", ".pytest_cache", ".ruff_cache"}

# Tests that run the product in another process (a Celery worker, `manage.py`, gunicorn behind
# nginx, a fresh virtualenv or machine, the SDK's examples as scripts, a fresh interpreter): that
# process imports the editable install, not mutmut's copy, so no mutant is active there and these
# tests cannot judge one; they are also the slowest. Every other test runs in the test process.
OUT_OF_PROCESS_TESTS = (
    "tests/service/test_live_worker.py",
    "tests/service/test_crash_consistency.py",
    "tests/service/test_deploy.py",
    "tests/service/test_production_layout.py",
    "tests/service/test_startup.py",
    "tests/service/test_worker_startup_checks.py",
    "tests/service/test_sdk_examples.py",
    "tests/test_fresh_machine.py",
    "tests/test_make_run.py",
    "tests/test_import_order.py",
    "tests/test_light_install.py",
)
BROWSER_TESTS = (
    "tests/dashboard/test_browser.py",
    "tests/dashboard/test_browser_accessibility.py",
    "tests/dashboard/test_browser_editor.py",
    "tests/dashboard/test_browser_impact.py",
    "tests/dashboard/test_browser_layouts.py",
    "tests/dashboard/test_browser_long_run.py",
    "tests/dashboard/test_browser_run.py",
    "tests/dashboard/test_browser_window.py",
)
# The mutation tooling's own tests: they exercise no product module.
NOT_PRODUCT_TESTS = ("tests/mutation",)
# Tests that read the product's source text (a scan of every module): the workspace holds each
# mutated module rewritten by mutmut (a trampoline a function, every mutant of it beside it), so
# they fail there with no mutant active, and cannot judge one. Found by the first clean run of the
# whole selection in a workspace (2026-12-07); deselected by node id, the rest of their files stay.
READS_SOURCE_TESTS = (
    "tests/dashboard/test_ascii_numbers.py::test_every_numeric_parameter_of_the_api_and_the_dashboard_is_in_a_table_above",
    "tests/dashboard/test_no_unescaped_markup.py::test_no_template_or_view_bypasses_autoescaping_outside_the_allow_list",
)


@dataclass(frozen=True)
class Target:
    """One module (or a few) to mutate, and the tests that judge its mutants."""

    mutate: tuple[str, ...]
    tests: tuple[str, ...]
    ignore: tuple[str, ...] = ()
    deselect: tuple[str, ...] = ()  # single tests (node ids) of files the selection keeps
    # Passed to pytest with the selection: `-m "not slow"` drops the marked end-to-end tests.
    marker: str = "not slow"
    do_not_mutate: tuple[str, ...] = field(default=("*/migrations/*",))

    def selection(self) -> list[str]:
        args = list(self.tests) + [f"--ignore={path}" for path in self.ignore] + [f"--deselect={t}" for t in self.deselect]
        return args + (["-m", self.marker] if self.marker else [])


# Every test that runs in the test process, `-m "not slow"`: until 2026-12-07 each target had
# its own, narrower selection (the engine's tests for the engine, the service's for the
# services...), which left out tests that exercise a module from another area (the isolation
# matrix and the shared-ids matrix for the dashboard's reads, the database outage, the dashboard's
# tests for the services). mutmut runs, for each mutant, only the tests its statistics saw
# calling the mutated function, so a wide selection costs one longer statistics run, not a
# longer run per mutant.
FAST = Target(mutate=(), tests=("tests",), ignore=OUT_OF_PROCESS_TESTS + BROWSER_TESTS + NOT_PRODUCT_TESTS,
              deselect=READS_SOURCE_TESTS)
# The provider adapters and the renderer they serialize; the SDK's framework adapters.
ADAPTERS = ("ctxeng/engine/adapters.py", "ctxeng/engine/render.py", "ctxeng/sdk/langchain.py", "ctxeng/sdk/openai_agents.py")
MIGRATIONS = ("*/migrations/*",)


def _target(*mutate: str, exclude: tuple[str, ...] = ()) -> Target:
    return replace(FAST, mutate=mutate, do_not_mutate=(*MIGRATIONS, *exclude))


# Each product module is in exactly one target (tests/mutation/test_targets.py): the targets are
# the strata of one whole-product sample.
TARGETS: dict[str, Target] = {
    # The engine but its adapters and renderer (until 2026-12-07 `adapters` mutated those too).
    "engine": _target("ctxeng/engine/*", exclude=("ctxeng/engine/adapters.py", "ctxeng/engine/render.py")),
    # The SDK but its framework adapters: builders, messages, tools, the session, the recorder.
    "sdk": _target("ctxeng/sdk/*", exclude=("ctxeng/sdk/langchain.py", "ctxeng/sdk/openai_agents.py")),
    "adapters": _target(*ADAPTERS),
    "content": _target("ctxeng/content/*"),
    "services": _target("manifests/services.py"),
    "selectors": _target("manifests/selectors.py"),
    # Tenants, roles and tokens: every API request reads them (`roles_in`, `tenant_for_role`).
    "accounts": _target("ctxeng/accounts/services.py", "ctxeng/accounts/selectors.py"),
    # The DRF views' logic lives in undecorated module-level functions (mutmut skips decorated
    # methods, and every view method carries `@extend_schema`).
    "api": _target("manifests/api.py", "policies/api.py"),
    "policies": _target("policies/services.py", "policies/selectors.py"),
    # The dashboard's selectors: the run, inspector and compare pages' reads, and the policy pages'.
    "dashboard": _target("manifests/dashboard_selectors.py", "policies/dashboard_selectors.py"),
    # The pages: Django's function views (decorated: rewritten in the workspace, see
    # tests/mutation/mutants.py), the template tags and what the pages format with.
    "views": _target(
        "manifests/views.py", "policies/views.py", "ctxeng/accounts/views.py", "ctxeng/accounts/pages.py",
        "ctxeng/server/views.py", "ctxeng/server/error_pages.py", "manifests/templatetags/*",
        "manifests/item_labels.py", "manifests/token_figures.py", "ctxeng/accounts/context_processors.py",
        "ctxeng/accounts/time_display.py", "ctxeng/accounts/usage.py",
    ),
    # The server's plumbing: REST helpers, middleware, throttles, rate limits, fair dispatch, the
    # token cache, settings, exports, the OpenAPI document, the Celery hooks.
    "server": _target("ctxeng/server/*", exclude=("ctxeng/server/views.py", "ctxeng/server/error_pages.py")),
    # What runs beside the requests: tasks, recovery, quotas, retention, exports, the worker's
    # startup checks, the management commands, the models' own methods, the audit trail.
    "jobs": _target(
        "manifests/tasks.py", "policies/tasks.py", "manifests/recovery.py", "manifests/quotas.py",
        "manifests/exports.py", "manifests/retention.py", "manifests/worker_startup.py",
        "manifests/content_holders.py", "manifests/assembly_records.py", "manifests/examples.py",
        "manifests/verification.py", "manifests/models.py", "manifests/apps.py", "manifests/management/*",
        "policies/models.py", "policies/assemblies.py", "policies/diffing.py", "policies/management/*",
        "ctxeng/accounts/models.py", "ctxeng/accounts/apps.py", "ctxeng/audit/*",
    ),
    # The typed client, the CLI, telemetry and the starters.
    "client": _target("ctxeng/client.py", "ctxeng/cli.py", "ctxeng/telemetry.py", "ctxeng/starters/*"),
}


def product_target() -> Target:
    """Every target's files at once: the workspace `.mutate/product/` judges a whole-product
    sample with one statistics run (every target has the same selection)."""
    files = sorted({f for name in TARGETS for f in mutated_files(name)})
    return replace(FAST, mutate=tuple(files), do_not_mutate=MIGRATIONS)


# The strata of the whole-product sample, in this order: every file of the product is in exactly
# one of them (tests/mutation/test_targets.py), and `templates` (tests/mutation/templates.py) is the
# templates' own target.
SAMPLED = ("engine", "sdk", "adapters", "services", "selectors", "dashboard", "api", "accounts", "policies",
           "content", "views", "server", "jobs", "client", "templates")
# Survivors judged equivalent by hand, one `key  name  why` a line, keyed by the mutant's diff
# (tests/mutation/mutants.py's diff_key): a report leaves them out of the score and lists them.
EQUIVALENTS = Path(__file__).resolve().parent / "equivalents.txt"
SAMPLES = Path(__file__).resolve().parent / "samples"
PRODUCT = "product"
# A whole-product sample large enough for a 95% interval of ±5 points at a score near 90%.
MARGIN, EXPECTED_SCORE = 0.05, 0.9


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
        # tests/mutation/xdist_stats.py: the statistics and clean runs over xdist workers.
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:randomly", "-p", "tests.mutation.xdist_stats"]',
        # Fork each mutant's test process from a server that only collected the tests, not from
        # mutmut's own process, which ran the suite for its statistics: a child forked from that
        # one inherited its event loop and waited on it for ever (no CPU, a "timeout" to mutmut).
        'process_isolation = "forkserver"',
        # ... and a server that imported nothing: one that collected the tests (mutmut's default
        # warmup) imported every test module before any mutant was active, so what a module
        # builds at import stayed the original in every child: `from ctxeng.sdk.langchain import
        # ContextMiddleware` built the middleware class (cached) from unmutated code, and its
        # mutants "survived" tests that kill them (seed 643005). Each child imports afresh.
        'forkserver_warmup = "none"',
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


def source_files() -> list[str]:
    """Every file of the product's packages (relative paths, name order), caches left out."""
    files = []
    for source in SOURCE_PATHS:
        files += [p.relative_to(ROOT).as_posix() for p in (ROOT / source).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts]
    return sorted(files)


def workspace_source(name: str, path: str) -> bytes:
    """A source file as the target's workspace holds it: a mutated module rewritten by `undecorate`."""
    data = (ROOT / path).read_bytes()
    if path in mutated_files(name):
        from tests.mutation.mutants import undecorate

        return undecorate(data.decode()).encode()
    return data


def prepare(name: str, smoke_tests: tuple[str, ...] = ()) -> Path:
    """The target's workspace; with `smoke_tests`, a separate one (`<target>-smoke`) whose
    selection is those tests only: a quick check that the target generates, reaches and judges,
    whose statistics must not be mistaken for the target's."""
    target = product_target() if name == PRODUCT else TARGETS[name]
    ws = workspace(name)
    if smoke_tests:
        target, ws = replace(target, tests=smoke_tests, ignore=()), workspace(f"{name}-smoke")
    ws.mkdir(parents=True, exist_ok=True)
    sources = {p.rstrip("/") for p in SOURCE_PATHS}
    for entry in linked_entries():
        link = ws / entry.rstrip("/")
        if entry.rstrip("/") in sources:
            if link.is_symlink():
                link.unlink()  # a workspace from before 2026-12-07 linked the sources
            continue
        if link.is_symlink() and link.readlink() != ROOT / entry.rstrip("/"):
            link.unlink()  # a workspace copied from another checkout: link this one
        if not link.is_symlink():
            link.symlink_to(ROOT / entry.rstrip("/"))
    # The tests find the shared folder beside the repository (`Path(__file__).parents[3] / "shared"`:
    # the traces, the worked examples); mutmut runs them from `<workspace>/mutants/`.
    shared = ROOT.parent / "shared"
    if shared.is_dir() and not (ws / "shared").is_symlink():
        (ws / "shared").symlink_to(shared)
    # The sources are a copy, the mutated modules rewritten (tests/mutation/mutants.py); a file is
    # written only when its text changed, so mutmut's cache (by modification time) stays valid.
    wanted = set(source_files())
    for path in wanted:
        data, copy = workspace_source(name, path), ws / path
        if not copy.exists() or copy.read_bytes() != data:
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(data)
    for source in sources:
        for copy in (ws / source).rglob("*"):
            if copy.is_file() and "__pycache__" not in copy.parts and copy.relative_to(ws).as_posix() not in wanted:
                copy.unlink()
    pyproject = project_pyproject_without_mutmut() + "\n" + mutmut_section(target)
    path = ws / "pyproject.toml"
    if not path.exists() or path.read_text() != pyproject:
        path.write_text(pyproject)
    return ws


def mutated_files(name: str) -> list[str]:
    """The target's source files mutmut mutates (relative paths, in name order)."""
    if name == PRODUCT:
        return list(product_target().mutate)
    target = TARGETS[name]
    files = []
    for source in SOURCE_PATHS:
        files += [p.relative_to(ROOT).as_posix() for p in (ROOT / source).rglob("*.py")]
    return sorted(
        f for f in files
        if any(fnmatch.fnmatch(f, pattern) for pattern in target.mutate)
        and not any(fnmatch.fnmatch(f, pattern) for pattern in target.do_not_mutate)
    )


def generated(name: str) -> dict[str, tuple[list[str], Path]]:
    """Each mutated file's mutants, generated here with mutmut's generator and cached per file by
    its text in `.mutate/<target>/generated/` (names; the mutated module and mutmut's index of its
    functions' lines), so a sample can be drawn before mutmut ran in the workspace: path -> (names
    sorted, the cache's stem)."""
    import hashlib

    from tests.mutation import mutants

    ws = prepare(name)
    cache = ws / "generated"
    found: dict[str, tuple[list[str], Path]] = {}
    with mutants.in_workspace(ws):
        for path in mutated_files(name):
            stem = cache / (path.replace("/", ".") + "." + hashlib.sha256((ws / path).read_bytes()).hexdigest()[:16])
            names_file = stem.with_name(stem.name + ".names")
            if not names_file.exists() or not stem.with_name(stem.name + ".spans.json").exists():
                names, code, spans = mutants.generate(ws, path)
                cache.mkdir(parents=True, exist_ok=True)
                for old in cache.glob(path.replace("/", ".") + ".*"):
                    old.unlink()
                stem.with_name(stem.name + ".py.txt").write_text(code)
                stem.with_name(stem.name + ".spans.json").write_text(json.dumps(spans))
                names_file.write_text("".join(n + "\n" for n in sorted(names)))
            found[path] = (names_file.read_text().split(), stem)
    return found


def population(name: str) -> list[str]:
    """Every mutant of the target, in a fixed order: files in name order, each file's names sorted."""
    if name == "templates":
        from tests.mutation import templates

        return list(templates.generate())
    return [n for names, _stem in generated(name).values() for n in names]


def diffs(name: str, names: list[str] | None = None) -> dict[str, str]:
    """The unified diff of each named mutant of the target (all of them by default)."""
    if name == "templates":
        from tests.mutation import templates

        every = templates.diffs()
        return every if names is None else {n: every[n] for n in names if n in every}
    from tests.mutation import mutants

    wanted = None if names is None else set(names)
    out: dict[str, str] = {}
    for path, (file_names, stem) in generated(name).items():
        chosen = file_names if wanted is None else [n for n in file_names if n in wanted]
        if chosen:
            code = stem.with_name(stem.name + ".py.txt").read_text()
            spans = json.loads(stem.with_name(stem.name + ".spans.json").read_text())
            out.update(mutants.diffs(path, code, spans, chosen))
    return out


def equivalents() -> dict[str, tuple[str, str]]:
    """The survivors judged equivalent (tests/mutation/equivalents.txt): diff key -> (name when judged, why)."""
    found = {}
    for line in EQUIVALENTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, name, why = line.strip().split(None, 2)
            found[key] = (name, why.strip())
    return found


def stale_equivalents(names: list[str]) -> list[str]:
    """The equivalents of the targets named whose diff is no longer among the mutants of the
    function it was found in: the code changed, so each must be judged again (or its line removed)."""
    stale = []
    for key, (name, _why) in equivalents().items():
        owners = [t for t in names if name.split(".x", 1)[0] in modules_of(t)
                  or (t == "templates" and name.startswith("templates."))]
        if not owners:
            continue
        if name.startswith("templates."):
            candidates = diffs("templates")
        else:
            function = name.rpartition("__mutmut_")[0]
            candidates = diffs(owners[0], [n for n in population(owners[0]) if n.rpartition("__mutmut_")[0] == function])
        if key not in {mutants_key(d) for d in candidates.values()}:
            stale.append(f"{key}  {name}")
    return stale


def modules_of(name: str) -> set[str]:
    if name == "templates":
        return {"templates"}
    return {f.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for f in mutated_files(name)}


def sample_path(name: str, seed: int, size: int) -> Path:
    return workspace(name) / f"sample-{seed}-{size}.txt"


def mutmut(ws: Path, *args: str, stdout=None, workers: int = 1) -> int:
    """mutmut in the workspace `ws`; its statistics and clean runs over `workers` xdist workers
    (tests/mutation/xdist_stats.py). A failing test of those runs is named in `ws/failures.txt`,
    printed here when mutmut stops on it (mutmut itself says only "failed to collect stats")."""
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # SQLite: PostgreSQL test database names collide between checkouts
    failures = ws / "failures.txt"
    failures.unlink(missing_ok=True)
    env.update({xdist_stats.WORKERS: str(workers), xdist_stats.FAILURES: str(failures)})
    command = [str(Path(sys.executable).parent / "mutmut"), *args]
    code = subprocess.call(command, cwd=ws, env=env, stdout=stdout, stderr=subprocess.STDOUT if stdout else None)
    if code != 0 and failures.exists():
        print(f"mutmut stopped ({code}); failed in its statistics or clean run:\n{failures.read_text()[-6000:]}")
    return code


def run(name: str, *, children: int, sample: int | None, seed: int | None, names: list[str],
        smoke_tests: tuple[str, ...] = ()) -> int:
    if name == "templates":
        from tests.mutation import templates

        if sample is not None:
            seed = new_seed() if seed is None else seed
            names = draw(population(name), sample, seed, name)
            sample_path(name, seed, sample).parent.mkdir(parents=True, exist_ok=True)
            sample_path(name, seed, sample).write_text("\n".join(names) + "\n")
        return templates.judge(names or population(name), workers=children)
    ws = prepare(name, smoke_tests)
    if sample is not None:
        if seed is None:
            seed = new_seed()
        pool = population(name)
        if not pool:
            print(f"{name}: no mutants generated")
            return 1
        names = draw(pool, sample, seed, name)
        sample_path(name, seed, sample).write_text("\n".join(names) + "\n")
        print(f"{name}: {len(pool)} mutants, judging a sample of {len(names)} (seed {seed})")
    start = time.monotonic()
    code = mutmut(ws, "run", "--max-children", str(children), *names, workers=children)
    elapsed = time.monotonic() - start
    if names:
        print(f"{name}: judged {len(names)} mutants in {elapsed:.0f} s ({elapsed / len(names):.1f} s a mutant, "
              "the target's test statistics included on a first run)")
    elif code == 0:
        mutmut(ws, "export-cicd-stats")
        from tests.mutation.score import main as score

        os.chdir(ROOT)
        return score([name])
    return code


def draw(pool: list[str], size: int, seed: int, stratum: str) -> list[str]:
    """A uniform random sample of `size` of the pool, the same for the same seed and stratum."""
    import random

    return random.Random(f"{seed}:{stratum}").sample(pool, min(size, len(pool)))


def verdicts(name: str) -> dict[str, str]:
    """What the last runs judged each mutant of the target: killed, survived, not reached, not judged.

    A mutant no test of the selection reaches cannot be noticed by the suite: it is a survivor
    ("not reached", counted with the survivors since 2026-12-07)."""
    if name == "templates":
        from tests.mutation import templates

        return templates.verdicts()
    from mutmut.stats import status_by_exit_code

    codes: dict[str, int | None] = {}
    for meta in (workspace(name) / "mutants").rglob("*.py.meta"):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    out = {}
    for n, code in codes.items():
        status = status_by_exit_code[code]
        out[n] = {"killed": "killed", "timeout": "killed", "survived": "survived", "no tests": "not reached",
                  "not checked": "not judged"}.get(status, status)
    return out


def tally(names: list[str], verdict: dict[str, str], keys: dict[str, str]) -> dict[str, object]:
    """Counts of a list of mutants: killed, survived (not reached included), equivalent, not judged."""
    known = equivalents()
    by = {n: verdict.get(n, "not judged") for n in names}
    equivalent = sorted(n for n, v in by.items() if v in ("survived", "not reached") and keys.get(n) in known)
    killed = sum(1 for v in by.values() if v == "killed")
    survivors = sorted(n for n, v in by.items() if v in ("survived", "not reached") and n not in equivalent)
    unreached = sum(1 for n in survivors if by[n] == "not reached")
    other = len(names) - killed - len(survivors) - len(equivalent)
    return {"killed": killed, "survived": len(survivors), "not_reached": unreached, "equivalent": equivalent,
            "other": other, "survivors": survivors, "by": by}


def report(name: str, sample: int | None, seed: int | None) -> dict[str, object]:
    """Print (and return) the sample's counts: killed, survived (not reached included), equivalent, other."""
    from tests.mutation.sample import wilson

    pool = population(name)
    names = pool if sample is None else sample_path(name, seed, sample).read_text().split()
    verdict = verdicts(name)
    # Only a survivor can be an equivalent: diff those alone.
    keyed = diffs(name, [n for n in names if verdict.get(n) in ("survived", "not reached")])
    keys = {n: mutants_key(keyed.get(n, "")) for n in names}
    t = tally(names, verdict, keys)
    judged = t["killed"] + t["survived"]
    lo, hi = wilson(t["killed"], judged)
    score = 100 * t["killed"] / judged if judged else None
    print(f"{name}: {len(pool)} mutants, {len(names)} looked at: killed {t['killed']}, survived {t['survived']} "
          f"({t['not_reached']} reached by no test), equivalent {len(t['equivalent'])}, not judged {t['other']}; "
          + (f"{score:.1f}% killed excl. equivalents (95% {100 * lo:.1f}-{100 * hi:.1f}%)" if judged else "none judged"))
    if names and not judged and not t["equivalent"]:
        print(f"  nothing judged: see the run's output above ({workspace(name)})")
    known = equivalents()
    for n in t["equivalent"]:
        print(f"  equivalent: {n}  ({known[keys[n]][1]})")
    for n in sorted(n for n, v in t["by"].items() if v != "killed" and n not in t["equivalent"]):
        print(f"  {t['by'][n]}: {n}")
    return {
        "target": name, "mutants": len(pool), "sampled": len(names), "killed": t["killed"],
        "survived": t["survived"], "not_reached": t["not_reached"], "equivalent": t["equivalent"],
        "other": t["other"], "score": None if score is None else round(score, 1),
        "interval": [round(100 * lo, 1), round(100 * hi, 1)], "survivors": t["survivors"],
    }


def mutants_key(diff: str) -> str:
    from tests.mutation.mutants import diff_key

    return diff_key(diff) if diff else ""


def new_seed() -> int:
    """A seed nobody has written tests against: drawn afresh each time (printed and recorded)."""
    return secrets.randbelow(1_000_000)


def sample_size(margin: float = MARGIN, p: float = EXPECTED_SCORE, z: float = 1.96) -> int:
    """Mutants needed for a 95% interval of ±`margin` on a share near `p` (normal approximation)."""
    import math

    return math.ceil(z * z * p * (1 - p) / (margin * margin))


def allocate(sizes: dict[str, int], total: int) -> dict[str, int]:
    """`total` draws shared among the strata in proportion to their mutant counts (largest
    remainders), so the whole-product figure is one estimate; a stratum gets at least one."""
    population_size = sum(sizes.values())
    exact = {t: total * n / population_size for t, n in sizes.items()}
    share = {t: max(1, int(x)) for t, x in exact.items()}
    for t in sorted(exact, key=lambda t: exact[t] - int(exact[t]), reverse=True):
        if sum(share.values()) >= total:
            break
        share[t] += 1
    return {t: min(share[t], sizes[t]) for t in sizes}


def evidence_dir(seed: int) -> Path:
    return SAMPLES / f"seed-{seed}"


def write_evidence(seed: int, name: str, names: list[str], keyed: dict[str, str], pool: int,
                   verdict: dict[str, str]) -> None:
    """One small text file per stratum: each drawn mutant's name, key, verdict and diff."""
    known = equivalents()
    blocks = []
    for n in names:
        key = mutants_key(keyed[n])
        v = verdict.get(n, "not judged")
        if key in known and v in ("survived", "not reached"):
            v = f"equivalent ({known[key][1]})"
        blocks.append(f"### {n}\nkey: {key}\nverdict: {v}\n{keyed[n]}\n")
    path = evidence_dir(seed) / f"{name}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# seed {seed}, stratum {name}: {len(names)} of {pool:,} mutants\n\n" + "\n".join(blocks))


def sample(names: list[str], *, size: int, seed: int | None, children: int, judge: bool = True) -> int:
    """`make mutate-sample`: one stratified sample over the targets named (by default the whole
    product), `size` mutants shared among them in proportion to their mutant counts; each drawn
    mutant's name, diff and verdict are written to tests/mutation/samples/seed-<seed>/, the seed
    and the scores appended to `.mutate/scores.jsonl`, and every equivalent is checked against the
    diffs that exist now (a missing one is reported stale)."""
    from tests.mutation.sample import wilson

    seed = new_seed() if seed is None else seed
    print(f"mutation sample: seed {seed}, {size} mutants over {', '.join(names)}", flush=True)
    started = time.time()
    pools = {name: population(name) for name in names}
    stale = stale_equivalents(names)
    for line in stale:
        print(f"  stale equivalent (its diff exists no more; judge again): {line}")
    shares = allocate({name: len(pools[name]) for name in names}, size)
    drawn = {name: draw(pools[name], shares[name], seed, name) for name in names}
    keyed = {name: diffs(name, drawn[name]) for name in names}
    for name in names:
        write_evidence(seed, name, drawn[name], keyed[name], len(pools[name]), {})
    # Every mutmut stratum is judged in one workspace, `.mutate/product/`: one statistics run of the
    # selection for all of them; the templates by their own runner.
    seconds, code = {}, 0
    python_names = [n for name in names if name != "templates" for n in drawn[name]]
    if judge and python_names:
        start = time.monotonic()
        code = mutmut(prepare(PRODUCT), "run", "--max-children", str(children), *python_names, workers=children)
        seconds[PRODUCT] = round(time.monotonic() - start)
    if judge and drawn.get("templates"):
        from tests.mutation import templates

        start = time.monotonic()
        code = max(code, templates.judge(drawn["templates"], workers=children))
        seconds["templates"] = round(time.monotonic() - start)
    rows = []
    for name in names:
        verdict = verdicts("templates" if name == "templates" else PRODUCT)
        t = tally(drawn[name], verdict, {n: mutants_key(keyed[name][n]) for n in drawn[name]})
        write_evidence(seed, name, drawn[name], keyed[name], len(pools[name]), verdict)
        judged = t["killed"] + t["survived"]
        lo, hi = wilson(t["killed"], judged)
        rows.append({
            "target": name, "mutants": len(pools[name]), "sampled": len(drawn[name]), "killed": t["killed"],
            "survived": t["survived"], "not_reached": t["not_reached"], "equivalent": t["equivalent"],
            "other": t["other"], "score": round(100 * t["killed"] / judged, 1) if judged else None,
            "interval": [round(100 * lo, 1), round(100 * hi, 1)], "survivors": t["survivors"], "exit": code,
        })
    estimate, half = stratified(rows)
    killed = sum(r["killed"] for r in rows)
    judged = killed + sum(r["survived"] for r in rows)
    record = {
        "seed": seed, "size": size, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started), "judging_seconds": seconds, "commit": _commit(), "targets": rows,
        "stale_equivalents": stale,
        "killed": killed, "judged": judged, "score": round(100 * killed / judged, 1) if judged else None,
        "stratified": None if estimate is None else [round(100 * estimate, 1), round(100 * half, 1)],
    }
    WORKSPACES.mkdir(exist_ok=True)
    with (WORKSPACES / "scores.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")
    table = summary_table(record)
    (evidence_dir(seed) / "summary.md").write_text(table)
    print(table)
    return max((r["exit"] for r in rows), default=0)


def stratified(rows: list[dict]) -> tuple[float | None, float]:
    """The whole product's killed share, each stratum weighted by its mutant count, and the half
    width of its 95% interval (the strata's variances, each of its own sample)."""
    import math

    judged_rows = [r for r in rows if r["killed"] + r["survived"]]
    total = sum(r["mutants"] for r in judged_rows)
    if not total:
        return None, 0.0
    estimate, variance = 0.0, 0.0
    for r in judged_rows:
        n = r["killed"] + r["survived"]
        p, w = r["killed"] / n, r["mutants"] / total
        estimate += w * p
        variance += w * w * p * (1 - p) / n
    return estimate, 1.96 * math.sqrt(variance)


def summary_table(record: dict) -> str:
    lines = [
        f"mutation sample, seed {record['seed']}, drawn {record['started']} at commit {record['commit']}, "
        f"{record['size']} mutants over {len(record['targets'])} strata (recorded in .mutate/scores.jsonl)",
        "",
        "| target | mutants | sampled | killed | survived (not reached) | equivalent | not judged | score excl. equivalents | 95% interval |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in record["targets"]:
        score = "-" if r["score"] is None else f"{r['score']}% ({r['killed']}/{r['killed'] + r['survived']})"
        interval = "-" if r["score"] is None else f"{r['interval'][0]}-{r['interval'][1]}%"
        lines.append(f"| `{r['target']}` | {r['mutants']:,} | {r['sampled']} | {r['killed']} | {r['survived']} "
                     f"({r['not_reached']}) | {len(r['equivalent'])} | {r['other']} | {score} | {interval} |")
    if record["stratified"]:
        lines.append("")
        lines.append(f"whole product, seed {record['seed']}: {record['stratified'][0]}% ± {record['stratified'][1]} "
                     f"(stratified; pooled {record['score']}%, {record['killed']}/{record['judged']})")
    if record["judging_seconds"]:
        lines.append(f"judging took {record['judging_seconds']} s (mutmut's strata together, their statistics "
                     "run included; the templates by their runner)")
    else:
        lines.append("drawn only (--draw-only): nothing judged")
    for line in record["stale_equivalents"]:
        lines.append(f"stale equivalent: {line}")
    return "\n".join(lines) + "\n"


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str]) -> int:
    choices = sorted([*TARGETS, "templates"])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    r = sub.add_parser("run")
    r.add_argument("target", choices=choices)
    r.add_argument("names", nargs="*", help="mutant names or globs (mutmut's); default: all")
    r.add_argument("--max-children", type=int, default=1)
    r.add_argument("--sample", type=int)
    r.add_argument("--seed", type=int, help="with --sample; default: a fresh one, printed")
    r.add_argument("--smoke-test", action="append", default=[], metavar="PATH", dest="smoke_tests",
                   help="judge with this test path only (repeatable), in the workspace <target>-smoke")
    s = sub.add_parser("report")
    s.add_argument("target", choices=choices)
    s.add_argument("--sample", type=int)
    s.add_argument("--seed", type=int, help="the seed of the sample (required with --sample)")
    m = sub.add_parser("sample", help="judge one freshly seeded sample over the targets and record it")
    m.add_argument("targets", nargs="*", metavar="TARGET", help=f"default: the whole product ({', '.join(SAMPLED)})")
    m.add_argument("--size", type=int, default=None, help=f"default: {sample_size()} (±5 points at 90%%)")
    m.add_argument("--seed", type=int, help="default: a fresh one, printed")
    m.add_argument("--max-children", type=int, default=1)
    m.add_argument("--draw-only", action="store_true", help="write the drawn names and diffs, judge nothing")
    args = p.parse_args(argv)
    if args.cmd == "list":
        for name, target in TARGETS.items():
            print(f"{name}: {' '.join(target.mutate)} <- {' '.join(target.selection())}")
        print("templates: templates/**/*.html <- the tests that render each template (tests/mutation/templates.py)")
        return 0
    if args.cmd == "run":
        return run(args.target, children=args.max_children, sample=args.sample, seed=args.seed, names=args.names,
                   smoke_tests=tuple(args.smoke_tests))
    if args.cmd == "sample":
        unknown = [t for t in args.targets if t not in choices]
        if unknown:
            p.error(f"unknown targets {unknown}; choose from {choices}")
        return sample(args.targets or list(SAMPLED), size=args.size or sample_size(), seed=args.seed,
                      children=args.max_children, judge=not args.draw_only)
    if args.sample is not None and args.seed is None:
        p.error("report --sample needs the sample's --seed")
    report(args.target, args.sample, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
