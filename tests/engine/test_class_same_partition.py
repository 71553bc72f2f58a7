"""Bug class 2 (issue 54): priority rules, with competitors in the same partition and in different ones.

Every earlier priority test put its two items in two partitions, where the partitions' growth
order (DESIGN §5: `first` grows last) decides before any rank does; a bug in the rank order inside
one partition passed them all. Here two items of the same size compete for one partition's room
(so the size never decides), the one the rule prefers is listed second and carries the id that
sorts last (so neither the candidate order nor the item_id tie-break can pick it by accident),
and the same pair is then put in two partitions, where both fit.

The rules (ctxeng.engine.ranking, ctxeng.engine.budget): the policy's ranking factors in the order
listed, `item_id` the last tie-break; pinned items ahead of all; each partition keeps the
higher-ranked of what competes for its room (`reduce_candidates`, `complete_pair_only`, `first`).
"""

from __future__ import annotations

import pytest

from tests.engine.builders import item, reasons, request, run, tool_call, tool_result
from tests.engine.test_eviction import budget_policy, partitions, words

# words(300) costs 629 tokens as evidence (test_eviction's measured figures): two never fit 700.
ROOM_FOR_ONE = 700


def outcome(result, *ids: str) -> dict[str, str]:
    """item_id -> "kept" or its exclusion reason."""
    kept = result.manifest.included_ids()
    why = reasons(result)
    return {i: "kept" if i in kept else why[i] for i in ids}


def evidence_pair(**first_fields):
    """Two evidence items of the same size: `ev-b` (relevance 0.9) outranks `ev-a` (0.2), and is listed second."""
    low = item("ev-a", content=words(300, "p"), relevance=0.2, **first_fields)
    high = item("ev-b", content=words(300, "q"), relevance=0.9)
    return low, high


def test_two_items_of_one_reduce_candidates_partition_keep_the_higher_ranked_whatever_the_order_or_ids():
    pol = budget_policy(16000, partitions(direct_evidence={"minimum": 0, "maximum": ROOM_FOR_ONE}))
    low, high = evidence_pair()
    r = run(request(extra=[low, high]), pol)
    assert outcome(r, "ev-a", "ev-b") == {"ev-a": "budget_evicted", "ev-b": "kept"}


def test_the_same_two_items_in_two_partitions_with_room_each_are_both_kept():
    parts = partitions(direct_evidence={"minimum": 0, "maximum": ROOM_FOR_ONE, "kinds": ["evidence"]})
    parts["docs"] = {"minimum": 0, "maximum": ROOM_FOR_ONE, "eviction": "reduce_candidates", "kinds": ["official_document"]}
    low = item("ev-a", "official_document", words(300, "p"), relevance=0.2)
    high = item("ev-b", content=words(300, "q"), relevance=0.9)
    r = run(request(extra=[low, high]), budget_policy(16000, parts))
    assert outcome(r, "ev-a", "ev-b") == {"ev-a": "kept", "ev-b": "kept"}


def test_when_the_lower_ranked_item_filled_the_minimum_first_the_higher_ranked_one_displaces_it():
    # Pass 1 fills the 300 minimum with nothing (each item is 629); both wait; the higher one is
    # admitted in pass 2 and the lower one finds no room. With a minimum of 629 the lower-ranked
    # item could only be admitted first if the walk were not in rank order.
    pol = budget_policy(16000, partitions(direct_evidence={"minimum": 640, "maximum": ROOM_FOR_ONE}))
    low, high = evidence_pair()
    r = run(request(extra=[low, high]), pol)
    assert outcome(r, "ev-a", "ev-b") == {"ev-a": "budget_evicted", "ev-b": "kept"}


def test_a_tie_in_every_factor_inside_one_partition_keeps_the_item_whose_id_sorts_first():
    pol = budget_policy(16000, partitions(direct_evidence={"minimum": 0, "maximum": ROOM_FOR_ONE}))
    second = item("ev-b", content=words(300, "p"), relevance=0.5)
    first = item("ev-a", content=words(300, "q"), relevance=0.5)
    r = run(request(extra=[second, first]), pol)
    assert r.manifest.excluded[0].tokens == next(i for i in r.manifest.included if i.item_id == "ev-a").tokens
    assert outcome(r, "ev-a", "ev-b") == {"ev-a": "kept", "ev-b": "budget_evicted"}


@pytest.mark.parametrize(
    "ranking, kept",
    [
        # Relevance listed first: the official document (0.9) outranks the evidence (0.5).
        (["current_decision_relevance", "evidence_priority", "stage_relevance", "retrieval_cost"], "doc-z"),
        # Evidence priority listed first: evidence (kind weight 1.0) outranks the document (0.9).
        (["evidence_priority", "current_decision_relevance", "stage_relevance", "retrieval_cost"], "ev-a"),
    ],
)
def test_inside_one_partition_the_first_listed_ranking_factor_decides_which_item_keeps_the_room(ranking, kept):
    pol = budget_policy(16000, partitions(direct_evidence={"minimum": 0, "maximum": ROOM_FOR_ONE}))
    pol["admission"]["ranking"] = ranking
    ev = item("ev-a", content=words(300, "p"), relevance=0.5)
    doc = item("doc-z", "official_document", words(300, "q"), relevance=0.9)
    r = run(request(extra=[ev, doc]), pol)
    lost = ({"ev-a", "doc-z"} - {kept}).pop()
    assert outcome(r, "ev-a", "doc-z") == {kept: "kept", lost: "budget_evicted"}


