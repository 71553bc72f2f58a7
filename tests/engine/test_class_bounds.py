"""Bug class 5 (issue 54), engine side: every inclusive/exclusive bound, with data on it and one step
to each side.

A test whose data sit well inside or well outside a bound passes whether the code says `<` or
`<=`; each test here puts one case exactly on the bound and one on each side of it, and states
which reading the rule documents:

- line ranges (`lines: "120-160"`, ctxeng.engine.versions): both ends inclusive; a reading covers
  another when its range holds every line of the other's, ends included.
- `admission.min_relevance`: an item exactly at the floor is kept (below it: ranking_lost).
- a partition's `maximum` and `minimum` (ctxeng.engine.budget): an item that brings the partition
  exactly to its maximum fits; one token more does not.
- `source_limits.<type>.max_tokens`: an item *over* it is reduced; one of exactly max_tokens is not.

Where a bound is in tokens, the item's size is measured first (its count in a run with room to
spare) and the bound set from it: the oracle is then the rule's comparison, not a figure read
back from the decision under test.
"""

from __future__ import annotations

import copy

import pytest

from ctxeng.engine.versions import parse_lines

from .builders import item, policy, reasons, request, run
from .test_class_two_branches import PATH
from .test_eviction import budget_policy, partitions, words
from .test_source_limits import code, code_policy
from .test_versions import assemble, call, excluded, numbered, reading

# --------------------------------------------------------------------------- line ranges


@pytest.mark.parametrize(
    "value, ranges",
    [
        ("120-160", ((120, 160),)),
        ("160-160", ((160, 160),)),  # a range of one line: both ends are that line
        ("160", ((160, 160),)),
        ("120-", ((120, None),)),
        ("1-20,40-50", ((1, 20), (40, 50))),
        ("1", ((1, 1),)),  # the first line is line 1
        ("0-5", None),  # there is no line 0
        ("161-160", None),  # an end before its start
    ],
)
def test_a_line_range_is_read_with_both_ends_inclusive_from_line_one(value, ranges):
    assert parse_lines(value) == ranges


def covered(earlier_lines: str, later_lines: str) -> str | None:
    """The earlier reading's exclusion reason when a later whole-range reading of lines 120-160 follows it."""
    first, last = (int(x) for x in earlier_lines.split("-"))
    wide = numbered(120, *(f"line {n}" for n in range(120, 161)))
    cands = [
        reading("narrow", "c1", "\n".join(f"line {n}" for n in range(first, last + 1)) + "\n", path="src/a.py", lines=earlier_lines),
        reading("wide", "c2", wide, path="src/a.py", lines=later_lines),
    ]
    result = assemble(cands, [call("c1", "narrow", 2), call("c2", "wide", 4)])
    return excluded(result).get("narrow", {}).get("reason")


@pytest.mark.parametrize(
    "earlier, reason",
    [
        ("150-160", "duplicate"),  # ends on the later range's last line: covered
        ("120-130", "duplicate"),  # starts on its first line: covered
        ("120-160", "duplicate"),  # the same range
        ("151-161", None),  # one line past its end: not covered, kept
        ("119-129", None),  # one line before its start: not covered, kept
    ],
)
def test_a_later_reading_covers_an_earlier_one_whose_lines_lie_within_its_range_ends_included(earlier, reason):
    assert covered(earlier, "120-160") == reason


def test_an_open_ended_range_covers_a_reading_on_its_first_line_and_not_one_before_it():
    # The later reading is not line-numbered, so only its stated range says where its lines are.
    def earlier_reason(line: int) -> str | None:
        cands = [
            reading("first", "c1", numbered(line, "backoff = 2"), **{**PATH, "lines": str(line)}),
            reading("second", "c2", "backoff = 2\nretries = 3\n", **{**PATH, "lines": "120-"}),
        ]
        return excluded(assemble(cands, [call("c1", "first", 2), call("c2", "second", 4)])).get("first", {}).get("reason")

    assert earlier_reason(120) == "duplicate"
    assert earlier_reason(119) is None


# --------------------------------------------------------------------------- relevance floor


