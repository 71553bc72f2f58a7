"""Untrusted text of any size is read in time linear in its size.

Every candidate's content is the agent's or a tool's text, and several readers run patterns over
it: the test-log oracle (`logformats`), the summary and decision-log checks (`transforms`), and
`render.split_block`, through which the content store packs every submitted request. Patterns of
the form `^\\s*...` (re.M), `\\S*::\\S*[ \\t]+`, `[A-Za-z ]*?\\s*:`, `\\b[\\w.-]+@` and a lazy
`(.*?header)(.*)(footer)` each retried the rest of a line or of the text from many starting points:
80 KB of `:` in a test log held a worker for 50 s, and 80 KB of header-like lines held the web
process that packed the request for 1.2 s (a megabyte: hours and minutes).

Two kinds of test:

- each new form against the old one on thousands of generated small inputs built from the pieces
  the patterns care about: the same answers (so no decision, record or stored blob changes);
- each reader, and the engine and the packer, on a megabyte of each shape that was quadratic:
  it returns the right answer. These take milliseconds; the old forms took hours on these inputs,
  so `finishes` turns that hang into a failure after a bound a hundred times what the linear
  forms need on a slow machine. It guards against a hang; it is not a timing of the code (the
  figures are in `make bench` and the README).
"""

from __future__ import annotations

import contextlib
import random
import re
import signal

import pytest

from ctxeng.content.packing import Packer, unpack
from ctxeng.engine import logformats, transforms
from ctxeng.engine.logformats import read_failures
from ctxeng.engine.render import split_block
from ctxeng.engine.transforms import _LINE_KIND, _SECTIONS, ref_tokens, section_body

from .builders import item, request, run, tool_call, tool_result
from .test_eviction import budget_policy, partitions

MB = 1_000_000
BOUND_SECONDS = 60


@contextlib.contextmanager
def finishes(seconds: int = BOUND_SECONDS):
    """Fail (instead of hanging for hours) when the body runs past `seconds`."""

    def expired(signum, frame):
        raise AssertionError(f"still running after {seconds} s on a 1 MB input: time is not linear in the input")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- the old forms

OUTCOME = r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)"
OLD_PYTEST_LINE = re.compile(rf"^[ \t]*(?:{OUTCOME}[ \t]+\S*::|\S*::\S*[ \t]+{OUTCOME}(?=\s|$))[^\n]*", re.M)
OLD_TAP_PLAN = re.compile(r"^\s*(TAP version \d+|1\.\.\d+)\s*$", re.M)
OLD_TAP_RESULT = re.compile(r"^\s*(not )?ok\b", re.M)
OLD_ANY_HEADING = re.compile(r"^\s*[A-Za-z][A-Za-z /]{0,60}:", re.M)
OLD_LINE_KIND = re.compile(r"^\s*(?:[-*]\s*)?([A-Za-z][A-Za-z ]*?)\s*:")
OLD_REF_TOKEN = re.compile(r"https?://\S+|sha256:[0-9a-f]{64}|\b[\w.-]+@[0-9a-f]{7,40}\S*")
# The issue-37 fence as a pattern (docs/sdk.md): the reference the linear reader must agree with.
REF_BLOCK = re.compile(r"(<<<ctx [^\n<>]*>>>\n)(.*)(\n<<<ctx:end>>>)", re.DOTALL)


