"""Source limits (stage 6a): derived items whose assertions are facts, not the reducer's say-so.

Every expected value here is written by hand or recomputed from the test's own input (which lines
of a generated log are failures is known to the generator), never read back from the reducer.
"""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxeng.engine import assemble, parse_policy, parse_request, source_limits
from ctxeng.engine.logformats import read_failures
from tests.golden import delivered_blocks, load_example

from .builders import (
    CREATED_AT,
    excluded_record,
    item,
    policy,
    reasons,
    request,
    run,
    sha,
    tool_call,
    tool_result,
)

# --------------------------------------------------------------------------- logs in five formats

PYTEST = (
    "============================= test session starts ==============================\n"
    "tests/test_a.py::test_ok PASSED\n"
    "tests/test_a.py::test_cut FAILED\n"
    "=========================== short test summary info ============================\n"
    "FAILED tests/test_a.py::test_cut - AssertionError: boundary 417\n"
    "ERROR tests/test_b.py::test_setup - fixture missing"
)
PYTEST_FAILURES = [
    "tests/test_a.py::test_cut FAILED",
    "FAILED tests/test_a.py::test_cut - AssertionError: boundary 417",
    "ERROR tests/test_b.py::test_setup - fixture missing",
]
JEST = (
    "FAIL src/pairing.test.js\n"
    "  pairing\n"
    "    ✓ pairs by call id (3 ms)\n"
    "    ✕ keeps source order (5 ms)\n"
    "    ✕ never merges two calls (1 ms)\n"
    "  ● pairing › keeps source order\n"
    "    expect(received).toEqual(expected)\n"
    "Tests:       2 failed, 1 passed, 3 total"
)
JEST_FAILURES = ["FAIL src/pairing.test.js", "    ✕ keeps source order (5 ms)", "    ✕ never merges two calls (1 ms)", "  ● pairing › keeps source order"]
TAP = "TAP version 13\n1..4\nok 1 - pairs by id\nnot ok 2 - keeps order\nnot ok 3 - no merge\nok 4 - ids safe\nnot ok 5 - later # TODO not yet"
TAP_FAILURES = ["not ok 2 - keeps order", "not ok 3 - no merge"]
GO = (
    "=== RUN   TestPairs\n--- PASS: TestPairs (0.00s)\n=== RUN   TestOrder\n"
    "    order_test.go:12: got 3, want 2\n--- FAIL: TestOrder (0.00s)\nFAIL\nFAIL\texample.com/pairs\t0.012s"
)
GO_FAILURES = ["--- FAIL: TestOrder (0.00s)", "FAIL\texample.com/pairs\t0.012s"]
JUNIT = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="pairs" tests="3" failures="1" errors="1">\n'
    '  <testcase classname="pairs" name="test_ok" time="0.01"/>\n'
    '  <testcase classname="pairs" name="test_order" time="0.02">\n'
    '    <failure message="expected 2, got 3" type="AssertionError">trace</failure>\n'
    "  </testcase>\n"
    '  <testcase classname="pairs" name="test_setup" time="0.00">\n'
    '    <error message="fixture missing" type="Error"/>\n'
    "  </testcase>\n</testsuite>"
)
JUNIT_FAILURES = ['name="test_order"', "expected 2, got 3", 'name="test_setup"', "fixture missing"]

LOGS = {"pytest": (PYTEST, PYTEST_FAILURES), "jest": (JEST, JEST_FAILURES), "tap": (TAP, TAP_FAILURES), "go_test": (GO, GO_FAILURES), "junit_xml": (JUNIT, JUNIT_FAILURES)}


def log_request(log: str, *, source_ref: dict | None = None, source_type: str = "test_log", required: bool = False, **fields) -> dict:
    ref = source_ref if source_ref is not None else {"repo": "pi", "commit": "c0ffee", "artifact_id": "testlog-9"}
    result = tool_result("log", "c1", log, source_type=source_type, source_ref=ref, required=required)
    return request(extra=[result], tool_calls=[tool_call("c1", "log", tool_name="run_tests", status="partial")], **fields)


