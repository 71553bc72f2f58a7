"""What the agent read (ctxeng.engine.versions), through raw assembly requests.

Written from the rule (the module's docstring and docs/sdk.md), never from the implementation:
each test builds a small history of tool calls at their assistant turns and the readings and
writes they returned (`source_ref` naming the object, its part and version), and its oracle is
written by hand from the rule. "Later" is the history's order (a result at its call's turn), so
the candidate order in these requests is never what makes one reading newer than another.
"""

from __future__ import annotations

import json
import random
from typing import Any

from tests.engine.builders import base_items, request, run, tool_call, tool_result

GATES_PASSED = {
    "permission", "tenant_and_project_scope", "required_revision", "freshness",
    "trust_role_compatibility", "structural_integrity", "security_policy_compliance",
}


def numbered(start: int, *lines: str) -> str:
    """Line-numbered text as `cat -n` prints it: '   120\\tcode'."""
    return "".join(f"{n:6d}\t{text}\n" for n, text in enumerate(lines, start))


def reading(item_id: str, call_id: str, text: str, **ref: Any) -> dict[str, Any]:
    """A tool result whose source_ref names what it read."""
    return tool_result(item_id, call_id, text, source_ref=ref)


def write(item_id: str, call_id: str, text: str = "edited", **ref: Any) -> dict[str, Any]:
    return tool_result(item_id, call_id, text, source_ref={**ref, "access": "write"})


def call(call_id: str, result_item_id: str, turn: int, tool_name: str = "read_file", **arguments: Any) -> dict[str, Any]:
    """A successful call made by the assistant turn at history position `turn`."""
    args = arguments or {"path": "x"}
    return {**tool_call(call_id, result_item_id, tool_name=tool_name, arguments=args, status="success"), "turn": turn}


def assemble(candidates: list[dict], calls: list[dict], **fields: Any):
    result = run(request(base_items() + candidates, tool_calls=calls, **fields))
    assert result.status == "ready", result.manifest_dict().get("blocked_reason")
    return result


def manifest(result) -> dict[str, Any]:
    return result.manifest_dict()


def included(result) -> set[str]:
    return {r["item_id"] for r in manifest(result)["included"]}


def excluded(result) -> dict[str, dict[str, Any]]:
    return {r["item_id"]: r for r in manifest(result)["excluded"]}


def payload_text(result) -> str:
    return json.dumps(result.serialized_input, ensure_ascii=False)


def test_two_repositories_readme_files_are_two_objects_and_both_are_kept():
    cands = [
        reading("readme-pi", "c1", "# pi\nThe agent runtime.\n", repo="pi", path="README.md"),
        reading("readme-web", "c2", "# web\nThe dashboard.\n", repo="web", path="README.md"),
    ]
    result = assemble(cands, [call("c1", "readme-pi", 2), call("c2", "readme-web", 4)])
    assert {"readme-pi", "readme-web"} <= included(result)
    assert manifest(result)["conflicts"] == []


def test_a_path_without_a_repo_is_another_object_than_the_same_path_in_a_named_repo():
    cands = [
        reading("named", "c1", "A = 1\n", repo="pi", path="src/a.py"),
        reading("bare", "c2", "A = 2\n", path="src/a.py"),
    ]
    result = assemble(cands, [call("c1", "named", 2), call("c2", "bare", 4)])
    assert {"named", "bare"} <= included(result)


def test_two_non_overlapping_ranges_of_one_file_at_one_commit_are_both_kept():
    cands = [
        reading("top", "c1", numbered(1, "import os", "import sys"), repo="pi", path="src/a.py", commit="abc1234", lines="1-2"),
        reading("mid", "c2", numbered(40, "def f():", "    return 1"), repo="pi", path="src/a.py", commit="abc1234", lines="40-41"),
    ]
    result = assemble(cands, [call("c1", "top", 2), call("c2", "mid", 4)])
    assert {"top", "mid"} <= included(result)


