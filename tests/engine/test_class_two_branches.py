"""Bug class 1 (issue 54): a rule with two branches, both branches tested.

Each rule here decides between two outcomes on one condition; each test pair holds everything but
that condition fixed, so a mutant that sends both cases down one branch fails one of the pair. The
oracles are written by hand from the rules (ctxeng.engine.versions' docstring, the gates' docstrings,
DESIGN "What the agent read"); `docs/mutation-classes.md` lists the bug each test was seen to catch.

- Content changing at the same revision (versions rules 2 and 4): two overlapping readings that
  differ are a *conflict* (both kept) when both state the same revision, and the earlier is *stale*
  when neither states one (no write was seen, yet the object changed in between).
- The trust ceiling (trust_role_compatibility): trust equal to the source type's default passes,
  one step above it fails.
- The scope gate: the request's scope or an ancestor passes, a sibling task fails.
- The freshness gate: `valid` passes, each other state fails with its own reason.
- Pairing: a call answered by its result is serialized with it; a call without one is answered
  by a synthetic result (policy `structure.unresolved_tool_calls`).
"""

from __future__ import annotations

import json

import pytest

from tests.engine.builders import item, policy, request, run
from tests.engine.test_versions import assemble, call, excluded, included, manifest, numbered, reading, write

PATH = {"repo": "pi", "path": "src/retry.py", "lines": "10-11"}
BEFORE = numbered(10, "backoff = 2", "retries = 3")
AFTER = numbered(10, "backoff = 2", "retries = 5")


def conflicts(result) -> list[dict]:
    return manifest(result)["conflicts"]


# --------------------------------------------------------------------------- content changing at one revision


@pytest.mark.parametrize("version", [{"commit": "abc1234"}, {"revision": 7}, {"revision": "r-7"}])
def test_two_differing_readings_at_the_same_stated_revision_are_a_conflict_and_both_are_kept(version):
    cands = [
        reading("first", "c1", BEFORE, **PATH, **version),
        reading("second", "c2", AFTER, **PATH, **version),
    ]
    result = assemble(cands, [call("c1", "first", 2), call("c2", "second", 4)])
    assert {"first", "second"} <= included(result)
    assert "first" not in excluded(result)
    [record] = conflicts(result)
    assert sorted(record["item_ids"]) == ["first", "second"]
    assert record["revision"] == str(next(iter(version.values())))
    assert "line 11 differs" in record["detail"]


def test_two_differing_readings_without_a_stated_revision_make_the_earlier_stale_and_record_no_conflict():
    cands = [
        reading("first", "c1", BEFORE, **PATH),
        reading("second", "c2", AFTER, **PATH),
    ]
    result = assemble(cands, [call("c1", "first", 2), call("c2", "second", 4)])
    record = excluded(result)["first"]
    assert record["reason"] == "stale_revision"
    assert "'second'" in record["detail"] and "line 11 differs" in record["detail"]
    assert "second" in included(result)
    assert conflicts(result) == []


def test_the_stale_branch_does_not_depend_on_which_item_id_sorts_first():
    # The later reading's id sorts before the earlier one's: "later" is the history's order.
    cands = [
        reading("zz-first", "c1", BEFORE, **PATH),
        reading("aa-second", "c2", AFTER, **PATH),
    ]
    result = assemble(cands, [call("c1", "zz-first", 2), call("c2", "aa-second", 4)])
    assert excluded(result)["zz-first"]["reason"] == "stale_revision"
    assert "aa-second" in included(result)


def test_a_conflict_is_recorded_once_whichever_reading_is_later_and_whichever_id_sorts_first():
    cands = [
        reading("zz-first", "c1", BEFORE, **PATH, commit="abc1234"),
        reading("aa-second", "c2", AFTER, **PATH, commit="abc1234"),
    ]
    result = assemble(cands, [call("c1", "zz-first", 2), call("c2", "aa-second", 4)])
    assert {"zz-first", "aa-second"} <= included(result)
    [record] = conflicts(result)
    assert record["item_ids"] == ["aa-second", "zz-first"]


