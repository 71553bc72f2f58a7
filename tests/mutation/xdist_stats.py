"""pytest plugin: mutmut's statistics run and clean run over pytest-xdist workers (issue 54).

mutmut 3 runs the whole selection twice before it judges a mutant, each time in one process: the
**statistics** run (`MUTANT_UNDER_TEST=stats`: every call of a mutated function is recorded, and
each test's list of functions becomes the tests a mutant of that function is judged by) and the
**clean** run (`MUTANT_UNDER_TEST=""`: the tests the sample needs, no mutant active, must pass).
Over the whole product that is every in-process test twice under mutmut's trampolines: about an
hour each on this 2-core machine, most of a sample's time. With `CTXENG_MUTATE_WORKERS=N` (N > 1;
`tests/mutation/targets.py` sets it to `--max-children`), this plugin runs those two over N xdist
workers; a mutant's own run, the forced-fail run and the collection stay in one process, as mutmut
runs them.

What mutmut records in its own process (its `StatsCollector` hooks run where the test runs) is
recorded here in each worker and sent to the main process with the test's reports:

- each test's teardown report carries the mutated functions the test called (setup, call and
  teardown), and the main process adds the test to each function's list
  (`state().tests_by_mangled_function_name`, as mutmut's collector does);
- each call report's duration becomes the test's `duration_by_test` (mutmut's time limit for a
  mutant is computed from it);
- each worker's caller graph (`function_dependencies`) goes back in its `workeroutput` and is
  merged when the worker ends.

Before each test of the statistics run (in one process or in a worker), every per-process cache of
the product is emptied (`forget_product_caches`): the memos of `ctxeng.engine.memo` and every
`functools.cache`/`lru_cache` function of a `ctxeng` module. A cached function runs only for the
first test that asks for its value in a process, so without this only that test was recorded as
calling it (and its callees), and a mutant of it was judged by that one test alone: a survivor the
suite kills (`ctxeng.sdk.langchain._middleware_class`, seed 403688). The mutant's own run needs no
such step: its process starts with empty caches, and its tests are every test recorded.

A failing test ends the run (`-x`, as mutmut asks) and mutmut prints only "failed to collect
stats"; its node id and traceback are also appended to `CTXENG_MUTATE_FAILURES` (a file) when set.
"""

from __future__ import annotations

import os

import pytest

WORKERS = "CTXENG_MUTATE_WORKERS"
FAILURES = "CTXENG_MUTATE_FAILURES"
HITS = "mutmut_functions_called"
DEPENDENCIES = "mutmut_function_dependencies"


def _mode() -> str | None:
    return os.environ.get("MUTANT_UNDER_TEST")


def _in_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ  # set by xdist in each worker before its config is made


def _workers() -> int:
    try:
        return int(os.environ.get(WORKERS, "0"))
    except ValueError:
        return 0


@pytest.hookimpl(hookwrapper=True)
def pytest_cmdline_main(config: pytest.Config):
    """Before xdist reads `-n` (its own hook is `tryfirst`, so only a wrapper comes before it): the
    statistics and clean runs over the workers, nothing else."""
    if (not _in_worker() and not config.option.collectonly and _workers() > 1 and _mode() in ("stats", "")
            and config.pluginmanager.hasplugin("xdist")):
        config.option.numprocesses = _workers()
        config.option.dist = "worksteal"
    yield


def forget_product_caches() -> int:
    """Empty the product's per-process caches (the memos and the functools caches of every imported
    `ctxeng` module); returns how many functools caches were emptied."""
    import sys

    memo = sys.modules.get("ctxeng.engine.memo")
    if memo is not None:
        memo.clear_all()
    emptied = 0
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "ctxeng" or name.startswith("ctxeng.")):
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if callable(clear) and getattr(value, "__module__", None) == name:
                clear()
                emptied += 1
    return emptied


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures: under the statistics run, no cache the product filled for an
    earlier test (see the module's docstring)."""
    if _mode() == "stats":
        forget_product_caches()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if call.when != "teardown" or not _in_worker() or _mode() != "stats":
        return
    from mutmut.state import state

    outcome.get_result().user_properties.append((HITS, sorted(state()._stats)))
    state()._stats.clear()


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if _in_worker() and _mode() == "stats":
        from mutmut.state import state

        config.workeroutput[DEPENDENCIES] = {k: sorted(v) for k, v in state().function_dependencies.items()}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In the main process: a failure of the statistics or clean run, named; in the main process of
    a parallel statistics run, what each worker's test recorded."""
    if _in_worker():
        return
    if report.failed and _mode() in ("stats", "") and os.environ.get(FAILURES):
        with open(os.environ[FAILURES], "a") as f:
            f.write(f"{report.nodeid} ({report.when}, MUTANT_UNDER_TEST={_mode()!r})\n{report.longreprtext}\n\n")
    if _mode() != "stats" or getattr(report, "node", None) is None:  # `node`: the report came from a worker
        return
    from mutmut.state import state

    if report.when == "call":
        state().duration_by_test[report.nodeid] = report.duration
    for key, functions in report.user_properties:
        if key == HITS:
            for function in functions:
                state().tests_by_mangled_function_name[function].add(report.nodeid.removeprefix("mutants/"))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    if _mode() != "stats":
        return
    from mutmut.state import state

    for function, callers in getattr(node, "workeroutput", {}).get(DEPENDENCIES, {}).items():
        state().function_dependencies[function].update(callers)