def record_for(r, item_id: str):
    return next(t for t in r.manifest.transforms if t.output_item_id == item_id)


def delivered(r, item_id: str) -> str:
    return delivered_blocks(r.serialized_input, r.manifest_dict())[item_id]


@pytest.mark.parametrize("fmt", sorted(LOGS))
def test_a_test_log_keeps_every_failure_its_own_format_reports(fmt):
    log, failures = LOGS[fmt]
    r = run(log_request(log))
    rec = record_for(r, "log")
    assert rec.status == "applied" and rec.trigger == "over_source_limit"
    assert rec.preservation_assertions["failure_lines_kept"] == "passed"
    assert f"({fmt} format, " in rec.objective
    body = delivered(r, "log")
    pos = 0
    for needle in failures:  # every failure, in order, verbatim
        pos = body.index(needle, pos) + len(needle)
    assert "artifact_ref: testlog-9" in body and sha(log) in body


@pytest.mark.parametrize("fmt", sorted(LOGS))
def test_each_format_reader_finds_exactly_the_failures_of_its_log(fmt):
    log, failures = LOGS[fmt]
    found = read_failures(log)
    assert (found.format, list(found.needles)) == (fmt, failures)


@pytest.mark.parametrize("fmt", ["jest", "tap", "go_test", "junit_xml"])
def test_a_reducer_that_misses_failure_lines_is_caught_not_trusted(fmt, monkeypatch):
    # The reducer of the first build: it only knew pytest's words, and graded itself "passed".
    monkeypatch.setattr(source_limits, "FAILURE_LINE", re.compile(r"\bFAILED\b"))
    r = run(log_request(LOGS[fmt][0]))
    rec = excluded_record(r, "log")
    assert rec.reason == "transform_blocked" and "failure_lines_kept" in rec.failed_assertions
    (pair,) = r.manifest.tool_pairs
    assert pair.decision == "unresolved"  # the call is answered by a synthetic result, not by a lossy log


def test_a_log_in_no_known_format_cannot_be_reduced_unchecked():
    r = run(log_request("compiling...\nwarning: unused variable\nall done, exit 1"))
    assert excluded_record(r, "log").failed_assertions == ["log_format_recognised"]


def test_a_log_reduced_without_an_artifact_to_point_to_fails_artifact_ref_present():
    pol = copy.deepcopy(policy())
    pol["source_limits"] = {"ci_log": {"default": "failures_plus_artifact_ref"}}
    r = run(log_request(PYTEST, source_type="ci_log", source_ref={"path": "ci/run-7.txt"}), pol)
    assert excluded_record(r, "log").failed_assertions == ["artifact_ref_present"]


def test_a_required_log_whose_reduction_fails_blocks_the_assembly():
    r = run(log_request("no format here\nexit 1", required=True))
    m = r.manifest
    assert m.assembly.status == "blocked" and m.assembly.blocked_reason == "transform_blocked"
    assert "log" in m.assembly.missing


def test_the_derived_log_names_the_kept_lines_and_its_lineage():
    lines = [f"PASSED tests/t.py::test_{i}" for i in range(30)]
    lines[9] = "FAILED tests/t.py::test_9 - boom"
    lines[20] = "FAILED tests/t.py::test_20 - bang"
    log = "\n".join(lines)
    r = run(log_request(log))
    inc = next(i for i in r.manifest.included if i.item_id == "log")
    assert inc.source_ref["lines"] == "10,21" and inc.source_ref["artifact_id"] == "testlog-9"
    rec = record_for(r, "log")
    node = inc.source_lineage[-1]
    assert node.type == "excerpt" and node.input_digest == sha(log) and node.digest == rec.output_digest
    assert inc.content_hash == rec.output_digest == sha(delivered(r, "log"))
    assert node.transform_record_id == rec.record_id
    (pair,) = r.manifest.tool_pairs
    assert pair.result_hash == sha(log)  # the pair refers to the result as received


# --------------------------------------------------------------------------- code excerpts


def code_policy(max_tokens: int = 120) -> dict:
    pol = copy.deepcopy(policy())
    pol["source_limits"]["repository"] = {"default": "excerpt_with_line_range", "max_tokens": max_tokens}
    return pol