def test_two_non_overlapping_ranges_at_one_commit_are_both_stale_after_a_later_write_of_the_file():
    cands = [
        reading("top", "c1", numbered(1, "import os", "import sys"), repo="pi", path="src/a.py", commit="abc1234", lines="1-2"),
        reading("mid", "c2", numbered(40, "def f():", "    return 1"), repo="pi", path="src/a.py", commit="abc1234", lines="40-41"),
        write("edit", "c3", "edited src/a.py", repo="pi", path="src/a.py", lines="90-91"),
    ]
    result = assemble(cands, [call("c1", "top", 2), call("c2", "mid", 4), call("c3", "edit", 6, "edit_file", path="src/a.py")])
    out = excluded(result)
    for stale in ("top", "mid"):
        assert out[stale]["reason"] == "stale_revision", out[stale]
        # The detail names the event: the write's item and call, and the range it wrote (any range counts).
        assert "'edit'" in out[stale]["detail"] and "'c3'" in out[stale]["detail"]
        assert "90-91" in out[stale]["detail"]
    # An item that writes is never stale.
    assert "edit" in included(result)


def test_a_covering_re_read_equal_on_the_overlap_makes_the_earlier_reading_a_duplicate_not_stale():
    cands = [
        reading("narrow", "c1", numbered(10, "q = 1", "r = 2"), path="src/a.py", lines="10-11"),
        reading("wide", "c2", numbered(9, "p = 0", "q = 1", "r = 2", "s = 3"), path="src/a.py", lines="9-12"),
    ]
    result = assemble(cands, [call("c1", "narrow", 2), call("c2", "wide", 4)])
    record = excluded(result)["narrow"]
    assert record["reason"] == "duplicate"
    # Excluded at ranking: it passed every hard gate.
    assert record["hard_gate"] is None
    assert {k for k, v in record["hard_gate_results"].items() if v == "passed"} == GATES_PASSED
    # The detail names the covering item and both ranges.
    assert "'wide'" in record["detail"] and "9-12" in record["detail"] and "10-11" in record["detail"]
    assert "wide" in included(result)


def test_a_re_read_of_the_same_range_with_different_content_makes_the_earlier_stale_saying_it_changed():
    cands = [
        reading("before", "c1", numbered(10, "q = 1", "r = 2"), path="src/a.py", lines="10-11"),
        reading("after", "c2", numbered(10, "q = 1", "r = 3"), path="src/a.py", lines="10-11"),
    ]
    result = assemble(cands, [call("c1", "before", 2), call("c2", "after", 4)])
    record = excluded(result)["before"]
    assert record["reason"] == "stale_revision"
    assert "'after'" in record["detail"] and "changed" in record["detail"]
    assert "10-11" in record["detail"]
    assert "after" in included(result)
    assert manifest(result)["conflicts"] == []


def test_a_whole_re_read_with_another_hash_makes_the_earlier_whole_reading_stale():
    cands = [
        reading("v1", "c1", "DEBUG = True\n", path="config.py"),
        reading("v2", "c2", "DEBUG = False\n", path="config.py"),
    ]
    result = assemble(cands, [call("c1", "v1", 2), call("c2", "v2", 4)])
    assert excluded(result)["v1"]["reason"] == "stale_revision"
    assert "'v2'" in excluded(result)["v1"]["detail"]
    assert "v2" in included(result)


def test_a_later_reading_at_a_higher_numeric_revision_makes_the_earlier_stale_whatever_its_range():
    cands = [
        reading("r1", "c1", numbered(1, "a = 1"), path="src/a.py", lines="1", revision=1),
        reading("r2", "c2", numbered(50, "z = 9"), path="src/a.py", lines="50", revision=2),
    ]
    result = assemble(cands, [call("c1", "r1", 2), call("c2", "r2", 4)])
    assert excluded(result)["r1"]["reason"] == "stale_revision"
    assert "'r2'" in excluded(result)["r1"]["detail"]
    assert "r2" in included(result)


