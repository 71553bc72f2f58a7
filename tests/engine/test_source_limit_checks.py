"""The pure pieces of stage 6a (source_limits.py), each against its docstring, hand-written oracles.

Line-number lists (`"3-5,9"`), decision terms, the per-part hit counts the code and document
reducers rank by, the log reducer's kept lines and the checks that re-read them: small inputs
whose right answer can be written down, so an off-by-one or a loosened comparison shows here.
"""

from __future__ import annotations

import pytest

from ctxeng.engine.models import ContextItem
from ctxeng.engine.source_limits import (
    _excerpt,
    _line_numbers_match,
    _range_matches,
    _terms,
    check_log,
    compress_numbers,
    expand_numbers,
    hits_per_part,
    reduce_log,
)
from ctxeng.engine.working import Candidate

from .builders import item, sha


def cand(content: str, source_type: str = "test_log", **fields) -> Candidate:
    it = ContextItem.model_validate(item("x", source_type, content, **fields))
    return Candidate(item=it, order=0, content=content, trust=it.trust)


@pytest.mark.parametrize(
    "numbers, spec",
    [([], ""), ([7], "7"), ([3, 4, 5, 9], "3-5,9"), ([1, 2], "1-2"), ([1, 3, 5], "1,3,5"), ([2, 3, 4, 5, 6, 10, 11], "2-6,10-11")],
)
def test_line_numbers_compress_to_runs_and_expand_back(numbers, spec):
    assert compress_numbers(numbers) == spec
    if numbers:
        assert expand_numbers(spec) == numbers


@pytest.mark.parametrize("spec, numbers", [("3 - 5", [3, 4, 5]), (" 9 ", [9]), ("1-1", [1]), (12, [12])])
def test_a_line_list_tolerates_spaces_and_a_bare_number(spec, numbers):
    assert expand_numbers(spec) == numbers


@pytest.mark.parametrize("spec", ["5-3", "a-b", "3-", "", "1,,2", "none", "-3", "1.5"])
def test_a_line_list_that_is_not_one_is_none(spec):
    assert expand_numbers(spec) is None


def test_decision_terms_are_lowered_words_of_four_or_more_characters_without_stopwords():
    assert _terms(["Find WHERE tool-calls are Paired by call_id in 2024", "with them"]) == {
        "tool-calls",
        "paired",
        "call_id",
        "2024",
    }
    assert _terms(["a bc def"]) == set()


def test_each_part_counts_the_distinct_terms_it_holds():
    parts = ["pairing pairing here", "nothing", "PAIRING and calls", "calls"]
    assert hits_per_part(parts, {"pairing", "calls"}) == [1, 0, 2, 1]
    assert hits_per_part(parts, set()) == [0, 0, 0, 0]
    assert hits_per_part([], {"calls"}) == []
    # A term at the very start of a part belongs to that part, not the one before it.
    assert hits_per_part(["ab", "calls x", "y calls"], {"calls"}) == [0, 1, 1]


LOG = "\n".join(
    [
        "collected 3 items",
        "tests/test_a.py::test_ok PASSED",
        "tests/test_a.py::test_x FAILED",
        "E   assert 1 == 2",
        "tests/test_a.py::test_y PASSED",
        "FAILED tests/test_a.py::test_x - assert 1 == 2",
        "1 failed, 2 passed",
    ]
)


def test_a_log_is_reduced_to_its_failure_lines_with_its_artifact_and_digest():
    c = cand(LOG)
    out, ref = reduce_log(c)
    lines = out.split("\n")
    assert lines[1] == "artifact_ref: log-x"
    assert lines[2] == f"full_log_digest: {sha(LOG)}"
    assert lines[3:] == [
        "tests/test_a.py::test_x FAILED",
        "E   assert 1 == 2",
        "FAILED tests/test_a.py::test_x - assert 1 == 2",
    ]
    assert ref["lines"] == "3-4,6"
    assert ref["artifact_id"] == "log-x"
    assert check_log(c, out, ref)["line_range_matches"] == "passed"
    assert check_log(c, out, ref)["artifact_ref_present"] == "passed"


def test_a_junit_failure_keeps_the_testcase_line_that_names_the_test():
    xml = "\n".join(['<testsuite name="s" tests="2" failures="1">', '<testcase name="ok"/>', '<testcase name="bad">', '<failure message="boom"/>', "</testcase>", "</testsuite>"])
    out, ref = reduce_log(cand(xml))
    assert out.split("\n")[3:] == ['<testcase name="bad">', '<failure message="boom"/>']
    assert ref["lines"] == "3-4"