def code(n: int = 52, hot: range = range(11, 15)) -> str:
    return "\n".join(
        f"  const pairing = byCallId(results, call{i});  // tool call pairing" if i in hot else f"  const filler{i} = compute(value{i}, other{i});"
        for i in range(n)
    )


def test_a_code_excerpt_narrows_its_line_range_to_the_lines_it_kept():
    text = code()
    ev = item("ev", content=text, source_ref={"repo": "pi", "commit": "c0ffee", "path": "src/types.ts", "lines": "149-200"}, claim="how tool call pairing works")
    r = run(request(extra=[ev]), code_policy())
    inc = next(i for i in r.manifest.included if i.item_id == "ev")
    first, last = (int(x) for x in inc.source_ref["lines"].split("-"))
    assert 149 <= first <= last <= 200 and last - first < 51  # a narrower range than the input's
    body = delivered(r, "ev").split("\n", 1)[1]
    assert "tool call pairing" in body  # the window holds the lines about the claim (160-163)
    assert body == "\n".join(text.splitlines()[first - 149 : last - 149 + 1])
    assert record_for(r, "ev").preservation_assertions == {"non_empty": "passed", "hash_present": "passed", "line_range_matches": "passed"}


def test_a_code_excerpt_whose_ref_does_not_describe_its_content_cannot_claim_a_range():
    ev = item("ev", content=code(), source_ref={"repo": "pi", "commit": "c0ffee", "path": "src/types.ts", "lines": "149-160"})
    r = run(request(extra=[ev]), code_policy())
    assert excluded_record(r, "ev").failed_assertions == ["line_range_matches"]


def test_a_code_excerpt_cut_to_nothing_is_not_passed():
    one_long_line = "const x = [" + ", ".join(str(i) for i in range(400)) + "];"
    ev = item("ev", content=one_long_line, source_ref={"repo": "pi", "commit": "c0ffee", "path": "a.ts", "lines": "7-7"})
    r = run(request(extra=[ev]), code_policy(100))
    assert {"non_empty", "line_range_matches"} <= set(excluded_record(r, "ev").failed_assertions)


# --------------------------------------------------------------------------- web documents


def web_policy(max_tokens: int = 150) -> dict:
    pol = copy.deepcopy(policy())
    pol["source_limits"]["web_document"] = {"default": "relevant_sections_plus_hash", "max_tokens": max_tokens}
    return pol


def test_a_web_document_cut_to_nothing_is_transform_blocked():
    text = "\n\n".join(" ".join(f"s{k}w{i}" for i in range(200)) for k in range(3))
    r = run(request(extra=[item("doc", "official_document", text)]), web_policy(100))
    assert "non_empty" in excluded_record(r, "doc").failed_assertions


def test_a_web_document_keeps_the_sections_matching_the_claim_not_the_leading_ones():
    sections = [f"Section {k}: " + " ".join(f"filler{k}x{i}" for i in range(8)) for k in range(40)]
    sections[7] = "Section 7: resolve-library-id runs before query-docs, always."
    sections[30] = "Section 30: query-docs takes the library id."
    doc = item("doc", "official_document", "\n\n".join(sections), claim="context7 calls resolve-library-id before query-docs")
    r = run(request(extra=[doc]), web_policy())
    inc = next(i for i in r.manifest.included if i.item_id == "doc")
    assert inc.source_ref["sections"] == "8,31" and inc.source_ref["url"]  # only the two that match
    assert "resolve-library-id runs before query-docs" in delivered(r, "doc")
    assert record_for(r, "doc").preservation_assertions["sections_relevant"] == "passed"


def test_an_item_within_its_source_limit_is_not_touched():
    r = run(request(extra=[item("doc", "official_document", "short page")]), web_policy())
    assert not r.manifest.transforms


# --------------------------------------------------------------------------- transforms.allowed and trigger


def test_with_only_none_allowed_an_over_limit_log_is_excluded_never_excerpted():
    pol = copy.deepcopy(policy())
    pol["transforms"]["allowed"] = ["none"]
    r = run(log_request(PYTEST), pol)
    rec = excluded_record(r, "log")
    assert rec.reason == "budget_evicted" and "transforms.allowed has no 'excerpt'" in rec.detail
    assert not r.manifest.transforms


