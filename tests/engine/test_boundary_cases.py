"""Boundary and absent-value cases the random generators rarely build (issue 31), pinned.

Each is the smallest request that sits exactly on an edge the engine decides: an item whose
rendered tokens equal its partition's minimum (measured by the engine's own count on a first
assembly, then used as the minimum), and two tool results with identical content.
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