def test_parallel_reads_of_one_turn_never_supersede_each_other_even_with_differing_content():
    cands = [
        reading("left", "c1", numbered(10, "q = 1", "r = 2"), path="src/a.py", lines="10-11"),
        reading("right", "c2", numbered(10, "q = 1", "r = 3"), path="src/a.py", lines="10-11"),
        reading("wide", "c3", numbered(9, "p = 0", "q = 1", "r = 2", "s = 3"), path="src/a.py", lines="9-12"),
    ]
    result = assemble(cands, [call("c1", "left", 2), call("c2", "right", 2), call("c3", "wide", 2)])
    assert {"left", "right", "wide"} <= included(result)


def test_a_write_in_the_same_turn_as_a_read_leaves_the_read():
    cands = [
        reading("read", "c1", numbered(1, "A = 1"), path="src/a.py", lines="1"),
        write("edit", "c2", "edited src/a.py", path="src/a.py"),
    ]
    result = assemble(cands, [call("c1", "read", 2), call("c2", "edit", 2, "edit_file", path="src/a.py")])
    assert {"read", "edit"} <= included(result)


# Calls of one assistant turn are concurrent (rule 3) even when both items state numeric
# revisions. This test found the engine ordering them by revision (the read made stale by the
# edit of its own turn); fixed in versions.py, kept as the regression test.
def test_a_write_in_the_same_turn_as_a_read_leaves_the_read_even_when_both_state_numeric_revisions():
    cands = [
        reading("read", "c1", "DEBUG = True\n", path="config.py", revision=0),
        write("edit", "c2", "edited config.py", path="config.py", revision=1),
    ]
    result = assemble(cands, [call("c1", "read", 2), call("c2", "edit", 2, "edit_file", path="config.py")])
    assert {"read", "edit"} <= included(result), excluded(result).get("read", {}).get("detail")


# Two readings of one turn are never versions of each other (rule 3), whatever revisions they
# state. This test found the first excluded at revisions 1 and 2; fixed, kept as the regression test.
def test_parallel_reads_of_one_turn_at_different_numeric_revisions_never_supersede_each_other():
    cands = [
        reading("a", "c1", "DEBUG = True\n", path="config.py", revision=1),
        reading("b", "c2", "DEBUG = False\n", path="config.py", revision=2),
    ]
    result = assemble(cands, [call("c1", "a", 2), call("c2", "b", 2)])
    assert {"a", "b"} <= included(result), excluded(result).get("a", {}).get("detail")


def test_two_readings_at_the_same_stated_commit_that_differ_are_both_kept_and_recorded_as_a_conflict():
    cands = [
        reading("one", "c1", numbered(10, "q = 1", "r = 2"), repo="pi", path="src/a.py", commit="abc1234", lines="10-11"),
        reading("two", "c2", numbered(10, "q = 1", "r = 3"), repo="pi", path="src/a.py", commit="abc1234", lines="10-11"),
    ]
    result = assemble(cands, [call("c1", "one", 2), call("c2", "two", 4)])
    assert {"one", "two"} <= included(result)
    conflicts = manifest(result)["conflicts"]
    assert len(conflicts) == 1
    record = conflicts[0]
    assert set(record) >= {"object", "revision", "item_ids", "ranges", "detail"}
    assert sorted(record["item_ids"]) == ["one", "two"]
    assert record["revision"] == "abc1234"
    assert "src/a.py" in record["object"] and "pi" in record["object"]
    assert all("10-11" in r for r in record["ranges"]) and len(record["ranges"]) == 2


def test_a_later_write_by_another_tenants_item_supersedes_nothing():
    cands = [
        reading("read", "c1", numbered(1, "A = 1"), repo="pi", path="src/a.py", lines="1"),
        {**write("foreign", "c2", "edited src/a.py", repo="pi", path="src/a.py"), "scope": "tenant-z/project-q/task-9"},
    ]
    result = assemble(cands, [call("c1", "read", 2), call("c2", "foreign", 4, "edit_file", path="src/a.py")])
    assert excluded(result)["foreign"]["reason"] == "permission_denied"
    assert "read" in included(result)