@pytest.mark.parametrize("relevance, kept", [(0.29, False), (0.3, True), (0.31, True)])
def test_an_item_exactly_at_min_relevance_is_kept_and_one_just_below_loses_ranking(relevance, kept):
    doc = item("doc", "official_document", "Retries back off.", relevance=relevance)
    r = run(request(extra=[doc]), policy(admission={**policy()["admission"], "min_relevance": 0.3}))
    assert ("doc" in r.manifest.included_ids()) is kept
    if not kept:
        assert reasons(r)["doc"] == "ranking_lost"


# --------------------------------------------------------------------------- partition maximum and minimum


def docs_policy(**docs) -> dict:
    """The test policy with one more partition holding official documents only."""
    parts = partitions(direct_evidence={"kinds": ["evidence"]})
    parts["docs"] = {"minimum": 0, "eviction": "reduce_candidates", "kinds": ["official_document"], **docs}
    return budget_policy(16000, parts)


DOC = item("doc", "official_document", words(120, "d"))


def doc_tokens() -> int:
    r = run(request(extra=[DOC]), docs_policy(maximum=5000))
    return next(i for i in r.manifest.included if i.item_id == "doc").tokens


@pytest.mark.parametrize("slack, kept", [(-1, False), (0, True), (1, True)])
def test_an_item_that_fills_its_partition_exactly_to_its_maximum_fits_and_one_token_more_does_not(slack, kept):
    n = doc_tokens()
    r = run(request(extra=[DOC]), docs_policy(maximum=n + slack))
    assert ("doc" in r.manifest.included_ids()) is kept
    if not kept:
        assert reasons(r)["doc"] == "budget_evicted"
    assert r.manifest.budget.partitions["docs"].used <= n + slack


@pytest.mark.parametrize("slack, above_minimum", [(-1, 1), (0, 0), (1, 0)])
def test_a_minimum_exactly_the_items_size_holds_it_with_nothing_above_the_minimum(slack, above_minimum):
    n = doc_tokens()
    r = run(request(extra=[DOC]), docs_policy(minimum=n + slack, maximum=5000))
    usage = r.manifest.budget.partitions["docs"]
    assert (usage.used, usage.above_minimum) == (n, above_minimum)


# --------------------------------------------------------------------------- source limit max_tokens


EXCERPTED = item("ev", content=code(), source_ref={"repo": "pi", "commit": "c0ffee", "path": "src/types.ts", "lines": "149-200"},
                 claim="how tool call pairing works")


def reduced(max_tokens: int) -> bool:
    r = run(request(extra=[copy.deepcopy(EXCERPTED)]), code_policy(max_tokens))
    return any(t.output_item_id == "ev" and t.type == "excerpt" for t in r.manifest.transforms)


def test_an_item_of_exactly_max_tokens_is_not_reduced_and_one_token_over_is():
    whole = run(request(extra=[copy.deepcopy(EXCERPTED)]), code_policy(100_000))
    n = next(i for i in whole.manifest.included if i.item_id == "ev").tokens
    assert (reduced(n - 1), reduced(n), reduced(n + 1)) == (True, False, False)


@pytest.mark.parametrize("slack, kept", [(-1, "plan"), (0, "doc"), (1, "doc")])
def test_a_minimum_exactly_the_items_size_keeps_its_room_when_another_partition_grows_first(slack, kept):
    # Under lend_unused_room nothing reserves an unused minimum in pass 2, and state grows before
    # evidence: the document keeps the window only if pass 1 (the minimum, `used + n <= minimum`)
    # took it. The window (3625 context) holds the document or the plan, not both.
    n = doc_tokens()
    pol = docs_policy(minimum=n + slack, maximum=5000)
    pol["budget"].update(borrowing="lend_unused_room", model_context_limit=3625)
    for name in ("control", "state", "recent_tool_pairs"):
        pol["budget"]["partitions"][name]["minimum"] = 0
    plan = item("plan", "runtime_state", words(150, "s"), kind="research_plan", relevance=0.9)
    r = run(request(extra=[DOC, plan], model={"provider": "openai", "name": "gpt-4", "context_limit": 3625}), pol)
    lost = ({"doc", "plan"} - {kept}).pop()
    assert kept in r.manifest.included_ids()
    assert reasons(r)[lost] == "budget_evicted"
