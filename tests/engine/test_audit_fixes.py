"""Engine bugs the test audit of issue 15 found, each pinned by the case that exposed it."""

from __future__ import annotations

import copy

from ctxeng.engine import StoredArtifact

from .builders import SCOPE, base_items, excluded_record, item, policy, request, run, sha, with_budget

EV_REF = {"repo": "pi", "commit": "c0ffee", "path": "src/ev.ts", "lines": "1-20"}
SUM_REF = {"repo": "pi", "commit": "c0ffee", "path": "src/ev.ts", "lines": "3-9"}
GOOD = "Goal: find pairing rules\nConstraints: fixed revisions\nOpen Items: OI-1\nConflicts: none"


def evidence(content: str = "results are keyed by call id", item_id: str = "ev") -> dict:
    return item(item_id, content=content, source_ref=EV_REF)


def summary(content: str = GOOD, **fields) -> dict:
    base = dict(input_item_ids=["ev"], source_refs=[SUM_REF], preserves={"open_item_ids": ["OI-1"]}, producer="research-agent/v2")
    base.update(fields)
    return item("sum", "model_summary", content, **base)


def assertions(r):
    return next(t for t in r.manifest.transforms if t.output_item_id == "sum").preservation_assertions


def preserving(*keys: str) -> dict:
    pol = policy()
    pol["transforms"] = {"allowed": ["none", "excerpt", "summarize"], "preserve": list(keys)}
    return pol


# --------------------------------------------------------------------------- the budget


def test_a_context_smaller_than_the_reserves_blocks_naming_the_budget_even_without_minimums():
    pol = policy()  # its own context leaves room; the model's 2,500 does not (2500 - 2000 - 500 - 500 < 0)
    for part in pol["budget"]["partitions"].values():
        part["minimum"] = 0
    m = run(request(model={"provider": "openai", "name": "gpt-4o", "context_limit": 2500}), pol).manifest
    assert m.assembly.status == "blocked"
    assert m.assembly.blocked_reason == "required_partition_missing" and m.assembly.missing[0] == "budget.usable_input"
    assert m.assembly.blocked_detail[0].startswith("budget_exhausted: ")
    assert "usable" in " ".join(m.assembly.blocked_detail) and "response_reserve" in " ".join(m.assembly.blocked_detail)


def test_a_lossy_summary_takes_no_budget_it_then_gives_back():
    """Verification is an admission question: a summary failing its assertions is excluded before
    the budget, so evidence is not evicted to make room for it."""
    pol = preserving("goal", "open_items")
    pol = with_budget(pol, model_context_limit=3000 + 2000 + 1000, protocol_overhead=500, safety_margin=500)
    for part in pol["budget"]["partitions"].values():
        part["minimum"] = 0
        part.pop("maximum", None)
    lossy = summary(content="Goal: " + "pairing " * 1200, preserves={"open_item_ids": []})  # drops OI-1
    ev = evidence("results are keyed by call id " * 180)
    r = run(request(extra=[ev, lossy]), pol)
    assert excluded_record(r, "sum").reason == "transform_blocked"
    assert "ev" in r.manifest.included_ids(), r.manifest.excluded_reasons()
    assert next(s for s in r.manifest.stages if s.stage == "summary_verification").seq < next(s for s in r.manifest.stages if s.stage == "budget").seq


def test_borrowed_counts_only_what_was_taken_from_other_partitions_minimums():
    pol = policy()
    pol["budget"]["borrowing"] = "lend_unused_minimums"
    r = run(request(extra=[evidence("short")]), pol)
    b = r.manifest.budget
    # Room to spare: every partition above its minimum took from the free pool, not from another's minimum.
    assert all(p.borrowed == 0 for p in b.partitions.values()), b.partitions
    assert b.partitions["control"].above_minimum == max(0, b.partitions["control"].used - 500)


def test_a_partition_growing_into_an_unused_minimum_records_what_it_borrowed():
    pol = with_budget(policy(), model_context_limit=5000, response_reserve=500, protocol_overhead=0, safety_margin=0)
    parts = pol["budget"]["partitions"]
    for name in parts:
        parts[name]["minimum"] = 0
        parts[name].pop("maximum", None)
    parts["recent_tool_pairs"]["minimum"] = 3000  # nothing of that kind arrives: its minimum lies unused
    pol["budget"]["borrowing"] = "lend_unused_minimums"
    big = evidence("pairing by call id is deterministic. " * 230)  # ~1,400 tokens: more than the free pool
    r = run(request(extra=[big]), pol)
    b = r.manifest.budget
    pool = b.usable_input - b.framing_reserved - 3000
    ev = b.partitions["direct_evidence"]
    assert "ev" in r.manifest.included_ids()
    total_above = sum(p.above_minimum for p in b.partitions.values())
    assert total_above > pool
    assert sum(p.borrowed for p in b.partitions.values()) == total_above - pool
    assert ev.borrowed > 0 and b.partitions["recent_tool_pairs"].borrowed == 0


# --------------------------------------------------------------------------- summary checks