def test_a_part_with_unknown_lines_is_never_a_duplicate_and_never_stale_but_by_a_write():
    whole = "Backoff = 2\nRetries = 3\n"
    cands = [
        reading("grep1", "c1", "Backoff = 2\n", path="src/retry.py", part="lines matching 'Backoff'"),
        reading("whole", "c2", whole, path="src/retry.py"),
        reading("grep2", "c3", "Backoff = 5\n", path="src/retry.py", part="lines matching 'Backoff'"),
    ]
    calls = [call("c1", "grep1", 2), call("c2", "whole", 4), call("c3", "grep2", 6)]
    result = assemble(cands, calls)
    # Covered by a whole reading that contains its text: still not a duplicate; a later part that
    # differs: still not stale (its lines are unknown, nothing can be shown to overlap).
    assert "grep1" in included(result)
    # A write of the object makes it stale.
    cands.append(write("edit", "c4", "edited src/retry.py", path="src/retry.py"))
    calls.append(call("c4", "edit", 8, "edit_file", path="src/retry.py"))
    result = assemble(cands, calls)
    assert excluded(result)["grep1"]["reason"] == "stale_revision"
    assert "'edit'" in excluded(result)["grep1"]["detail"]


def _mixed_history() -> tuple[list[dict], list[dict]]:
    """Every case above in one history: duplicates, changes, writes, a conflict, parallel reads."""
    cands = [
        reading("readme-pi", "c1", "# pi\n", repo="pi", path="README.md"),
        reading("readme-web", "c2", "# web\n", repo="web", path="README.md"),
        reading("narrow", "c3", numbered(10, "q = 1", "r = 2"), path="src/a.py", lines="10-11"),
        reading("wide", "c4", numbered(9, "p = 0", "q = 1", "r = 2", "s = 3"), path="src/a.py", lines="9-12"),
        reading("b-before", "c5", "B = 1\n", path="src/b.py"),
        reading("b-after", "c6", "B = 2\n", path="src/b.py"),
        reading("left", "c7", numbered(1, "x"), path="src/c.py", lines="1"),
        reading("right", "c8", numbered(1, "y"), path="src/c.py", lines="1"),
        reading("one", "c9", numbered(5, "k = 1"), repo="pi", path="src/d.py", commit="abc1234", lines="5"),
        reading("two", "c10", numbered(5, "k = 2"), repo="pi", path="src/d.py", commit="abc1234", lines="5"),
        reading("e-read", "c11", numbered(3, "E = 1"), path="src/e.py", lines="3"),
        write("e-edit", "c12", "edited src/e.py", path="src/e.py"),
        reading("f-top", "c13", numbered(1, "F = 1"), path="src/f.py", lines="1"),
        reading("f-mid", "c14", numbered(20, "G = 1"), path="src/f.py", lines="20"),
        write("f-edit", "c15", "edited src/f.py", path="src/f.py", lines="30"),
    ]
    calls = [
        call("c1", "readme-pi", 2), call("c2", "readme-web", 4), call("c3", "narrow", 6), call("c4", "wide", 8),
        call("c5", "b-before", 10), call("c6", "b-after", 12), call("c7", "left", 14), call("c8", "right", 14),
        call("c9", "one", 16), call("c10", "two", 18), call("c11", "e-read", 20), call("c12", "e-edit", 20, "edit_file"),
        call("c13", "f-top", 22), call("c14", "f-mid", 24), call("c15", "f-edit", 26, "edit_file"),
    ]
    return cands, calls


def _decisions(result) -> tuple:
    m = manifest(result)
    out = sorted((r["item_id"], r["reason"], r["detail"]) for r in m["excluded"])
    conflicts = sorted(json.dumps({**c, "item_ids": sorted(c["item_ids"])}, sort_keys=True) for c in m["conflicts"])
    return sorted(included(result)), out, conflicts


def test_the_mixed_history_reaches_the_decisions_the_rule_gives():
    cands, calls = _mixed_history()
    result = assemble(cands, calls)
    out = {k: v["reason"] for k, v in excluded(result).items()}
    assert out == {"narrow": "duplicate", "b-before": "stale_revision", "f-top": "stale_revision", "f-mid": "stale_revision"}
    assert [sorted(c["item_ids"]) for c in manifest(result)["conflicts"]] == [["one", "two"]]