def old_section_body(pattern: str, text: str) -> str | None:
    """section_body as it was: the same function with the old heading patterns."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transforms, "_ANY_HEADING", OLD_ANY_HEADING)
        return section_body(pattern.replace(r"^[^\S\n]*", r"^\s*", 1), text)


def ref_split_block(text: str):
    match = REF_BLOCK.fullmatch(text)
    if match is None or "<<<ctx" in match.group(2):
        return None
    return match.group(1), match.group(2), match.group(3)


def old_word(line: str) -> str:
    m = OLD_LINE_KIND.match(line)
    return m.group(1).strip().lower() if m else ""


def new_word(line: str) -> str:
    m = _LINE_KIND.match(line)
    return m.group(1).strip().lower() if m else ""


def texts(pieces: list[str], n: int = 3000, longest: int = 12, seed: int = 13):
    rng = random.Random(seed)
    for _ in range(n):
        yield "".join(rng.choice(pieces) for _ in range(rng.randint(0, longest)))


# --------------------------------------------------------------------------- same answers as before

LOG_PIECES = ["FAILED", "PASSED", "ERROR", "XPASS", " ", "  ", "\t", "\n", "\n\n", "\r", "\x0b", "::", ":", "a", "tests/t.py",
              "::test_x", "ok", "not ok", " 1", "1..3", "TAP version 13", "# TODO", "\u00a0", "-"]


def test_the_pytest_reader_finds_the_same_lines_as_the_old_pattern():
    for text in texts(LOG_PIECES):
        assert [m.group(0) for m in logformats._PYTEST_LINE.finditer(text)] == [m.group(0) for m in OLD_PYTEST_LINE.finditer(text)], repr(text)
        assert ([m.group(1) or m.group(2) for m in logformats._PYTEST_LINE.finditer(text)]
                == [m.group(1) or m.group(2) for m in OLD_PYTEST_LINE.finditer(text)]), repr(text)


def test_the_tap_reader_recognises_the_same_logs_as_the_old_patterns():
    for text in texts(LOG_PIECES):
        assert bool(logformats._TAP_PLAN.search(text)) == bool(OLD_TAP_PLAN.search(text)), repr(text)
        assert bool(logformats._TAP_RESULT.search(text)) == bool(OLD_TAP_RESULT.search(text)), repr(text)


SECTION_PIECES = ["Goal", "goal", ":", " ", "\n", "\n\n", "\t", "\r", "hard", "constraints", "current", "stage", "done", "/",
                  "in", "progress", "blocked", "conflicts", "and negative findings", "artifact", "checkpoint", "refs",
                  "x", "Next", "1", "-", "\u2003"]


@pytest.mark.parametrize("key", sorted(_SECTIONS, key=lambda k: k.value))
def test_a_summary_section_reads_the_same_as_with_the_old_patterns(key):
    for text in texts(SECTION_PIECES, n=1500, longest=16, seed=hash(key.value) % 1000):
        assert section_body(_SECTIONS[key], text) == old_section_body(_SECTIONS[key], text), repr(text)


def test_a_decision_log_line_has_the_same_kind_as_with_the_old_pattern():
    pieces = ["Decision", "decision", "Reason", "because", "Source", " ", "  ", "\t", ":", "-", "*", "a", "Z", "1", "we decided", "refs", "é"]
    for line in texts(pieces, longest=10):
        assert new_word(line) == old_word(line), repr(line)


def test_source_refs_are_the_same_tokens_as_with_the_old_pattern():
    pieces = ["a", "pi", ".", "-", "_", "@", "5a3f77c", "53fa77cabc", "zz", " ", "https://", "http://x", "sha256:", "0" * 64,
              "/", ":", "é", "#", "--", ".."]
    for line in texts(pieces, longest=10):
        assert ref_tokens(line) == OLD_REF_TOKEN.findall(line), repr(line)


def test_a_payload_string_splits_at_the_same_places_as_the_fence_pattern():
    pieces = ["<<<ctx ", "<<<ctx a note task", "untrusted", ">>>", ">>>\n", "\n", "body", " ", "\n<<<ctx:end>>>",
              "<<<ctx:end>>>", "<<<ctx-escaped:end>>>", "<<<ctx", "<", "status=ok", "2"]
    for text in texts(pieces, n=6000, longest=8):
        assert split_block(text) == ref_split_block(text), repr(text)
    # and the split a real payload has
    text = "<<<ctx untrusted status=error>>>\nline 1\nline 2\n<<<ctx:end>>>"
    assert split_block(text) == ref_split_block(text) == ("<<<ctx untrusted status=error>>>\n", "line 1\nline 2", "\n<<<ctx:end>>>")


# --------------------------------------------------------------------------- a megabyte of each shape

def test_the_log_reader_reads_a_megabyte_of_each_shape_that_was_quadratic():
    with finishes():
        assert read_failures(":" * MB).format is None
        assert read_failures("a::" * (MB // 3)).format is None
        assert read_failures("x::" * (MB // 3) + " FAILED\n").needles == ("x::" * (MB // 3) + " FAILED",)
        assert read_failures("ok 1..\n" + "\n" * MB + "x").format is None
        assert read_failures("TAP version 13\n" + " \n" * (MB // 2) + "not ok 1 - t\n").needles == ("not ok 1 - t",)


def test_the_summary_and_decision_checks_read_a_megabyte_of_each_shape_that_was_quadratic():
    goal = _SECTIONS[next(k for k in _SECTIONS if k.value == "goal")]
    with finishes():
        assert section_body(goal, "Goal: ship it\n" + "\n" * MB + "Next: x") == "ship it"
        assert section_body(goal, "\n" * MB) is None
        assert transforms._line_kind("a" + " " * MB) is None
        assert transforms._line_kind("Decision" + " " * MB + ":") == "decision"
        assert ref_tokens("a." * (MB // 2)) == []
        assert ref_tokens("Source: " + "a." * (MB // 2) + "@53fa77c") == ["a." * (MB // 2) + "@53fa77c"]


def test_packing_a_megabyte_of_header_like_lines_keeps_it_whole():
    header_lines = "<<<ctxeng:block nonce=1 x\n" * (MB // 26) + "\n<<<ctxeng:end nonce=1>>>"
    closed_lines = "<<<ctxeng:block nonce=1 x>>>\n" * (MB // 29) + "\n<<<ctxeng:end nonce=2>>>"
    with finishes():
        assert split_block(header_lines) is None and split_block(closed_lines) is None
        for text in (header_lines, closed_lines, "<<<ctxeng:block nonce=1 " * (MB // 24)):
            packer = Packer()
            packed = packer.pack(text)
            assert unpack(packed, lambda digests, blobs=packer.blobs: {d: blobs[d] for d in digests}) == text


def test_the_engine_assembles_a_megabyte_test_log_of_colons_and_a_megabyte_decision_line():
    log = ":" * MB + "\n" + "x::" * (MB // 3) + " FAILED\n" + "FAILED tests/t.py::test_a - assert 1 == 2\n"
    req = request(
        extra=[tool_result("log", "c1", log, source_type="test_log",
                           source_ref={"repo": "pi", "commit": "c0ffee", "artifact_id": "testlog-9"})],
        tool_calls=[tool_call("c1", "log", tool_name="run_tests", status="partial")],
    )
    with finishes():
        r = run(req)
    (rec,) = [t for t in r.manifest.transforms if t.output_item_id == "log"]
    assert rec.status == "applied" and rec.preservation_assertions["failure_lines_kept"] == "passed"

    # A note line of a letter and a megabyte of blanks: what the reducer's line reader rescanned.
    decisions = "\n".join(["Decision: keep the pairing.", "Reason: pairs stay whole (pi@53fa77c).",
                           "Source: https://example.org/spec", "a" + " " * MB, *(f"note {i}: filler text" for i in range(400))])
    pol = budget_policy(16000, partitions(state={"maximum": 600}), allowed=["none", "summarize", "decision_compress"])
    with finishes():
        r = run(request(extra=[item("plan", "runtime_state", decisions, kind="research_plan", relevance=0.3)]), pol)
    (rec,) = [t for t in r.manifest.transforms if t.output_item_id == "plan"]
    assert rec.type == "decision_compress" and set(rec.preservation_assertions.values()) == {"passed"}