def test_with_only_none_allowed_a_required_over_limit_item_blocks_the_assembly():
    pol = copy.deepcopy(policy())
    pol["transforms"]["allowed"] = ["none"]
    m = run(log_request(PYTEST, required=True), pol).manifest
    assert m.assembly.status == "blocked" and m.assembly.blocked_reason == "required_partition_missing" and "log" in m.assembly.missing
    assert m.assembly.blocked_detail[0].startswith("budget_exhausted: ")


def test_a_trigger_without_source_limits_runs_no_source_limit_reduction():
    pol = copy.deepcopy(policy())
    pol["transforms"]["trigger"] = "over_partition"
    rec = excluded_record(run(log_request(PYTEST), pol), "log")
    assert "does not run source-limit reductions" in rec.detail


@pytest.mark.parametrize(
    ("section", "value", "message"),
    [
        ("trigger", "sunset", "'sunset' is not a trigger the engine acts on"),
        ("allowed", ["none", "redact"], "'redact' is not a transform a policy may allow"),
        ("allowed", ["none", "none"], "listed twice"),
        ("preserve", ["goal", "vibes"], "'vibes' is not a preservation assertion the engine checks"),
    ],
)
def test_a_transforms_clause_the_engine_does_not_act_on_is_refused(section, value, message):
    from ctxeng.engine import InvalidInput

    pol = copy.deepcopy(policy())
    pol["transforms"][section] = value
    with pytest.raises(InvalidInput) as exc:
        parse_policy(pol)
    assert any(e.startswith(f"transforms.{section}") and message in e for e in exc.value.errors), exc.value.errors


def test_max_tokens_on_a_limit_it_does_not_apply_to_is_refused():
    from ctxeng.engine import InvalidInput

    pol = copy.deepcopy(policy())
    pol["source_limits"]["test_log"] = {"default": "failures_plus_artifact_ref", "max_tokens": 100}
    with pytest.raises(InvalidInput) as exc:
        parse_policy(pol)
    assert any(e.startswith("source_limits.test_log") and "has no effect" in e for e in exc.value.errors), exc.value.errors


# --------------------------------------------------------------------------- the worked example


def test_the_worked_example_delivers_the_derived_test_log_with_its_lineage_and_narrowed_ref():
    r = assemble(parse_request(load_example("request.json")), parse_policy(load_example("policy.yaml")), created_at=CREATED_AT)
    inc = next(i for i in r.manifest.included if i.item_id == "result-call-c")
    assert inc.source_ref == {"repo": "pi", "commit": "53fa77ccd8a279eb87e92294ef3687b03ff80112", "artifact_id": "testlog-77", "lines": "418,1291,2556"}
    received = next(c for c in load_example("request.json")["candidates"] if c["item_id"] == "result-call-c")
    node = inc.source_lineage[-1]
    assert node.type == "excerpt" and node.input_digest == received["content_hash"]
    rec = record_for(r, "result-call-c")
    assert rec.output_digest == node.digest == inc.content_hash
    assert all(v == "passed" for v in rec.preservation_assertions.values())
    assert next(c for c in r.manifest.candidate_items if c.item_id == "result-call-c").content_hash == received["content_hash"]


# --------------------------------------------------------------------------- properties: no "passed" over a false fact