def test_the_candidate_order_never_changes_a_decision():
    cands, calls = _mixed_history()
    expected = _decisions(assemble(cands, calls))
    orders = [list(reversed(cands))]
    rng = random.Random(20260906)
    for _ in range(5):
        shuffled = list(cands)
        rng.shuffle(shuffled)
        orders.append(shuffled)
    for order in orders:
        assert _decisions(assemble(order, calls)) == expected, [c["item_id"] for c in order]


def test_a_stale_tool_results_call_still_gets_an_answer_in_the_payload():
    secret_old = "OLD_VALUE_41"
    cands = [
        reading("old", "c1", f"TOKEN = '{secret_old}'\n", path="config.py"),
        write("edit", "c2", "edited config.py", path="config.py"),
        reading("new", "c3", "TOKEN = 'NEW_VALUE_42'\n", path="config.py"),
    ]
    result = assemble(cands, [call("c1", "old", 2), call("c2", "edit", 4, "edit_file", path="config.py"), call("c3", "new", 6)])
    assert excluded(result)["old"]["reason"] == "stale_revision"
    messages = result.serialized_input["messages"]
    called = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert "c1" in called
    # Every call in the payload is answered exactly once: no orphaned call, no orphaned answer.
    assert sorted(called) == sorted(answered) and len(set(answered)) == len(answered)
    assert secret_old not in payload_text(result) and "NEW_VALUE_42" in payload_text(result)
    pair = next(p for p in manifest(result)["tool_pairs"] if p["call_id"] == "c1")
    assert pair["result_item_id"] == "old"


def test_an_exact_range_whose_text_has_that_many_lines_is_compared_line_by_line():
    # Plain text (no line numbers) of exactly two lines for lines 10-11: its lines are known.
    cands = [
        reading("narrow", "c1", "q = 1\nr = 2\n", path="src/a.py", lines="10-11"),
        reading("wide", "c2", "p = 0\nq = 1\nr = 2\ns = 3\n", path="src/a.py", lines="9-12"),
        reading("other", "c3", "X = 1\nY = 1\n", path="src/b.py", lines="10-11"),
        reading("other2", "c4", "X = 1\nY = 2\n", path="src/b.py", lines="10-11"),
    ]
    result = assemble(cands, [call("c1", "narrow", 2), call("c2", "wide", 4), call("c3", "other", 6), call("c4", "other2", 8)])
    assert excluded(result)["narrow"]["reason"] == "duplicate"
    assert excluded(result)["other"]["reason"] == "stale_revision"
    assert {"wide", "other2"} <= included(result)


def test_items_without_a_turn_are_ordered_by_observed_at_not_by_the_candidate_order():
    def file_item(item_id: str, text: str, observed_at: str) -> dict:
        return reading(item_id, "unused", text, path="notes/plan.md") | {"call_id": None, "observed_at": observed_at}

    newer = file_item("newer", "plan: ship on Friday\n", "2026-09-06T09:30:00Z")
    older = file_item("older", "plan: ship on Monday\n", "2026-09-06T09:00:00Z")
    for cands in ([newer, older], [older, newer]):
        result = assemble(cands, [])
        assert excluded(result)["older"]["reason"] == "stale_revision"
        assert "newer" in included(result)


def test_a_later_reading_failing_its_integrity_gate_supersedes_nothing():
    tampered = reading("later", "c2", "DEBUG = False\n", path="config.py") | {"content_hash": "sha256:" + "0" * 64}
    result = assemble([reading("early", "c1", "DEBUG = True\n", path="config.py"), tampered],
                      [call("c1", "early", 2), call("c2", "later", 4)])
    assert excluded(result)["later"]["reason"] != "stale_revision"
    assert "early" in included(result)


def test_a_write_is_never_stale_even_after_a_later_write():
    result = assemble([write("w1", "c1", "edited", path="a.py"), write("w2", "c2", "edited again", path="a.py")],
                      [call("c1", "w1", 2, "edit_file"), call("c2", "w2", 4, "edit_file")])
    assert {"w1", "w2"} <= included(result)