def test_a_stated_revision_on_one_side_only_is_not_the_same_stated_revision_so_the_earlier_is_stale():
    cands = [
        reading("first", "c1", BEFORE, **PATH, commit="abc1234"),
        reading("second", "c2", AFTER, **PATH),
    ]
    result = assemble(cands, [call("c1", "first", 2), call("c2", "second", 4)])
    assert excluded(result)["first"]["reason"] == "stale_revision"
    assert conflicts(result) == []


def test_two_equal_readings_at_the_same_stated_revision_are_a_duplicate_not_a_conflict():
    cands = [
        reading("first", "c1", BEFORE, **PATH, commit="abc1234"),
        reading("second", "c2", numbered(9, "import time", "backoff = 2", "retries = 3"),
                repo="pi", path="src/retry.py", lines="9-11", commit="abc1234"),
    ]
    result = assemble(cands, [call("c1", "first", 2), call("c2", "second", 4)])
    assert excluded(result)["first"]["reason"] == "duplicate"
    assert conflicts(result) == []


def test_differing_readings_at_the_same_revision_in_one_turn_are_a_conflict_though_neither_is_later():
    cands = [
        reading("first", "c1", BEFORE, **PATH, revision=3),
        reading("second", "c2", AFTER, **PATH, revision=3),
    ]
    result = assemble(cands, [call("c1", "first", 2), call("c2", "second", 2)])
    assert {"first", "second"} <= included(result)
    assert len(conflicts(result)) == 1


def test_differing_readings_without_a_revision_in_one_turn_are_neither_stale_nor_a_conflict():
    cands = [
        reading("first", "c1", BEFORE, **PATH),
        reading("second", "c2", AFTER, **PATH),
    ]
    result = assemble(cands, [call("c1", "first", 2), call("c2", "second", 2)])
    assert {"first", "second"} <= included(result)
    assert conflicts(result) == []


def test_readings_at_two_numeric_revisions_in_one_turn_are_concurrent_and_in_two_turns_the_lower_is_stale():
    def earlier_reason(second_turn: int):
        cands = [
            reading("first", "c1", BEFORE, **PATH, revision=3),
            reading("second", "c2", AFTER, **PATH, revision=4),
        ]
        result = assemble(cands, [call("c1", "first", 2), call("c2", "second", second_turn)])
        assert conflicts(result) == []
        return excluded(result).get("first", {}).get("reason")

    assert earlier_reason(2) is None
    assert earlier_reason(4) == "stale_revision"


def test_a_reading_at_a_higher_numeric_revision_makes_the_earlier_stale_and_at_the_same_revision_does_not():
    def outcome(later_revision: int):
        cands = [
            reading("first", "c1", BEFORE, **PATH, revision=3),
            reading("second", "c2", BEFORE, **PATH, revision=later_revision),
        ]
        result = assemble(cands, [call("c1", "first", 2), call("c2", "second", 4)])
        return excluded(result).get("first", {}).get("reason"), conflicts(result)

    # Same revision, same lines: the later covers the earlier (a duplicate).
    assert outcome(3) == ("duplicate", [])
    # A higher revision: the object changed, whatever the lines say.
    assert outcome(4) == ("stale_revision", [])


def test_two_stated_commits_have_no_order_so_differing_readings_at_two_commits_are_both_kept_without_a_conflict():
    cands = [
        reading("first", "c1", BEFORE, **PATH, commit="abc1234"),
        reading("second", "c2", AFTER, **PATH, commit="def5678"),
    ]
    result = assemble(cands, [call("c1", "first", 2), call("c2", "second", 4)])
    assert {"first", "second"} <= included(result)
    assert conflicts(result) == []


def test_a_write_between_two_equal_readings_makes_the_first_stale_and_without_it_the_first_is_a_duplicate():
    cands = [
        reading("first", "c1", BEFORE, **PATH),
        reading("second", "c3", BEFORE, **PATH),
    ]
    calls = [call("c1", "first", 2), call("c3", "second", 6)]
    assert excluded(assemble(cands, calls))["first"]["reason"] == "duplicate"
    cands.append(write("edit", "c2", "edited", repo="pi", path="src/retry.py", lines="40-41"))
    calls.append(call("c2", "edit", 4, "edit_file", path="src/retry.py"))
    record = excluded(assemble(cands, calls))["first"]
    assert record["reason"] == "stale_revision" and "'edit'" in record["detail"]


