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
    # Imported here: xml.sax pulls in urllib.request, http.client and ssl, which `import
    # ctxeng.engine` would pay for at every process start (issue 48); only a JUnit log needs it.
    from xml.sax.saxutils import quoteattr

    needles: list[str] = []
    for case in root.iter("testcase"):
        for child in case:
            if child.tag in ("failure", "error"):
                needles.append(f"name={quoteattr(case.get('name', ''))}")
                if child.get("message"):
                    needles.append(quoteattr(child.get("message", ""))[1:-1])
                break
    return Failures("junit_xml", tuple(needles))


# Each reader scans the whole text with line-anchored patterns (one pass in C, not a Python loop
# over thousands of lines) and returns the whole lines that report a failure. A log is untrusted
# text of any size, so every pattern runs in time linear in it: indentation is `[^\S\n]*` (never
# `\s*`, which crosses newlines and rescans a run of blank lines from each of its line starts), and
# no pattern can try a line's characters more than a bounded number of times from one line start
# (tests/engine/test_linear_time.py; the old forms took 50 s on 80 KB of `:`).

_TAP_PLAN = re.compile(r"^[^\S\n]*(TAP version \d+|1\.\.\d+)[^\S\n]*$", re.M)
_TAP_RESULT = re.compile(r"^[^\S\n]*(not )?ok\b", re.M)
_TAP_NOT_OK = re.compile(r"^[ \t]*not ok\b[^\n]*", re.M)


def _tap(text: str) -> Failures | None:
    if "ok" not in text or not ("1.." in text or "TAP version" in text):
        return None  # cheap literal test first: most logs are not TAP
    if not (_TAP_PLAN.search(text) and _TAP_RESULT.search(text)):
        return None
    return Failures("tap", tuple(m.group(0) for m in _TAP_NOT_OK.finditer(text) if "# todo" not in m.group(0).lower()))


_GO_SEEN = re.compile(r"^(=== RUN|--- PASS|--- FAIL|ok  \t|FAIL\t)", re.M)
_GO_FAIL = re.compile(r"^(?:[ \t]*--- FAIL:|FAIL\t|panic:)[^\n]*", re.M)


def _go(text: str) -> Failures | None:
    if not any(marker in text for marker in ("=== RUN", "--- PASS", "--- FAIL", "ok  \t", "FAIL\t")):
        return None
    if not _GO_SEEN.search(text):
        return None
    return Failures("go_test", tuple(m.group(0) for m in _GO_FAIL.finditer(text)))


_JEST_SUITE = re.compile(r"^(?:PASS|FAIL) [^\n]*(?:\.test\.|\.spec\.|__tests__)", re.M)
_JEST_MARK = re.compile(r"^[ \t]*[✓√✕×✗]", re.M)
_JEST_FAIL = re.compile(r"^(?:[ \t]*[✕×✗]|[ \t]*● |FAIL )[^\n]*", re.M)


def _jest(text: str) -> Failures | None:
    suite = any(ext in text for ext in (".test.", ".spec.", "__tests__")) and _JEST_SUITE.search(text)
    marks = any(mark in text for mark in "✓√✕×✗") and _JEST_MARK.search(text)
    if not (suite or marks or "Tests:" in text and " failed" in text):
        return None
    return Failures("jest", tuple(m.group(0) for m in _JEST_FAIL.finditer(text)))


_OUTCOME = r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)"
# `OUTCOME path::test` (verbose) or `path::test OUTCOME` (short summary). The second form's first
# word is one run of non-blanks holding `::`: the lookahead (atomic) finds the `::` once, where
# `\S*::\S*[ \t]+` retried every split of a long run around each `::` in it (quadratic).
_PYTEST_LINE = re.compile(rf"^[ \t]*(?:{_OUTCOME}[ \t]+\S*::|(?=\S*::)\S+[ \t]+{_OUTCOME}(?=\s|$))[^\n]*", re.M)


def _pytest(text: str) -> Failures | None:
    needles = []
    recognised = "test session starts" in text
    for m in _PYTEST_LINE.finditer(text):
        recognised = True
        if (m.group(1) or m.group(2)) in ("FAILED", "ERROR"):
            needles.append(m.group(0))
    return Failures("pytest", tuple(needles)) if recognised else None


_STATUS_SEEN = re.compile(r"^[ \t]*(?:PASSED|PASS|OK|FAILED|FAIL|ERROR|SKIPPED|SKIP):?(?=\s|$)", re.M)
_STATUS_FAIL = re.compile(r"^[ \t]*(?:FAILED|FAIL|ERROR):?(?=\s|$)[^\n]*", re.M)


def _status_lines(text: str) -> Failures | None:
    """Runners that print one `STATUS name` line per test (the first word is the outcome)."""
    if not _STATUS_SEEN.search(text):
        return None
    return Failures("status_lines", tuple(m.group(0) for m in _STATUS_FAIL.finditer(text)))


def read_failures(text: str) -> Failures:
    junit = _junit(text)
    if junit is not None:
        return junit
    for reader in (_tap, _go, _jest, _pytest, _status_lines):
        found = reader(text)
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
