"""No test asserts how long something took (issue 28): this machine is shared and its speed moves
2-3x between runs, so a timed assertion is a flaky test. Timing belongs in `bench/`.

The check is an AST scan of every module under tests/. It flags an `assert` (or a unittest
`assertLess`/`assertGreater`... call) that compares a *duration*:

- a difference with a clock reading on either side (`time.monotonic() - started`, `end - start`
  where `end`/`start` were assigned from `time.monotonic()`, `time.perf_counter()`, `time.time()`,
  `time.process_time()`, their `_ns` forms or `timeit.default_timer()`);
- a name assigned from such a difference (`took = time.perf_counter() - t0`);
- a name or attribute called `elapsed`, `duration` or `took` (with any `_suffix`).

A wait with a deadline is not a duration: `assert time.monotonic() < deadline, "no heartbeat"`
compares a clock reading with a point in time and raises a clear error when a wait never ends,
so it is allowed, as is a `timeout=` on a call.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"monotonic", "perf_counter", "time", "process_time", "monotonic_ns", "perf_counter_ns", "time_ns",
          "process_time_ns", "default_timer"}
DURATION_NAME = re.compile(r"^(elapsed|duration|took)(_\w+)?$")
UNITTEST_COMPARES = {"assertLess", "assertLessEqual", "assertGreater", "assertGreaterEqual", "assertAlmostEqual"}


def _is_clock(node: ast.AST, clocks: set[str]) -> bool:
    if isinstance(node, ast.Call):
        f = node.func
        return (isinstance(f, ast.Attribute) and f.attr in CLOCKS and isinstance(f.value, ast.Name)
                and f.value.id in ("time", "timeit")) or (isinstance(f, ast.Name) and f.id in CLOCKS - {"time"})
    return isinstance(node, ast.Name) and node.id in clocks


def _is_duration(node: ast.AST, clocks: set[str], durations: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub) and (
                _is_clock(sub.left, clocks) or _is_clock(sub.right, clocks)):
            return True
        if isinstance(sub, ast.Name) and (sub.id in durations or DURATION_NAME.match(sub.id)):
            return True
        if isinstance(sub, ast.Attribute) and DURATION_NAME.match(sub.attr):
            return True
    return False


def _scopes(tree: ast.Module):
    yield tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def timed_assertions(source: str, filename: str = "<test>") -> list[str]:
    """`file:line` of every assertion on a duration in `source`."""
    tree = ast.parse(source, filename)
    found: set[str] = set()
    for scope in _scopes(tree):
        clocks: set[str] = set()
        durations: set[str] = set()
        assigns = [n for n in ast.walk(scope) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
        for _ in range(3):  # names assigned from names assigned from clocks ...
            for a in assigns:
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                if _is_clock(a.value, clocks):
                    clocks |= names
                elif _is_duration(a.value, clocks, durations):
                    durations |= names
        for node in ast.walk(scope):
            if isinstance(node, ast.Assert):
                compares = [c for c in ast.walk(node.test) if isinstance(c, ast.Compare)]
                if any(_is_duration(side, clocks, durations) for c in compares for side in [c.left, *c.comparators]):
                    found.add(f"{filename}:{node.lineno}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in UNITTEST_COMPARES
                  and any(_is_duration(arg, clocks, durations) for arg in node.args)):
                found.add(f"{filename}:{node.lineno}")
    return sorted(found)


PLANTED = '''
import time

def test_fast():
    started = time.monotonic()
    work()
    assert time.monotonic() - started < 60

def test_took():
    t0 = time.perf_counter()
    work()
    took = time.perf_counter() - t0
    assert took < 1.5, took

def test_elapsed_attribute(result):
    assert result.elapsed_s <= 2

def test_unittest_style(self):
    start = time.time()
    end = time.time()
    self.assertLess(end - start, 5)
'''

ALLOWED = '''
import time

def test_waits_on_an_event_with_a_deadline():
    deadline = time.monotonic() + 60
    while not ready():
        assert time.monotonic() < deadline, "never became ready"

def test_bad_duration_argument_is_refused():
    assert parse("--older-than 5x") == "expected a duration"

def test_subprocess_has_a_timeout():
    assert run(timeout=120).returncode == 0
'''


def test_the_check_catches_each_planted_timed_assertion():
    assert_lines = [n for n, line in enumerate(PLANTED.splitlines(), start=1) if "assert" in line]
    assert len(assert_lines) == 4
    assert sorted(timed_assertions(PLANTED)) == sorted(f"<test>:{n}" for n in assert_lines)


def test_the_check_lets_deadlines_and_timeouts_pass():
    assert timed_assertions(ALLOWED) == []


def test_no_test_asserts_an_elapsed_time():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        found += timed_assertions(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS.parent)))
    assert found == [], "assertions on elapsed time (flaky on a shared machine; measure in bench/): " + ", ".join(found)