def test_zero_open_items_on_both_sides_is_carried():
    cands = [c for c in base_items() if c["item_id"] != "open"] + [evidence(), summary(preserves={"open_item_ids": []})]
    r = run(request(cands, runtime_state={"open_item_ids": []}), preserving("open_items"))
    assert assertions(r)["open_items"] == "passed"


def test_an_open_item_is_not_carried_by_a_longer_id_that_contains_it():
    text = GOOD.replace("Open Items: OI-1", "Open Items: OI-10")
    r = run(request(extra=[evidence(), summary(content=text)]), preserving("open_items"))
    assert assertions(r)["open_items"] == "failed"
    assert excluded_record(r, "sum").reason == "transform_blocked"


def test_exact_values_are_not_graded_passed_when_an_input_has_no_inline_content():
    """An input the engine holds no text for cannot show its errors were kept: not_applicable."""
    with_text = evidence("FAILED test_pairs - KeyError: call-7")
    stored = StoredArtifact(artifact_id="ev2-art", revision=1, kind="evidence", content="ev2 as stored",
                            content_hash=sha("ev2 as stored"), writer="agent/v1", scope=SCOPE)
    without = item("ev2", content_hash=stored.content_hash, source_ref={**EV_REF, "path": "src/ev2.ts"},
                   artifact_ref={"artifact_id": "ev2-art", "revision": 1}, producer="agent/v1")
    del without["content"]  # re-injected by reference: the request carries no text for it (an admitted input)
    s = summary(content=GOOD + "\nFAILED test_pairs - KeyError: call-7", input_item_ids=["ev", "ev2"])
    r = run(request(extra=[with_text, without, s]), preserving("exact_values_and_errors"),
            artifacts=lambda aid, rev: stored if aid == "ev2-art" else None)
    assert "ev2" not in r.manifest.excluded_reasons()
    assert assertions(r)["exact_values_and_errors"] == "not_applicable"
    kept = run(request(extra=[with_text, summary(content=GOOD + "\nFAILED test_pairs - KeyError: call-7")]), preserving("exact_values_and_errors"))
    assert assertions(kept)["exact_values_and_errors"] == "passed"
    dropped = run(request(extra=[with_text, summary()]), preserving("exact_values_and_errors"))
    assert assertions(dropped)["exact_values_and_errors"] == "failed"


def test_an_empty_goal_section_is_not_a_goal():
    for text in ("Goal:\nConstraints: fixed revisions", "Goal:   \n\nOpen Items: OI-1"):
        r = run(request(extra=[evidence(), summary(content=text)]), preserving("goal"))
        assert assertions(r)["goal"] == "failed", text
    multi = run(request(extra=[evidence(), summary(content="Goal:\n  find pairing rules\nConstraints: x")]), preserving("goal"))
    assert assertions(multi)["goal"] == "passed"


def test_constraints_do_not_satisfy_hard_constraints():
    r = run(request(extra=[evidence(), summary()]), preserving("hard_constraints"))
    assert assertions(r)["hard_constraints"] == "failed"
    hard = run(request(extra=[evidence(), summary(content=GOOD.replace("Constraints:", "Hard Constraints:"))]), preserving("hard_constraints"))
    assert assertions(hard)["hard_constraints"] == "passed"


def test_the_policy_used_here_is_not_mutated_by_the_helpers():
    before = copy.deepcopy(policy())
    preserving("goal")
    assert policy() == before


def test_an_items_tokens_and_bytes_do_not_depend_on_the_rest_of_the_candidate_set():
    """No nonce (issue 37): a block is the same text, and the same count, whatever else the step
    holds, so budget decisions and impact deltas never move for no reason."""
    counts, texts, nonces = set(), set(), set()
    for k in range(12):
        r = run(request(extra=[evidence("results are keyed by call id"), item(f"other-{k}", content=f"unrelated {k}")]))
        nonces.add(r.manifest.assembly.data_fence_nonce)
        counts.add(next(i.tokens for i in r.manifest.included if i.item_id == "ev"))
        texts.add(next(b["text"] for b in r.assembly_input["blocks"] if b["item_id"] == "ev"))
    assert nonces == {""} and len(counts) == 1 and len(texts) == 1, (counts, texts)


def test_the_engines_own_checkpoint_satisfies_a_policy_preserving_hard_constraints():
    """The runtime's constraints are the task's hard constraints: the checkpoint's heading says so,
    so a policy preserving `hard_constraints` (or `constraints`) verifies the engine's own summary."""
    checkpoint = {
        "summary_id": "cp-1",
        "goal": "map how tool calls are paired",
        "constraints": ["fixed revisions"],
        "current_stage": "drafting",
        "open_item_ids": ["OI-1"],
        "input_item_ids": ["turn-1"],
        "input_range": {"start_item_id": "turn-1", "end_item_id": "turn-1"},
    }
    for key in ("hard_constraints", "constraints"):
        r = run(request(checkpoint=checkpoint), preserving(key))
        rec = next(t for t in r.manifest.transforms if t.output_item_id == "cp-1")
        assert rec.preservation_assertions[key] == "passed", key