# --------------------------------------------------------------------------- the gates' two branches


def exclusion(result, item_id: str) -> str | None:
    return result.manifest.excluded_reasons().get(item_id)


@pytest.mark.parametrize(
    "source_type, trust, role, admitted",
    [
        # At the ceiling the policy gives the source type: admitted.
        ("official_document", "external_evidence", "untrusted_data", True),
        ("editable_project_file", "project_editable", "untrusted_data", True),
        # One step above it: rejected.
        ("official_document", "repository_evidence", "untrusted_data", False),
        ("editable_project_file", "external_evidence", "untrusted_data", False),
    ],
)
def test_trust_at_the_source_types_ceiling_passes_and_one_step_above_fails(source_type, trust, role, admitted):
    doc = item("doc", source_type, "Retries back off exponentially.", trust=trust, intended_role=role)
    result = run(request(extra=[doc]))
    if admitted:
        assert exclusion(result, "doc") is None
    else:
        assert exclusion(result, "doc") == "hard_gate_rejected"
        assert "above what source type" in next(e.detail for e in result.manifest.excluded if e.item_id == "doc")


@pytest.mark.parametrize(
    "scope, admitted",
    [
        ("tenant-x/project-y/task-1", True),  # the request's own scope
        ("tenant-x/project-y", True),  # an ancestor
        ("tenant-x/project-y/task-2", False),  # a sibling task
        ("tenant-x/project-y/task-1/sub", False),  # below the request's scope
    ],
)
def test_the_requests_scope_or_an_ancestor_passes_the_scope_gate_and_a_sibling_or_descendant_fails(scope, admitted):
    doc = item("doc", "official_document", "Retries back off.", scope=scope)
    result = run(request(extra=[doc]))
    assert (exclusion(result, "doc") is None) is admitted
    if not admitted:
        assert exclusion(result, "doc") == "permission_denied"


@pytest.mark.parametrize(
    "freshness, reason",
    [("valid", None), ("expired", "expired"), ("unverifiable", "unverifiable"), ("refresh_required", "hard_gate_rejected")],
)
def test_a_valid_item_passes_freshness_and_every_other_state_fails_with_its_own_reason(freshness, reason):
    doc = item("doc", "official_document", "Retries back off.", freshness=freshness)
    assert exclusion(run(request(extra=[doc])), "doc") == reason


def test_a_freshness_state_the_policy_does_not_recognize_is_unverifiable_and_a_listed_one_passes():
    doc = item("doc", "official_document", "Retries back off.", freshness="valid")
    listed = policy(freshness={"states": ["valid", "expired"]})
    assert exclusion(run(request(extra=[doc]), listed), "doc") is None
    stale = item("doc", "official_document", "Retries back off.", freshness="refresh_required")
    assert exclusion(run(request(extra=[stale]), listed), "doc") == "unverifiable"


def test_a_call_with_its_result_is_paired_with_it_and_a_call_without_one_is_answered_synthetically():
    from tests.engine.builders import tool_call, tool_result

    answered = tool_result("res-1", "c1", "retries = 3")
    result = run(request(extra=[answered], tool_calls=[tool_call("c1", "res-1"), tool_call("c2", None)]))
    pairs = {p.call_id: p for p in result.manifest.tool_pairs}
    assert pairs["c1"].decision != "unresolved" and pairs["c1"].pairing_assertion != "no_result_for_call"
    assert pairs["c2"].decision == "unresolved" and pairs["c2"].pairing_assertion == "no_result_for_call"
    assert (pairs["c1"].evidence_use, pairs["c2"].evidence_use) == ("confirmed_by_policy", "unresolved")
    tool_texts = {m["tool_call_id"]: json.dumps(m["content"]) for m in result.serialized_input["messages"] if m["role"] == "tool"}
    assert "retries = 3" in tool_texts["c1"] and "ctxeng_synthetic_result" not in tool_texts["c1"]
    assert "ctxeng_synthetic_result" in tool_texts["c2"] and "retries = 3" not in tool_texts["c2"]
