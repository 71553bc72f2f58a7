"""Boundary and absent-value cases the random generators rarely build (issue 31), pinned.

Each is the smallest request that sits exactly on an edge the engine decides: an item whose
rendered tokens equal its partition's minimum (measured by the engine's own count on a first
assembly, then used as the minimum), a partition left below its own minimum under
`preserve_all_minimums`, an item naming a required object with no revision at all, and two tool
results with identical content. Each was checked against the bug it pins, planted (docs/mutation.md).
"""

from __future__ import annotations

import copy

from ctxeng.engine import assemble, parse_policy, parse_request

from .builders import CREATED_AT, base_items, item, policy, request, tool_call, tool_result


def _assemble(req, pol):
    return assemble(parse_request(req), parse_policy(pol), created_at=CREATED_AT)


def test_two_tool_results_with_identical_content_are_both_kept_with_their_calls():
    """Identical text from two calls is two results, not a duplicate: dropping either would leave
    a call without its result."""
    same = "identical output of two different calls"
    calls = [tool_call("call-a", "result-a"), tool_call("call-b", "result-b", arguments={"path": "src/b.ts"})]
    results = [tool_result("result-a", "call-a", same), tool_result("result-b", "call-b", same)]
    r = _assemble(request(base_items() + results, tool_calls=calls), policy())
    included = {rec.item_id for rec in r.manifest.included}
    assert {"result-a", "result-b"} <= included, r.manifest.excluded_reasons()
    assert r.serialized_input is not None
    text = str(r.serialized_input)
    assert "call-a" in text and "call-b" in text


def test_an_item_whose_tokens_equal_its_partition_minimum_exactly_is_kept_by_the_minimum_pass():
    """Measured, then pinned on the edge: the evidence partition's minimum is the item's own token
    count (the engine's count on a first assembly), every other minimum is 0, and the usable input
    is exactly that minimum plus the framing. Only the minimum pass can keep the item: once it is
    passed over, its partition's minimum is unused, and under `lend_unused_minimums` the control
    partition (which grows first) borrows it."""
    evidence = item("ev-edge", "repository_source", "evidence line " * 120, kind="evidence", required=True)
    req = request(base_items() + [evidence])
    tokens = next(rec.tokens for rec in _assemble(req, policy()).manifest.included if rec.item_id == "ev-edge")
    pol = copy.deepcopy(policy())
    for part in pol["budget"]["partitions"].values():
        part["minimum"] = 0
        part.pop("maximum", None)
    pol["budget"]["partitions"]["direct_evidence"]["minimum"] = tokens
    pol["budget"]["borrowing"] = "lend_unused_minimums"
    budget = pol["budget"]
    framing = _assemble(req, pol).manifest.budget.framing_reserved
    budget["model_context_limit"] = (tokens + framing + budget["response_reserve"] + budget["protocol_overhead"]
                                     + budget["safety_margin"])
    m = _assemble(req, pol).manifest
    assert m.budget.usable_input - m.budget.framing_reserved == tokens
    assert "ev-edge" in {rec.item_id for rec in m.included}, m.excluded_reasons()
    # One token less of minimum: the item no longer fits its guarantee and is not kept by it.
    pol["budget"]["partitions"]["direct_evidence"]["minimum"] = tokens - 1
    assert "ev-edge" not in {rec.item_id for rec in _assemble(req, pol).manifest.included}


def test_an_item_naming_a_required_object_with_no_revision_at_all_is_stale():
    """Absent, not wrong: the item names `plan-7`, which the request requires at revision 3, and
    carries no revision anywhere (no `revision`, no `commit`, no source_ref revision). A revision
    nobody states is not the one required."""
    plan = item("plan-7-unknown", "editable_project_file", "plan text", kind="research_plan",
                source_ref={"object_id": "plan-7"})
    assert plan.get("revision") is None
    req = request(base_items() + [plan], required_revisions={"plan-7": 3})
    m = _assemble(req, policy()).manifest
    reasons = m.excluded_reasons()
    assert reasons.get("plan-7-unknown") == "stale_revision", reasons


def test_a_partition_below_its_own_minimum_grows_into_that_minimum_under_preserve_all_minimums():
    """The evidence item is one token larger than its partition's minimum, so the minimum pass
    passes it over and its partition is left below its own minimum; the usable input is exactly
    the item. Growing, the partition may take its own unused minimum: only the others' minimums are
    reserved against it."""
    evidence = item("ev-over", "repository_source", "evidence line " * 120, kind="evidence", required=True)
    req = request(base_items() + [evidence])
    tokens = next(rec.tokens for rec in _assemble(req, policy()).manifest.included if rec.item_id == "ev-over")
    pol = copy.deepcopy(policy())
    for part in pol["budget"]["partitions"].values():
        part["minimum"] = 0
        part.pop("maximum", None)
    pol["budget"]["partitions"]["direct_evidence"]["minimum"] = tokens - 1
    pol["budget"]["borrowing"] = "preserve_all_minimums"
    budget = pol["budget"]
    framing = _assemble(req, pol).manifest.budget.framing_reserved
    budget["model_context_limit"] = (tokens + framing + budget["response_reserve"] + budget["protocol_overhead"]
                                     + budget["safety_margin"])
    m = _assemble(req, pol).manifest
    assert m.budget.usable_input - m.budget.framing_reserved == tokens
    assert "ev-over" in {rec.item_id for rec in m.included}, m.excluded_reasons()
