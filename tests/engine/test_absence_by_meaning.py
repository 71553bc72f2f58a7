"""Statements of absence judged by meaning (issue 50, item 2; seed §6: "not yet found" never becomes
"does not exist", a negative conclusion keeps the scope it was searched in).

The classifier (`findings.is_absence`) is held to the precision and recall measured by
bench/absence.py on the hand-labelled tests/data/absence_sentences.json. In a summary, a statement
of absence in any section — not only the negative-findings one — needs its scope; without it the
summary is not admitted as fact: it is excluded `transform_blocked` (the seed's rule for a summary
failing a preservation assertion; the engine does not rewrite a model's summary into an open
item). In Confirmed Claims a source ref stands for the scope. Each expected decision is written by
hand from the sentence and the rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxeng.engine.findings import is_absence

from .builders import excluded_record, item, policy, request, run
from .test_admission_integrity_iv import PI_REF, TURNS
from .test_transforms import checkpoint, full_preserve_policy

SET = Path(__file__).resolve().parents[1] / "data" / "absence_sentences.json"


def _scores(split: str) -> tuple[float, float]:
    rows = [r for r in json.loads(SET.read_text(encoding="utf-8"))["sentences"] if r["split"] == split]
    judged = [(is_absence(r["sentence"]), r["label"] == "absence") for r in rows]
    tp = sum(got and want for got, want in judged)
    return tp / sum(got for got, _ in judged), tp / sum(want for _, want in judged)


def test_the_labelled_set_has_a_hundred_sentences_and_the_hard_negatives():
    rows = json.loads(SET.read_text(encoding="utf-8"))["sentences"]
    assert len(rows) >= 100 and all(r["rationale"] and r["label"] in ("absence", "not_absence") for r in rows)
    labels = {r["sentence"]: r["label"] for r in rows}
    for hard in ("The change is a no-op for existing users.", "The fix not only adds retries but also logs them.",
                 "Tests ran without errors.", "None is returned when the key is missing."):
        assert labels[hard] == "not_absence"


# Measured by `python -m bench.absence` (held_out: written after the rules, measured once).
@pytest.mark.parametrize("split, precision, recall", [("held_out", 1.0, 0.85), ("development", 1.0, 0.98)])
def test_the_classifier_keeps_the_precision_and_recall_measured(split, precision, recall):
    p, r = _scores(split)
    assert p >= precision and r >= recall, (split, p, r)


@pytest.mark.parametrize("sentence, expected", [
    ("The client has no retry logic.", True),
    ("The scheduler lacks a backoff.", True),
    ("Rate limiting is absent from the API.", True),
    ("The v2 endpoint does not support pagination.", True),
    ("The change is a no-op.", False),
    ("Tests ran without errors.", False),
    ("None is returned on timeout.", False),
    ("If no config is found, defaults apply.", False),
])
def test_absence_is_told_from_other_negations(sentence, expected):
    assert is_absence(sentence) is expected


# --------------------------------------------------------------------------- in summaries


def preserving() -> dict:
    pol = policy()
    pol["transforms"]["preserve"] = ["goal", "open_items", "conflicts_and_negative_findings"]
    return pol


def summary(done: str, claims: str = "retries keyed by call id [pi@c0ffee:src/ev.ts:1-20]") -> dict:
    """A summary of earlier turns (its inputs not readable here) whose Done section is `done`."""
    text = (f"Goal: find retry logic\nDone: {done}\nConfirmed Claims: {claims}\nOpen Items: OI-1\n"
            "Conflicts and Negative Findings: none")
    return item("sum", "model_summary", text, **TURNS, source_refs=[{**PI_REF}], preserves={"open_item_ids": ["OI-1"]},
                producer="research-agent/v2")


def _record(r):
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    return record


PHRASINGS = ["the HTTP client has no retry logic", "the scheduler lacks a backoff", "rate limiting is absent from the API",
             "the v2 endpoint does not support pagination"]


@pytest.mark.parametrize("statement", PHRASINGS)
def test_an_absence_in_any_section_without_scope_is_not_admitted_as_fact(statement):
    r = run(request(extra=[summary(statement)]), preserving())
    ex = excluded_record(r, "sum")
    assert ex.reason == "transform_blocked" and ex.failed_assertions == ["conflicts_and_negative_findings"]
    (judged,) = _record(r).negative_findings.statements
    assert (judged.statement, judged.section, judged.result) == (statement, "Done", "failed")


@pytest.mark.parametrize("statement", PHRASINGS)
def test_the_same_absence_with_its_scope_is_admitted_and_recorded_passed_not_not_applicable(statement):
    scoped = f"{statement} (searched: src/http/, lib/)"
    r = run(request(extra=[summary(scoped)]), preserving())
    assert "sum" in r.manifest.included_ids()
    record = _record(r)
    assert record.preservation_assertions["conflicts_and_negative_findings"] == "passed"
    (judged,) = record.negative_findings.statements
    assert (judged.statement, judged.scope, judged.result) == (scoped, ["lib/", "src/http/"], "passed")


def test_does_not_exist_in_confirmed_claims_needs_a_source_ref():
    r = run(request(extra=[summary("read ev.ts", claims="the v1 retry helper does not exist")]), preserving())
    assert excluded_record(r, "sum").reason == "transform_blocked"
    (judged,) = _record(r).negative_findings.statements
    assert (judged.section, judged.judged_as, judged.result) == ("Confirmed Claims", "existence_claim", "failed")
    sourced = "the v1 retry helper does not exist since the rewrite [pi@c0ffee:src/ev.ts:1-20]"
    assert "sum" in run(request(extra=[summary("read ev.ts", claims=sourced)]), preserving()).manifest.included_ids()


def test_negations_that_are_not_absence_leave_a_summary_admitted_with_nothing_judged():
    done = ("ran the suite without errors; the patch is a no-op for existing users; "
            "FileNotFoundError: [Errno 2] No such file or directory: 'config.yaml'; None is returned when the key is missing")
    r = run(request(extra=[summary(done)]), preserving())
    assert "sum" in r.manifest.included_ids()
    record = _record(r)
    assert record.negative_findings.statements == []
    assert record.preservation_assertions["conflicts_and_negative_findings"] == "not_applicable"


def test_directive_sections_are_not_findings():
    text = ("Goal: make sure the API has no breaking change\nHard Constraints: the client must not lack a timeout\n"
            "Open Items: OI-1\nNext Steps: check whether the scheduler lacks a backoff\nConflicts and Negative Findings: none")
    kept = item("sum", "model_summary", text, **TURNS, source_refs=[{**PI_REF}], preserves={"open_item_ids": ["OI-1"]}, producer="research-agent/v2")
    r = run(request(extra=[kept]), preserving())
    assert "sum" in r.manifest.included_ids() and _record(r).negative_findings.statements == []


# --------------------------------------------------------------------------- the runtime checkpoint's own fields


def test_has_no_in_the_checkpoints_negative_findings_without_scope_is_not_admitted():
    req = request(checkpoint=checkpoint(conflicts_and_negative_findings=["context7 has no pairing"]),
                  runtime_state={"open_item_ids": ["OI-1"], "article_draft_revision": 2})
    ex = excluded_record(run(req, full_preserve_policy()), "checkpoint-7")
    assert ex.reason == "transform_blocked" and "conflicts_and_negative_findings" in ex.failed_assertions


def test_an_absence_in_the_checkpoints_done_field_needs_its_scope_too():
    state = {"open_item_ids": ["OI-1"], "article_draft_revision": 2}
    bad = request(checkpoint=checkpoint(done=["read pi: it lacks a retry wrapper"]), runtime_state=state)
    assert excluded_record(run(bad, full_preserve_policy()), "checkpoint-7").reason == "transform_blocked"
    good = request(checkpoint=checkpoint(done=["read pi: it lacks a retry wrapper (searched: pi/src)"]), runtime_state=state)
    assert "checkpoint-7" in run(good, full_preserve_policy()).manifest.included_ids()


def test_a_checkpoint_claim_of_absence_with_an_empty_source_ref_is_not_admitted():
    state = {"open_item_ids": ["OI-1"], "article_draft_revision": 2}
    claim = [{"claim": "the retry helper does not exist", "source_ref": {}}]
    bad = request(checkpoint=checkpoint(confirmed_claims=claim), runtime_state=state)
    assert excluded_record(run(bad, full_preserve_policy()), "checkpoint-7").reason == "transform_blocked"
    sourced = [{"claim": "the retry helper does not exist", "source_ref": {"repo": "continue", "commit": "9e8d", "path": "x.ts", "lines": "1-9"}}]
    ok = request(checkpoint=checkpoint(confirmed_claims=sourced), runtime_state=state)
    assert "checkpoint-7" in run(ok, full_preserve_policy()).manifest.included_ids()


def test_an_inputs_scoped_absence_in_other_words_must_be_kept_with_its_scope():
    from ctxeng.engine.findings import findings_not_kept

    source = "read the client; the HTTP client has no retry logic (searched: src/http/, lib/)"
    assert findings_not_kept([source], "Done: read the client") == ["1 negative finding(s) searched in lib/, src/http/ not kept with that scope"]
    assert findings_not_kept([source], "Conflicts: no retry logic found (searched: lib/, src/http/)") == []