PROP = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@st.composite
def generated_logs(draw):
    """A log in one of the five formats, with the failure lines the generator itself put in."""
    fmt = draw(st.sampled_from(["pytest", "jest", "tap", "go_test", "status_lines"]))
    outcomes = draw(st.lists(st.booleans(), min_size=1, max_size=40))  # True = failed
    lines: list[str] = []
    failures: list[str] = []
    if fmt == "tap":
        lines += ["TAP version 13", f"1..{len(outcomes)}"]
    for i, failed in enumerate(outcomes):
        name = f"case_{i}_{draw(st.sampled_from(['pair', 'order', 'id', 'cache']))}"
        if fmt == "pytest":
            line = f"{'FAILED' if failed else 'PASSED'} tests/test_m.py::{name}" + (" - AssertionError: x" if failed else "")
        elif fmt == "jest":
            line = f"    {'✕' if failed else '✓'} {name} (3 ms)"
        elif fmt == "tap":
            line = f"{'not ok' if failed else 'ok'} {i + 1} - {name}"
        elif fmt == "go_test":
            lines.append(f"=== RUN   Test{name}")
            line = f"--- {'FAIL' if failed else 'PASS'}: Test{name} (0.00s)"
        else:
            line = f"{'FAIL' if failed else 'OK'} {name}"
        lines.append(line)
        if failed:
            failures.append(line)
        if draw(st.booleans()):
            lines.append(f"    detail {i}: value {draw(st.integers(0, 999))}")
    return fmt, "\n".join(lines), failures


def lossy(reducer, drop: int):
    """A faulty reducer: drops one kept line from its output, so a fact becomes false."""

    def reduce(cand):
        out, ref = reducer(cand)
        lines = out.split("\n")
        head, kept = lines[:3], lines[3:]
        if kept:
            del kept[drop % len(kept)]
        return "\n".join(head + kept), ref

    return reduce


@PROP
@given(generated_logs(), st.one_of(st.none(), st.integers(0, 50)))
@example(("jest", "    ✕ a (3 ms)\n    ✓ b (1 ms)", ["    ✕ a (3 ms)"]), 0)
def test_failure_lines_kept_is_never_passed_while_a_failure_line_is_missing(log, drop):
    fmt, text, failures = log
    original = source_limits.reduce_log
    if drop is not None:
        source_limits.reduce_log = lossy(original, drop)
    try:
        r = run(log_request(text))
    finally:
        source_limits.reduce_log = original
    rec = record_for(r, "log")
    if rec.status == "applied":
        body = delivered(r, "log")
        # The fact, from the generator: every failure line it wrote is delivered, in order.
        assert rec.preservation_assertions["failure_lines_kept"] == "passed"
        pos = 0
        for line in failures:
            pos = body.index(line, pos) + len(line)
    else:
        assert "log" in reasons(r)


@st.composite
def code_items(draw):
    n = draw(st.integers(1, 60))
    lines = [f"line {i}: " + " ".join(draw(st.sampled_from(["pair", "call", "id", "x", "y"])) for _ in range(draw(st.integers(0, 12)))) for i in range(n)]
    start = draw(st.integers(1, 500))
    declared_len = draw(st.sampled_from([n, n, n, max(1, n - 3), n + 5]))
    return lines, start, declared_len


@PROP
@given(code_items(), st.integers(40, 300))
def test_code_excerpt_assertions_pass_only_when_their_facts_hold(code_item, max_tokens):
    lines, start, declared_len = code_item
    text = "\n".join(lines)
    ref = {"repo": "pi", "commit": "c0ffee", "path": "a.ts", "lines": f"{start}-{start + declared_len - 1}"}
    r = run(request(extra=[item("ev", content=text, source_ref=ref, claim="pair call id")]), code_policy(max_tokens))
    recs = [t for t in r.manifest.transforms if t.output_item_id == "ev"]
    if not recs:
        return  # within its limit: untouched
    (rec,) = recs
    a = rec.preservation_assertions
    if rec.status != "applied":
        assert reasons(r)["ev"] == "transform_blocked"
        return
    inc = next(i for i in r.manifest.included if i.item_id == "ev")
    body = delivered(r, "ev").split("\n", 1)[1]
    first, last = (int(x) for x in inc.source_ref["lines"].split("-"))
    # Facts recomputed here: the declared range describes the content, and the body is exactly
    # the input's lines first..last; the body is not empty; the full content's hash is delivered.
    assert a["line_range_matches"] == "passed"
    assert declared_len == len(lines)
    assert body == "\n".join(lines[first - start : last - start + 1])
    assert a["non_empty"] == "passed" and body.strip()
    assert a["hash_present"] == "passed" and sha(text) in delivered(r, "ev")


