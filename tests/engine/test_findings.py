"""The negative-finding forms `findings` recognises, one documented form per case (its docstring
and README "Decisions"); the expected readings are written by hand."""

from __future__ import annotations

import pytest

from ctxeng.engine.findings import lost_findings, negative_findings, statements

SCOPE = frozenset({"README.md", "docs/", "skills/"})


@pytest.mark.parametrize(
    "text",
    [
        "no vector retrieval found in planning-with-files (searched: README.md, docs/, skills/)",
        "vector retrieval: not found (searched: README.md, docs/, skills/)",
        "vector retrieval not yet found (searched in README.md, docs/ and skills/)",
        "found nothing for vector retrieval, searched: skills/, docs/, README.md.",
        "could not find a vector store (searched: README.md, docs/, skills/)",
        "didn't locate the index (Searched: README.md, docs/, skills/)",
    ],
)
def test_each_documented_not_found_form_is_a_negative_finding_with_its_scope(text):
    (finding,) = negative_findings(text)
    assert finding.scope == SCOPE


@pytest.mark.parametrize(
    "text",
    [
        "vector retrieval does not exist (searched: README.md, docs/, skills/)",
        "there is no vector retrieval (searched: README.md, docs/, skills/)",
        "no such module found (searched: README.md, docs/, skills/)",  # an existence claim wins
        "the index is nonexistent (searched: README.md, docs/, skills/)",
    ],
)
def test_an_existence_claim_is_never_a_negative_finding(text):
    assert negative_findings(text) == []
    assert [s.existence_claim for s in statements(text)] == [True]
    assert lost_findings([], text)  # stated over a search scope, it is refused on its own


def test_a_not_found_without_a_scope_is_not_a_finding_to_carry():
    assert negative_findings("none found") == [] and lost_findings(["vector retrieval not found"], "") == []


def test_two_findings_over_one_scope_need_two_in_the_summary():
    inputs = ["a not found (searched: docs/)\nb not found (searched: docs/)"]
    assert lost_findings(inputs, "a not found (searched: docs/)")
    assert lost_findings(inputs, "a not found (searched: docs/); b not found (searched: docs/)") == []