def test_a_required_item_keeps_the_room_of_one_partition_ahead_of_a_more_relevant_one():
    pol = budget_policy(16000, partitions(direct_evidence={"minimum": 0, "maximum": ROOM_FOR_ONE}))
    required = item("ev-z", content=words(300, "p"), relevance=0.1, required=True)
    relevant = item("ev-a", content=words(300, "q"), relevance=1.0)
    r = run(request(extra=[relevant, required]), pol)
    assert outcome(r, "ev-a", "ev-z") == {"ev-a": "budget_evicted", "ev-z": "kept"}


@pytest.mark.parametrize("minimum", [0, ROOM_FOR_ONE])  # filled in pass 2 (growth), or in pass 1 (the minimum)
def test_two_background_items_competing_for_the_first_partition_keep_the_higher_ranked(minimum):
    # `first` displaces nothing, so the walk's order alone decides which one holds the room.
    pol = budget_policy(16000, partitions(background={"minimum": minimum, "maximum": ROOM_FOR_ONE}))
    low = item("note-a", "editable_project_file", words(300, "p"), kind="background", relevance=0.2)
    high = item("note-b", "editable_project_file", words(300, "q"), kind="background", relevance=0.9)
    r = run(request(extra=[low, high]), pol)
    assert outcome(r, "note-a", "note-b") == {"note-a": "budget_evicted", "note-b": "kept"}


def test_two_tool_pairs_competing_for_one_complete_pair_only_partition_keep_the_higher_ranked_pair():
    pol = budget_policy(16000, partitions(recent_tool_pairs={"maximum": ROOM_FOR_ONE}))
    low = tool_result("res-a", "c1", words(300, "p"), relevance=0.2)
    high = tool_result("res-b", "c2", words(300, "q"), relevance=0.9)
    r = run(request(extra=[low, high], tool_calls=[tool_call("c1", "res-a"), tool_call("c2", "res-b")]), pol)
    assert outcome(r, "res-a", "res-b") == {"res-a": "budget_evicted", "res-b": "kept"}
    pairs = {p.call_id: p.decision for p in r.manifest.tool_pairs}
    assert pairs["c1"] == "excluded" and pairs["c2"] != "excluded"


@pytest.mark.parametrize("borrowing", ["preserve_all_minimums", "lend_unused_room"])
def test_under_either_borrowing_rule_a_higher_ranked_pair_displaces_a_lower_ranked_one_admitted_for_the_minimum(borrowing):
    # The minimum (250) holds the small low-ranked pair only; the window (usable input 850) has no
    # room for both. Under lend_unused_room a higher-ranked pair displaces lower-ranked ones, whole
    # (budget docstring, complete_pair_only); under preserve_all_minimums a pair admitted for the
    # minimum keeps its room.
    pol = budget_policy(3850, partitions(recent_tool_pairs={"minimum": 250, "maximum": ROOM_FOR_ONE}))
    pol["budget"]["borrowing"] = borrowing
    small = tool_result("res-a", "c1", words(60, "p"), relevance=0.2)
    big = tool_result("res-b", "c2", words(300, "q"), relevance=0.9)
    r = run(request(extra=[small, big], tool_calls=[tool_call("c1", "res-a"), tool_call("c2", "res-b")],
                    model={"provider": "openai", "name": "gpt-4", "context_limit": 3850}), pol)
    if borrowing == "lend_unused_room":
        assert outcome(r, "res-a", "res-b") == {"res-a": "budget_evicted", "res-b": "kept"}
    else:
        assert outcome(r, "res-a", "res-b") == {"res-a": "kept", "res-b": "budget_evicted"}


def test_across_partitions_the_growth_order_decides_before_rank_background_yields_to_lower_ranked_evidence():
    # The other side of the rule: in two partitions competing for the window (not for one
    # partition's room), `first` grows last, so the more relevant note is the one evicted.
    pol = budget_policy(4200, partitions(control={"minimum": 0}, state={"minimum": 0}))
    pol["resident"]["include"] = []
    note = item("note-b", "editable_project_file", words(300, "q"), relevance=1.0)
    ev = item("ev-a", content=words(300, "p"), relevance=0.1)
    r = run(request([item("system", "system_policy", "rules"), ev, note],
                    model={"provider": "openai", "name": "gpt-4", "context_limit": 4200}), pol)
    assert outcome(r, "ev-a", "note-b") == {"ev-a": "kept", "note-b": "budget_evicted"}
