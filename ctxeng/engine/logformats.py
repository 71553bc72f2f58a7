"""Failure records of a test log, read by the log's own format: the oracle for `failure_lines_kept`.

Contract: `read_failures(text)` recognises a test log's format and returns the failures it reports,
each as the *needles* a reduction must keep verbatim. It is written apart from the reducer in
`source_limits` and shares no code or pattern with it, so a reducer that drops a failure line is
caught here instead of grading itself. Formats, tried in this order:

- `junit_xml` — every `<testcase>` holding a `<failure>` or `<error>`: its `name` attribute and,
  when present, its failure `message` attribute;
- `tap` — `not ok N ...` lines, except `# TODO` (an expected failure TAP does not count);
- `go_test` — `--- FAIL: TestName` lines, `FAIL<tab>package` lines and `panic:` lines;
- `jest` — `✕ test name` lines (also the `×` and `✗` marks of other reporters), `● Suite › test`
  failure headings and `FAIL path` suite lines;
- `pytest` — `FAILED`/`ERROR` `path::test` lines of the short summary and of verbose runs;
- `status_lines` — runners printing one `STATUS name` line per test: lines whose first word is
  `FAILED`, `FAIL` or `ERROR`.

A log none of these recognise has format `None`: nothing can be counted, so no reduction of it can
be checked.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from xml.sax.saxutils import quoteattr
from dataclasses import dataclass


@dataclass(frozen=True)
class Failures:
    format: str | None
    needles: tuple[str, ...]  # what a faithful reduction must contain, in input order

    @property
    def count(self) -> int:
        return len(self.needles)


def _junit(text: str) -> Failures | None:
    head = text.lstrip()[:2000]
    if not (head.startswith("<?xml") or head.startswith("<testsuite")) or "<testcase" not in text:
        return None
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError:
        return None
    needles: list[str] = []
    for case in root.iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error"):
                needles.append(f"name={quoteattr(case.get('name', ''))}")
                if child.get("message"):
                    needles.append(quoteattr(child.get("message", ""))[1:-1])
                break
    return Failures("junit_xml", tuple(needles))


_TAP_PLAN = re.compile(r"^\s*(TAP version \d+|1\.\.\d+)\s*$", re.M)
_TAP_RESULT = re.compile(r"^\s*(not )?ok\b", re.M)


def _tap(lines: list[str], text: str) -> Failures | None:
    if not (_TAP_PLAN.search(text) and _TAP_RESULT.search(text)):
        return None
    needles = [
        ln for ln in lines if ln.lstrip().startswith("not ok") and "# todo" not in ln.lower()
    ]
    return Failures("tap", tuple(needles))


def _go(lines: list[str], text: str) -> Failures | None:
    if not any(ln.startswith(("=== RUN", "--- PASS", "--- FAIL", "ok  \t", "FAIL\t")) for ln in lines):
        return None
    needles = [
        ln
        for ln in lines
        if ln.lstrip().startswith("--- FAIL:") or ln.startswith("FAIL\t") or ln.startswith("panic:")
    ]
    return Failures("go_test", tuple(needles))


_JEST_MARKS = ("✕", "×", "✗")


def _jest(lines: list[str], text: str) -> Failures | None:
    suite = any(
        (ln.startswith("PASS ") or ln.startswith("FAIL ")) and any(ext in ln for ext in (".test.", ".spec.", "__tests__"))
        for ln in lines
    )
    marks = any(ln.lstrip().startswith(("✓", "√", *_JEST_MARKS)) for ln in lines)
    if not (suite or marks or "Tests:" in text and " failed" in text):
        return None
    needles = [
        ln
        for ln in lines
        if ln.lstrip().startswith(_JEST_MARKS) or ln.lstrip().startswith("● ") or ln.startswith("FAIL ")
    ]
    return Failures("jest", tuple(needles))


_PYTEST_OUTCOMES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")


def _pytest(lines: list[str], text: str) -> Failures | None:
    needles = []
    recognised = "test session starts" in text
    for ln in lines:
        words = ln.split()
        if len(words) < 2:
            continue
        if words[0] in _PYTEST_OUTCOMES and "::" in words[1]:
            outcome = words[0]
        elif "::" in words[0] and words[1] in _PYTEST_OUTCOMES:
            outcome = words[1]
        else:
            continue
        recognised = True
        if outcome in ("FAILED", "ERROR"):
            needles.append(ln)
    return Failures("pytest", tuple(needles)) if recognised else None


_STATUS_WORDS = ("PASSED", "PASS", "OK", "FAILED", "FAIL", "ERROR", "SKIPPED", "SKIP")


def _status_lines(lines: list[str], text: str) -> Failures | None:
    """Runners that print one `STATUS name` line per test (the first word is the outcome)."""
    firsts = [ln.split(None, 1)[0].rstrip(":") if ln.split() else "" for ln in lines]
    if not any(w in _STATUS_WORDS for w in firsts):
        return None
    needles = [ln for ln, w in zip(lines, firsts, strict=True) if w in ("FAILED", "FAIL", "ERROR")]
    return Failures("status_lines", tuple(needles))


def read_failures(text: str) -> Failures:
    junit = _junit(text)
    if junit is not None:
        return junit
    lines = text.splitlines()
    for reader in (_tap, _go, _jest, _pytest, _status_lines):
        found = reader(lines, text)
        if found is not None:
            return found
    return Failures(None, ())


def all_kept_in_order(needles: tuple[str, ...], output: str) -> bool:
    """Every needle occurs in `output`, each after the previous one."""
    pos = 0
    for needle in needles:
        at = output.find(needle, pos)
        if at < 0:
            return False
        pos = at + len(needle)
    return True