def test_a_write_named_in_an_objects_list_makes_an_earlier_reading_of_that_object_stale():
    shell = tool_result("sh", "c3", "done", source_ref={"objects": [{"access": "write", "path": "a.py"}, {"path": "b.py"}]})
    cands = [reading("ra", "c1", "A = 1\n", path="a.py"), reading("rc", "c2", "C = 1\n", path="c.py"), shell]
    result = assemble(cands, [call("c1", "ra", 2), call("c2", "rc", 2), call("c3", "sh", 4, "bash")])
    assert excluded(result)["ra"]["reason"] == "stale_revision" and "'sh'" in excluded(result)["ra"]["detail"]
    assert {"rc", "sh"} <= included(result)


def test_line_ranges_in_every_spelling_cover_what_they_name():
    many = numbered(1, *[f"l{i}" for i in range(1, 21)]) + numbered(40, *[f"l{i}" for i in range(40, 51)])
    to_end = numbered(120, *[f"l{i}" for i in range(120, 141)])
    cands = [
        reading("in-gap", "c1", numbered(30, "X", "Y"), path="a.py", lines="30-31"),      # 30-31: not in 1-20,40-50
        reading("in-list", "c2", numbered(41, "l41", "l42"), path="a.py", lines="41-42"),
        reading("one", "c3", numbered(5, "l5"), path="a.py", lines="5"),
        reading("in-open", "c4", numbered(130, "l130", "l131"), path="a.py", lines="130-131"),
        reading("list", "c5", many, path="a.py", lines="1-20,40-50"),
        reading("to-end", "c6", to_end, path="a.py", lines="120-"),
    ]
    calls = [call("c1", "in-gap", 2), call("c2", "in-list", 4), call("c3", "one", 6), call("c4", "in-open", 8),
             call("c5", "list", 10), call("c6", "to-end", 12)]
    result = assemble(cands, calls)
    out = {k: v["reason"] for k, v in excluded(result).items()}
    assert out == {"in-list": "duplicate", "one": "duplicate", "in-open": "duplicate"}
    assert "'list'" in excluded(result)["in-list"]["detail"] and "'to-end'" in excluded(result)["in-open"]["detail"]


def test_two_stated_commits_have_no_order_so_neither_reading_is_stale_nor_a_conflict():
    cands = [
        reading("a", "c1", numbered(5, "x = 1"), repo="pi", path="a.py", commit="aaaa111", lines="5"),
        reading("b", "c2", numbered(5, "x = 2"), repo="pi", path="a.py", commit="bbbb222", lines="5"),
    ]
    result = assemble(cands, [call("c1", "a", 2), call("c2", "b", 4)])
    assert {"a", "b"} <= included(result)
    assert manifest(result)["conflicts"] == []


def test_pages_memories_artifacts_and_declared_objects_are_named_by_their_own_identity():
    cands = [
        reading("u1", "c1", "v1", url="https://x.org/a"), reading("u2", "c2", "v2", url="https://x.org/a"),
        reading("u3", "c3", "v3", url="https://x.org/b"),
        reading("m1", "c4", "likes tea", memory_id="pref"), reading("m2", "c5", "likes coffee", memory_id="pref"),
        reading("m3", "c6", "x", memory_id="other"),
        reading("d1", "c7", "open", object="ticket_id=7"), reading("d2", "c8", "closed", object="ticket_id=7"),
        reading("d3", "c9", "open", object="ticket_id=8"),
        reading("p1", "c10", "plan v1", artifact_id="plan", revision=1), reading("p2", "c11", "plan v2", artifact_id="plan", revision=2),
        reading("p3", "c12", "other plan", artifact_id="plan-b", revision=1),
    ]
    calls = [call(f"c{i}", c["item_id"], 2 * i) for i, c in enumerate(cands, 1)]
    result = assemble(cands, calls)
    out = {k: v["reason"] for k, v in excluded(result).items()}
    assert out == {"u1": "stale_revision", "m1": "stale_revision", "d1": "stale_revision", "p1": "stale_revision"}
    assert {"u2", "u3", "m2", "m3", "d2", "d3", "p2", "p3"} <= included(result)
