"""The budget's arithmetic (budget.py) on hand-sized numbers: what fits, what is reserved, who borrowed.

The pipeline tests see the budget through fences and tokenizer counts, so an off-by-one at an exact
fit, or a reserve counted for the wrong partition, hides in the slack. Here the running allocation
is driven with round numbers, and each expected value is worked out in the comment beside it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ctxeng.engine import parse_policy
from ctxeng.engine.budget import (
    Allocation,
    Unit,
    _Budget,
    _drop_lowest_ranked_first,
    borrowed_by_partition,
    growth_order,
    pair_partition,
    partition_of_kind,
    usable_budget,
)

from .builders import policy


def parsed(partitions: dict, borrowing: str = "preserve_all_minimums", limit: int = 16000):
    pol = policy()
    pol["budget"]["partitions"] = partitions
    pol["budget"]["borrowing"] = borrowing
    pol["budget"]["model_context_limit"] = limit
    return parse_policy(pol)


PARTS = {
    "a": {"minimum": 100, "maximum": 300, "eviction": "reduce_candidates", "kinds": ["evidence"]},
    "b": {"minimum": 200, "eviction": "structured_summary", "kinds": ["research_plan"]},
    "c": {"eviction": "first", "kinds": ["background"]},
}


def running(partitions: dict = PARTS, *, usable: int = 1000, borrowing: str = "preserve_all_minimums", used: dict | None = None) -> _Budget:
    pol = parsed(partitions, borrowing)
    alloc = Allocation(usable=usable, context_limit=usable, used={n: 0 for n in partitions})
    b = _Budget(SimpleNamespace(policy=pol), alloc)
    for name, n in (used or {}).items():
        b.take(name, n)
    return b


def test_an_item_fits_exactly_up_to_its_partitions_maximum_and_not_one_token_more():
    b = running(used={"a": 250})
    assert b.fits("a", 50) and not b.fits("a", 51)  # 250 + 50 = 300, the maximum
    assert b.room("a") == 50
    assert b.fits("a", 60, freed=10) and not b.fits("a", 61, freed=10)


def test_preserving_minimums_keeps_back_what_other_partitions_have_not_yet_used():
    # usable 1000; b's unused minimum (200) is kept back for it, so c may use 800.
    b = running(used={"a": 100})
    assert b.reserved_for_others("c") == 200
    assert b.fits("c", 700) and not b.fits("c", 701)  # 100 + 700 = 800 = 1000 - 200
    assert b.room("c") == 700
    b.take("b", 150)  # b has used 150 of its 200: only 50 is kept back now
    assert b.reserved_for_others("c") == 50
    # a's own minimum is not reserved against a; a partition over its minimum reserves nothing.
    b.take("b", 100)
    assert b.reserved_for_others("a") == 0 and b.reserved_for_others("c") == 0


def test_lending_unused_minimums_keeps_nothing_back():
    b = running(borrowing="lend_unused_minimums", used={"a": 100})
    assert b.reserved_for_others("c") == 0
    assert b.fits("c", 900) and not b.fits("c", 901)


def test_giving_back_frees_the_partition_and_the_whole_budget():
    b = running(used={"a": 300, "c": 500})
    b.give_back("a", 120)
    assert b.alloc.used["a"] == 180 and b.alloc.total == 680
    assert b.fits("a", 120) and not b.fits("a", 121)


def test_why_an_item_did_not_fit_names_the_partition_maximum_or_the_usable_budget():
    b = running(used={"a": 250, "c": 600})
    assert b.why_not("a", 60) == "partition 'a' full: 250 used of maximum 300, item needs 60"
    assert b.why_not("c", 300) == "usable budget exhausted: 850 of 1000 used, item needs 300 (unused minimums of other partitions are preserved)"
    lend = running(borrowing="lend_unused_minimums", used={"c": 900})
    assert lend.why_not("b", 200) == "usable budget exhausted: 900 of 1000 used, item needs 200"


def test_the_usable_input_is_the_smaller_context_less_reserve_overhead_and_margin():
    pol = parsed(PARTS, limit=16000)  # builders' reserves: 2000 + 500 + 500
    asm = SimpleNamespace(policy=pol, request=SimpleNamespace(model=SimpleNamespace(context_limit=12000)))
    assert usable_budget(asm) == (12000 - 3000, 12000)
    asm.request.model.context_limit = 20000
    assert usable_budget(asm) == (16000 - 3000, 16000)


def test_a_kind_no_partition_lists_goes_to_the_first_eviction_partition_else_the_last():
    asm = SimpleNamespace(policy=parsed(PARTS))
    assert partition_of_kind(asm, "evidence") == "a"
    assert partition_of_kind(asm, "memory") == "c"
    no_first = {k: v for k, v in PARTS.items() if k != "c"}
    assert partition_of_kind(SimpleNamespace(policy=parsed(no_first)), "memory") == "b"


def test_tool_pairs_go_where_tool_result_is_listed_before_tool_call():
    parts = {
        "calls": {"eviction": "complete_pair_only", "kinds": ["tool_call"]},
        "results": {"eviction": "complete_pair_only", "kinds": ["tool_result"]},
        "c": {"eviction": "first", "kinds": ["background"]},
    }
    assert pair_partition(SimpleNamespace(policy=parsed(parts))) == "results"
    assert pair_partition(SimpleNamespace(policy=parsed(PARTS))) == "c"  # neither listed: like any unlisted kind


def test_partitions_grow_never_first_then_summaries_then_candidates_and_first_last():
    parts = {
        "bg": {"eviction": "first", "kinds": ["background"]},
        "ev": {"eviction": "reduce_candidates", "kinds": ["evidence"]},
        "st": {"eviction": "structured_summary", "kinds": ["research_plan"]},
        "ctl": {"eviction": "never", "kinds": ["instruction"]},
    }
    assert growth_order(parsed(parts).budget) == ["ctl", "st", "ev", "bg"]


@pytest.mark.parametrize(
    "used, borrowed",
    [
        # minimums 100 + 200 leave a pool of 700: growth within it is borrowed from nobody
        ({"a": 300, "b": 200, "c": 500}, {"a": 0, "b": 0, "c": 0}),
        # b grows first (structured_summary before reduce_candidates and first) and takes 500 of the pool;
        # a's 200 above its minimum take the last 200; c's 300 come from minimums others left unused
        ({"a": 300, "b": 700, "c": 300}, {"b": 0, "a": 0, "c": 300}),
        ({"a": 50, "b": 0, "c": 950}, {"a": 0, "b": 0, "c": 250}),
    ],
)
def test_borrowed_is_only_what_came_from_other_partitions_minimums(used, borrowed):
    assert borrowed_by_partition(parsed(PARTS).budget, 1000, used) == borrowed


def unit(name: str, tokens: int, rank: int, admitted: bool) -> Unit:
    u = Unit("a", tokens, item=SimpleNamespace(rank=rank, item_id=name), admitted=admitted)
    return u


def test_a_higher_ranked_item_displaces_the_lowest_ranked_ones_only_as_many_as_it_needs():
    # a holds 300 (its maximum) in three items; `top` (rank 0, 150 tokens) needs two of them gone,
    # the two lowest-ranked (ranks 3 and 2), not the best one (rank 1).
    b = running(used={"a": 300})
    best, mid, low, top = unit("best", 100, 1, True), unit("mid", 100, 2, True), unit("low", 100, 3, True), unit("top", 150, 0, False)
    _drop_lowest_ranked_first(b, "a", [best, mid, low, top])
    assert [u.item.item_id for u in (best, mid, low, top) if u.admitted] == ["best", "top"]
    assert b.alloc.used["a"] == 250 and b.alloc.total == 250


def test_an_item_never_displaces_a_better_ranked_one():
    b = running(used={"a": 300})
    kept = [unit("k1", 150, 1, True), unit("k2", 150, 2, True)]
    late = unit("late", 100, 3, False)
    _drop_lowest_ranked_first(b, "a", [*kept, late])
    assert all(u.admitted for u in kept) and not late.admitted and b.alloc.used["a"] == 300


def test_displacement_happens_only_when_the_newcomer_then_fits():
    b = running(used={"a": 300})
    kept = [unit("k1", 250, 1, True), unit("k2", 50, 5, True)]
    big = unit("big", 120, 2, False)  # removing k2 frees 50: 250 + 120 > 300, so nothing moves
    _drop_lowest_ranked_first(b, "a", [*kept, big])
    assert all(u.admitted for u in kept) and not big.admitted and b.alloc.used["a"] == 300


def test_displaced_room_is_offered_to_each_waiting_item_in_rank_order():
    # After `first` (rank 1) displaces `low` (rank 9), `second` (rank 2) may displace `first`'s
    # neighbour `mid` (rank 8); the kept list stays ordered by rank.
    b = running(used={"a": 300})
    keep, mid, low = unit("keep", 100, 0, True), unit("mid", 100, 8, True), unit("low", 100, 9, True)
    second, first = unit("second", 100, 2, False), unit("first", 100, 1, False)
    _drop_lowest_ranked_first(b, "a", [keep, mid, low, second, first])
    assert {u.item.item_id for u in (keep, mid, low, second, first) if u.admitted} == {"keep", "first", "second"}
    assert b.alloc.used["a"] == 300
