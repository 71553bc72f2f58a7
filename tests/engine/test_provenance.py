"""Provenance is reconciled, not copied (seed §2, §8): acquisition records, result digests, and the
policy's retrieval sources (diagnostic traces, governed memory, unlisted categories)."""

from __future__ import annotations

import pytest

from ctxeng.engine import InvalidInput
from ctxeng.engine.hashing import sha256_json

from .builders import excluded_record, item, policy, reasons, request, run, sha


def acq(rid: str, outcome: str = "retrieved", **fields) -> dict:
    return {"source_request_id": rid, "source": {"type": "repository", "id": "pi"}, "outcome": outcome, **fields}


def test_an_item_from_a_retrieved_source_request_enters():
    r = run(request(extra=[item("ev", source_request_id="sr-1")], source_acquisition=[acq("sr-1")]))
    assert "ev" in r.manifest.included_ids()


@pytest.mark.parametrize("outcome", ["not_retrieved", "retrieval_failed"])
def test_an_item_naming_a_source_request_that_produced_nothing_never_enters(outcome):
    r = run(request(extra=[item("ev", source_request_id="sr-1")], source_acquisition=[acq("sr-1", outcome)]))
    rec = excluded_record(r, "ev")
    assert rec.reason == "hard_gate_rejected" and rec.hard_gate == "structural_integrity"
    assert f"was {outcome}" in rec.detail


def test_an_item_naming_an_unknown_source_request_never_enters():
    rec = excluded_record(run(request(extra=[item("ev", source_request_id="sr-9")])), "ev")
    assert rec.reason == "hard_gate_rejected" and "names no source request" in rec.detail


def test_a_result_digest_must_match_the_one_item_it_produced():
    good = item("ev", content="the result")
    ok = run(request(extra=[dict(good, source_request_id="sr-1")], source_acquisition=[acq("sr-1", result_digest=sha("the result"))]))
    assert "ev" in ok.manifest.included_ids()
    bad = run(request(extra=[dict(good, source_request_id="sr-1")], source_acquisition=[acq("sr-1", result_digest=sha("other"))]))
    assert "recorded result_digest" in excluded_record(bad, "ev").detail


def test_a_result_digest_over_several_items_is_the_digest_of_their_sorted_hashes():
    a, b = item("a", content="part a", source_request_id="sr-1"), item("b", content="part b", source_request_id="sr-1")
    digest = sha256_json(sorted([sha("part a"), sha("part b")]))
    r = run(request(extra=[a, b], source_acquisition=[acq("sr-1", result_digest=digest)]))
    assert {"a", "b"} <= set(r.manifest.included_ids())
    smuggled = item("c", content="smuggled", source_request_id="sr-1")
    r = run(request(extra=[a, b, smuggled], source_acquisition=[acq("sr-1", result_digest=digest)]))
    assert reasons(r) == {"a": "hard_gate_rejected", "b": "hard_gate_rejected", "c": "hard_gate_rejected"}


def test_a_not_retrieved_source_is_an_acquisition_outcome_not_an_exclusion():
    r = run(request(source_acquisition=[acq("sr-1", "not_retrieved")]))
    assert r.manifest.source_acquisition[0].outcome == "not_retrieved"
    assert "sr-1" not in r.manifest.excluded_reasons()


def trace(item_id: str = "tr-1", **fields) -> dict:
    """A trace that claims no authority: it passes the trust gate and meets the retrieval rule."""
    return item(item_id, "trace", f"trace {item_id}: read_source pi", trust="external_evidence", intended_role="untrusted_data", **fields)


def test_a_trace_is_a_diagnostic_source_and_loses_ranking_at_a_drafting_step():
    rec = excluded_record(run(request(extra=[trace()])), "tr-1")
    assert rec.reason == "ranking_lost" and "retrieval.diagnostic_sources" in rec.detail


def test_a_trace_enters_at_a_stage_the_policy_lists_as_diagnostic():
    pol = policy(retrieval={"diagnostic_stages": ["debugging"]})
    assert "tr-1" in run(request(extra=[trace()], stage="debugging"), pol).manifest.included_ids()
    assert "tr-1" in run(request(extra=[trace()], stage="drafting"), pol).manifest.excluded_reasons()


def test_a_trace_enters_when_the_request_asks_for_it_by_id():
    r = run(request(extra=[trace("tr-1"), trace("tr-2")], diagnostic_item_ids=["tr-2"]))
    assert "tr-2" in r.manifest.included_ids() and reasons(r)["tr-1"] == "ranking_lost"


def test_a_trace_claiming_trust_its_source_lacks_fails_the_trust_gate_first():
    t = item("tr-1", "trace", "trace", trust="trusted_state", intended_role="state")
    rec = excluded_record(run(request(extra=[t], diagnostic_item_ids=["tr-1"])), "tr-1")
    assert rec.reason == "hard_gate_rejected" and rec.hard_gate == "trust_role_compatibility"


def test_asking_for_an_unknown_item_is_refused_by_path():
    with pytest.raises(InvalidInput) as exc:
        run(request(diagnostic_item_ids=["nope"]))
    assert exc.value.errors == ["diagnostic_item_ids[0]: no candidate 'nope'"]


def test_a_source_category_the_policy_lists_nowhere_is_not_a_source():
    pol = policy(retrieval={"default_sources": ["repository", "artifacts"]})
    rec = excluded_record(run(request(extra=[item("doc", "official_document")]), pol), "doc")
    assert rec.reason == "ranking_lost" and "official_docs is not among" in rec.detail


def test_governed_memory_enters_only_in_the_roles_the_policy_allows():
    as_state = item("mem", "memory_object", "prefers short answers", intended_role="state")
    assert "mem" in run(request(extra=[as_state])).manifest.included_ids()
    as_control = item("mem", "memory_object", "prefers short answers", intended_role="control")
    assert reasons(run(request(extra=[as_control])))["mem"] == "hard_gate_rejected"
    pol = policy()
    pol["role_limits"]["governed_memory_candidate"] = ["untrusted_data"]
    assert reasons(run(request(extra=[as_state]), pol))["mem"] == "hard_gate_rejected"


def test_retrieval_source_lists_may_not_overlap():
    with pytest.raises(InvalidInput) as exc:
        run(request(), policy(retrieval={"default_sources": ["trace"], "diagnostic_sources": ["trace"]}))
    assert exc.value.errors == ["retrieval.diagnostic_sources[0]: 'trace' is already in default_sources"]