def test_a_log_without_failures_keeps_no_line_and_says_so():
    clean = "collected 1 item\ntests/test_a.py::test_ok PASSED\n1 passed"
    c = cand(clean)
    out, ref = reduce_log(c)
    assert ref["lines"] == "none" and len(out.split("\n")) == 3
    assert check_log(c, out, ref)["line_range_matches"] == "passed"


@pytest.mark.parametrize(
    "spec, body, result",
    [
        ("2,4", ["b", "d"], "passed"),
        ("2,4", ["b", "c"], "failed"),
        ("2-3", ["b", "c"], "passed"),
        ("2-3", ["b"], "failed"),
        ("0,1", ["", "a"], "failed"),  # there is no line 0
        ("4-5", ["d", ""], "failed"),  # nor a line past the end
        ("nonsense", ["a"], "failed"),
        ("none", [], "passed"),
        ("none", ["a"], "failed"),
    ],
)
def test_a_logs_narrowed_line_list_is_checked_against_the_lines_it_names(spec, body, result):
    out = "\n".join(["head", "artifact_ref: a", "full_log_digest: d", *body])
    assert _line_numbers_match(["a", "b", "c", "d"], spec, out) == result


def test_a_log_reduction_without_the_artifact_line_fails_artifact_ref_present():
    c = cand(LOG)
    out, ref = reduce_log(c)
    assert check_log(c, out.replace("artifact_ref: log-x", "artifact_ref: elsewhere"), ref)["artifact_ref_present"] == "failed"
    no_artifact = cand(LOG, source_ref={"repo": "pi", "commit": "c0ffee"})
    out, ref = reduce_log(no_artifact)
    assert check_log(no_artifact, out, ref)["artifact_ref_present"] == "failed"


CODE = ["line 10", "line 11", "line 12", "line 13", "line 14"]


@pytest.mark.parametrize(
    "declared, kept, body, result",
    [
        ("10-14", "11-12", "line 11\nline 12", "passed"),
        ("10-14", "10-14", "\n".join(CODE), "passed"),
        ("10-14", "11-12", "line 12\nline 13", "failed"),  # the range is off by one
        ("10-14", "9-10", "line 10", "failed"),  # starts before the input
        ("10-14", "14-15", "line 14", "failed"),  # ends after it
        ("10-20", "11-12", "line 11\nline 12", "failed"),  # the input's ref does not describe its 5 lines
        ("10-14", "none", "", "failed"),
        (None, "2-3", "line 11\nline 12", "passed"),  # a whole file is numbered from 1
        (None, "1-1", "line 11", "failed"),
    ],
)
def test_a_code_excerpt_is_exactly_the_claimed_lines_numbered_as_the_inputs_ref(declared, kept, body, result):
    ref = {"repo": "pi", "commit": "c0ffee", "path": "src/a.ts"}
    if declared is not None:
        ref["lines"] = declared
    c = cand("\n".join(CODE), "repository_source", source_ref=ref)
    assert _range_matches(c, CODE, kept, body) == result


def test_a_record_excerpt_keeps_short_text_whole_and_the_two_ends_of_long_text():
    assert _excerpt("x" * 1200) == "x" * 1200
    long = "a" * 700 + "b" * 701
    assert _excerpt(long) == "a" * 600 + "\n…\n" + "b" * 600
    assert _excerpt("abcdefghij", limit=4) == "ab\n…\nij"


@pytest.mark.parametrize(("ref", "label"), [
    ({"path": "ci/test.log", "repo": "acme/app", "commit": "abc1234"}, "ci/test.log (repo acme/app @ abc1234)"),
    ({"path": "ci/test.log", "repo": "acme/app"}, "ci/test.log"),  # a repository without a commit names no version
    ({"path": "ci/test.log", "commit": "abc1234"}, "ci/test.log"),
    ({"url": "https://ci.example/run/7/log", "path": "ci/test.log"}, "https://ci.example/run/7/log"),
])
def test_a_log_without_an_artifact_is_referred_to_by_its_source_and_version(ref, label):
    """No stored artifact holds the full log: the reduced log names where it came from instead —
    its URL or path, and the repository and commit when the reference has both."""
    out, _ = reduce_log(cand(LOG, source_ref=ref))
    assert out.split("\n")[1] == f"artifact_ref: {label}"
