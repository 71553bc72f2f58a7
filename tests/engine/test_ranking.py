"""Ranking (stage 3): only eligible items compete, pinned items lead, losers are ranking_lost."""

from __future__ import annotations

from .builders import excluded_record, item, policy, reasons, request, run


def _included(r):
    return {i.item_id: i for i in r.manifest.included}


def test_a_gate_failing_item_with_perfect_relevance_stays_excluded_by_its_gate():
    r = run(request(extra=[item("expired-but-relevant", "official_document", freshness="expired", relevance=1.0)]))
    rec = excluded_record(r, "expired-but-relevant")
    assert rec.reason == "expired" and rec.hard_gate == "freshness"


def test_an_item_serving_another_stage_loses_ranking():
    r = run(request(extra=[item("review-only", stages=["reviewing"])]))
    assert reasons(r)["review-only"] == "ranking_lost"


def test_an_item_below_the_relevance_floor_loses_ranking():
    pol = policy()
    pol["admission"]["min_relevance"] = 0.5
    r = run(request(extra=[item("weak", relevance=0.2), item("strong", relevance=0.8)]), pol)
    assert reasons(r)["weak"] == "ranking_lost"
    assert "strong" in _included(r)


def test_a_duplicate_of_a_higher_ranked_item_loses_ranking():
    r = run(request(extra=[item("copy-a", content="same text", relevance=0.9), item("copy-b", content="same text", relevance=0.4)]))
    assert reasons(r) == {"copy-b": "ranking_lost"}
    assert "copy-a" in excluded_record(r, "copy-b").detail


def test_pinned_items_rank_ahead_of_any_relevance():
    r = run(request(extra=[item("hot", relevance=1.0)]))
    ranks = {i.item_id: i.rank for i in r.manifest.included}
    assert max(ranks[k] for k in ("system", "goal", "constraints", "stage", "open")) < ranks["hot"]


def test_higher_relevance_ranks_first_and_ties_break_by_item_id():
    r = run(request(extra=[item("b", relevance=0.5), item("a", relevance=0.5), item("c", relevance=0.9)]))
    ranks = {i.item_id: i.rank for i in r.manifest.included}
    assert ranks["c"] < ranks["a"] < ranks["b"]


def test_pinned_and_retrieved_items_record_their_load_mode_and_admission_reason():
    pol = policy(disclosure={"mode": "index_then_detail", "indexes": ["repository_tree"]})
    r = run(request(extra=[item("ev"), item("tree", kind="repository_tree")]), pol)
    inc = _included(r)
    assert inc["goal"].load_mode == "resident" and inc["goal"].admission_reason == "resident_goal"
    assert inc["ev"].load_mode == "retrieve"
    assert inc["tree"].load_mode == "disclose"


def test_an_item_cannot_ask_to_be_resident_unless_the_policy_pins_it():
    r = run(request(extra=[item("ev", load_mode="resident")]))
    assert _included(r)["ev"].load_mode == "retrieve"
