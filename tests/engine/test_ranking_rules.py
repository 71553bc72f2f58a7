"""Ranking (ranking.py) on hand-built requests: the factors in policy order, the floor, duplicates.

Every expected order or verdict is written from the ranking contract in the module docstring:
pinned items first, then the policy's factors in the order listed, `item_id` last; an item below
`min_relevance`, serving no current stage, or repeating a higher-ranked item's content loses
ranking. Evidence priority is recomputed here from its definition (kind weight plus a tenth of the
trust rank over 7).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ctxeng.engine.ranking import evidence_priority, relevance
from ctxeng.engine.vocabulary import Trust

from .builders import item, reasons, request, run
from .test_decisions_pinned import open_policy


def ranks(result) -> dict[str, int]:
    return {i.item_id: i.rank for i in result.manifest.included}


def ranked(*factors: str, **admission) -> dict:
    pol = open_policy()
    pol["admission"]["ranking"] = list(factors)
    pol["admission"].update(admission)
    return pol


def ev(item_id: str, content: str | None = None, **fields) -> dict:
    return item(item_id, "repository_source", content, **fields)


@pytest.mark.parametrize(
    "kind, trust, priority",
    [
        ("evidence", Trust.REPOSITORY_EVIDENCE, 1.0 + 4 / 70),
        ("official_document", Trust.EXTERNAL_EVIDENCE, 0.9 + 3 / 70),
        ("tool_result", Trust.REPOSITORY_EVIDENCE, 0.85 + 4 / 70),
        ("memory", Trust.GOVERNED_MEMORY_CANDIDATE, 0.3 + 1 / 70),
        ("trace", Trust.TRUSTED_STATE, 0.1 + 5 / 70),
        ("something_else", Trust.CONTROL_AUTHORITY, 0.5 + 7 / 70),
        ("background", None, 0.2),
    ],
)
def test_evidence_priority_is_the_kind_weight_plus_a_tenth_of_the_trust_rank(kind, trust, priority):
    c = SimpleNamespace(item=SimpleNamespace(kind=kind), trust=trust)
    assert evidence_priority(c) == pytest.approx(priority, abs=1e-6)


def test_an_item_without_relevance_counts_as_one_half():
    assert relevance(SimpleNamespace(item=SimpleNamespace(relevance=None))) == 0.5
    assert relevance(SimpleNamespace(item=SimpleNamespace(relevance=0.0))) == 0.0


def test_relevance_orders_highest_first_and_item_id_breaks_ties():
    r = run(request([ev("b", relevance=0.5), ev("a", relevance=0.5), ev("c", relevance=0.9), ev("d")]), ranked("current_decision_relevance"))
    assert ranks(r) == {"c": 1, "a": 2, "b": 3, "d": 4}  # d has no relevance: 0.5, after a and b by id


def test_the_first_listed_factor_decides_before_the_second():
    cands = [ev("cheap", "x", relevance=0.2), ev("costly", "many words " * 40, relevance=0.9)]
    assert ranks(run(request(cands), ranked("retrieval_cost", "current_decision_relevance"))) == {"cheap": 1, "costly": 2}
    assert ranks(run(request(cands), ranked("current_decision_relevance", "retrieval_cost"))) == {"costly": 1, "cheap": 2}


def test_an_item_for_every_stage_is_as_stage_relevant_as_one_for_the_current_stage():
    cands = [ev("any", relevance=0.9), ev("now", relevance=0.1, stages=["drafting"])]
    # Both serve "drafting" (no stages means every stage): equal on the factor, so relevance decides.
    assert ranks(run(request(cands), ranked("stage_relevance", "current_decision_relevance"))) == {"any": 1, "now": 2}


def test_an_item_serving_only_other_stages_loses_ranking_unless_pinned():
    cands = [ev("later", stages=["review"]), ev("req", stages=["review"], required=True)]
    r = run(request(cands), ranked("current_decision_relevance"))
    assert reasons(r) == {"later": "ranking_lost"}
    assert "req" in ranks(r)


@pytest.mark.parametrize("rel, kept", [(0.29, False), (0.3, True), (0.31, True)])
def test_the_relevance_floor_keeps_an_item_exactly_at_it(rel, kept):
    r = run(request([ev("x", relevance=rel)]), ranked("current_decision_relevance", min_relevance=0.3))
    assert ("x" in ranks(r)) is kept


def test_a_duplicate_loses_to_the_higher_ranked_copy_even_when_that_copy_is_pinned():
    same = "the same finding"
    cands = [ev("hi", same, relevance=0.9), ev("lo", same, relevance=0.1), ev("other", relevance=0.5)]
    r = run(request(cands), ranked("current_decision_relevance"))
    assert reasons(r) == {"lo": "ranking_lost"}
    assert ranks(r) == {"hi": 1, "other": 2}  # positions stay consecutive past the lost twin
    pinned = [ev("pin", same, relevance=0.1, required=True), ev("copy", same, relevance=0.9)]
    assert reasons(run(request(pinned), ranked("current_decision_relevance"))) == {"copy": "ranking_lost"}


def test_two_pinned_items_with_the_same_content_are_both_kept():
    same = "the same rule"
    cands = [ev("p1", same, required=True), ev("p2", same, required=True)]
    assert set(ranks(run(request(cands), ranked("current_decision_relevance")))) == {"p1", "p2"}