def shifted(reducer, by: int):
    """A faulty code reducer: claims a line range `by` lines off from the lines it kept."""

    def reduce(cand, window):
        out, ref = reducer(cand, window)
        if ref.get("lines", "none") != "none":
            a, b = (int(x) for x in ref["lines"].split("-"))
            ref = {**ref, "lines": f"{a + by}-{b + by}"}
        return out, ref

    return reduce


@PROP
@given(code_items(), st.integers(40, 300), st.sampled_from([None, -1, 1]))
def test_a_code_range_that_is_off_by_any_line_is_never_passed(code_item, max_tokens, shift):
    lines, start, declared_len = code_item
    ref = {"repo": "pi", "commit": "c0ffee", "path": "a.ts", "lines": f"{start}-{start + declared_len - 1}"}
    original = source_limits.reduce_code
    if shift is not None:
        source_limits.reduce_code = shifted(original, shift)
    try:
        r = run(request(extra=[item("ev", content="\n".join(lines), source_ref=ref, claim="pair call id")]), code_policy(max_tokens))
    finally:
        source_limits.reduce_code = original
    recs = [t for t in r.manifest.transforms if t.output_item_id == "ev"]
    if not recs or recs[0].status != "applied":
        return
    inc = next(i for i in r.manifest.included if i.item_id == "ev")
    first, last = (int(x) for x in inc.source_ref["lines"].split("-"))
    body = delivered(r, "ev").split("\n", 1)[1]
    assert first - start >= 0 and body == "\n".join(lines[first - start : last - start + 1])


CLAIM_TERMS = ("tool", "pairing", "rules")  # the words of the claim below, written by hand


@st.composite
def documents(draw):
    vocabulary = ["alpha", "beta", "gamma", "delta", "pairing", "tool", "cache"]
    sections = [
        " ".join(draw(st.lists(st.sampled_from(vocabulary), min_size=1, max_size=30)))
        for _ in range(draw(st.integers(1, 25)))
    ]
    return sections


def tampered(reducer, how: str):
    """Faulty web reducers: one delivers a section that is not in the input, one an irrelevant one."""

    def reduce(cand, window):
        out, ref = reducer(cand, window)
        head, _, body = out.partition("\n")
        if how == "edit" and body:
            body = body.replace("a", "o", 1)
        if how == "irrelevant":
            sections = cand.content.split("\n\n")
            extra = next((i for i, s in enumerate(sections) if not any(t in s for t in CLAIM_TERMS)), None)
            if extra is not None and ref["sections"] != "none":
                kept = sorted({*source_limits.expand_numbers(ref["sections"]), extra + 1})
                ref = {**ref, "sections": source_limits.compress_numbers(kept)}
                body = "\n\n".join(sections[n - 1] for n in kept)
        return f"{head}\n{body}", ref

    return reduce


@PROP
@given(documents(), st.integers(60, 400), st.sampled_from([None, "edit", "irrelevant"]))
def test_web_section_assertions_are_never_passed_over_a_false_fact(sections, max_tokens, fault):
    doc = item("doc", "official_document", "\n\n".join(sections), claim="tool pairing rules")
    original = source_limits.reduce_sections
    if fault is not None:
        source_limits.reduce_sections = tampered(original, fault)
    try:
        r = run(request(extra=[doc]), web_policy(max_tokens))
    finally:
        source_limits.reduce_sections = original
    recs = [t for t in r.manifest.transforms if t.output_item_id == "doc"]
    if not recs:
        return
    (rec,) = recs
    if rec.status != "applied":
        assert reasons(r)["doc"] == "transform_blocked"
        return
    inc = next(i for i in r.manifest.included if i.item_id == "doc")
    kept = source_limits.expand_numbers(inc.source_ref["sections"])
    body = delivered(r, "doc").split("\n", 1)[1]
    assert body.strip()  # non_empty
    assert body == "\n\n".join(sections[n - 1] for n in kept)  # sections_match_source
    if any(any(t in s for t in CLAIM_TERMS) for s in sections):
        assert all(any(t in sections[n - 1] for t in CLAIM_TERMS) for n in kept)  # sections_relevant
