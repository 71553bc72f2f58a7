"""Eviction rules are actions (seed §5, §7): one test per rule, each failing without it.

The partitions here are small and explicit, so each test states the whole budget it relies on:
`usable = limit - 2000 - 500 - 500`; an item of `words(n)` costs about 2 tokens a word plus its
fence (header line and end marker, 11-36 tokens): measured, plan(60 words) 134, plan(300) 614,
evidence(60) 149, evidence(300) 629; the resident state items stage + open take 35.
"""

from __future__ import annotations

import copy

from tests.golden import delivered_blocks

from .builders import excluded_record, item, policy, reasons, request, run, tool_call, tool_result
from .payloads import call_ids, validate


def words(n: int, seed: str = "w") -> str:
    return " ".join(f"{seed}{i}" for i in range(n))


def budget_policy(limit: int, partitions: dict, **transforms) -> dict:
    pol = copy.deepcopy(policy())
    pol["budget"]["model_context_limit"] = limit
    pol["budget"]["partitions"] = partitions
    pol["transforms"].update(transforms)
    return pol


def model(limit: int) -> dict:
    return {"provider": "openai", "name": "gpt-4", "context_limit": limit}


CONTROL = {"minimum": 100, "eviction": "never", "kinds": ["instruction", "goal", "hard_constraints"]}
STATE = {"minimum": 100, "eviction": "structured_summary", "kinds": ["current_stage", "open_items_summary", "research_plan", "summary"]}
EVIDENCE = {"minimum": 0, "eviction": "reduce_candidates", "kinds": ["evidence", "official_document"]}
PAIRS = {"minimum": 0, "eviction": "complete_pair_only", "kinds": ["tool_call", "tool_result"]}
BACKGROUND = {"maximum": 5000, "eviction": "first", "kinds": ["trace", "memory", "background"]}


def partitions(**changes) -> dict:
    parts = {"control": dict(CONTROL), "state": dict(STATE), "direct_evidence": dict(EVIDENCE), "recent_tool_pairs": dict(PAIRS), "background": dict(BACKGROUND)}
    for name, change in changes.items():
        parts[name].update(change)
    return parts


# --------------------------------------------------------------------------- never


def test_a_control_item_that_does_not_fit_its_never_partition_blocks_the_assembly():
    big_rules = item("rules-2", "system_policy", "Extra operating rules. " + words(300, "r"))
    pol = budget_policy(16000, partitions(control={"maximum": 600}))
    r = run(request(extra=[big_rules]), pol)
    m = r.manifest
    assert m.assembly.status == "blocked" and m.assembly.blocked_reason == "required_partition_missing"
    assert m.assembly.blocked_detail[0].startswith("budget_exhausted: ")
    assert m.assembly.missing == ["rules-2"]
    assert any("partition 'control'" in d and "rules-2" in d for d in m.assembly.blocked_detail)
    assert reasons(r)["rules-2"] == "budget_evicted"  # recorded, and the assembly stops: never silent
    assert r.serialized_input is None and m.assembly.serialized_model_input_hash is None


def test_a_never_partition_with_room_keeps_everything_and_stays_ready():
    r = run(request(extra=[item("rules-2", "system_policy", "Extra operating rules.")]), budget_policy(16000, partitions(control={"maximum": 600})))
    assert r.manifest.assembly.status == "ready" and "rules-2" in r.manifest.included_ids()


# --------------------------------------------------------------------------- structured_summary


def plan(item_id: str, n: int, open_ids: list[str]) -> dict:
    return item(item_id, "runtime_state", words(n, item_id[-1]), kind="research_plan", open_item_ids=open_ids, relevance=0.3)


def test_state_items_over_their_partition_are_replaced_by_the_structured_summary():
    # 35 resident + plan-a 614 > 400; its summary (under 200) fits beside the residents.
    pol = budget_policy(16000, partitions(state={"maximum": 400}))
    r = run(request(extra=[plan("plan-a", 300, ["OI-7"])]), pol)
    m = r.manifest
    assert m.assembly.status == "ready"
    rec = excluded_record(r, "plan-a")
    assert rec.reason == "budget_evicted" and rec.replaced_by == "structured-summary-state"
    assert "structured-summary-state" in m.included_ids()
    (t,) = [t for t in m.transforms if t.output_item_id == "structured-summary-state"]
    assert (t.type, t.transformer_version, t.trigger, t.status) == ("summarize", "ctxeng-structured/1", "over_partition", "applied")
    assert t.input_item_ids == ["plan-a"]
    # The record's evidence of what was replaced: each evicted item by id and its first line (cut
    # at 200 characters), beside the summary's own text.
    first_line = words(300, "a")[:199] + "…"
    assert t.before_excerpt == f"plan-a: {first_line}"
    assert t.after_excerpt and t.after_excerpt in delivered_blocks(r.serialized_input, r.manifest_dict())["structured-summary-state"]
    assert set(t.preservation_assertions.values()) <= {"passed", "not_applicable"}
    assert t.preservation_assertions["open_items"] == "passed"
    summary = next(i for i in m.included if i.item_id == "structured-summary-state")
    assert summary.partition == "state" and summary.trust == "derived_context" and summary.zone == "state"
    assert summary.source_lineage[-1].input_node_ids == ["plan-a"]
    assert m.budget.partitions["state"].used <= 400
    (s,) = [s for s in m.summaries if s.item_id == "structured-summary-state"]
    assert s.decision == "included"


def test_the_structured_summary_carries_the_checkpoint_and_names_each_replaced_item():
    # The checkpoint candidate itself fails verification (no source refs) and, being verified before
    # the budget, takes no room: the state maximum is what makes both plans not fit.
    pol = budget_policy(16000, partitions(state={"maximum": 700}))
    checkpoint = {
        "summary_id": "cp-1",
        "goal": "map how tool calls are paired",
        "current_stage": "drafting",
        "open_item_ids": ["OI-1"],
        "draft_revision": 2,
        "input_item_ids": ["turn-1"],
        "input_range": {"start_item_id": "turn-1", "end_item_id": "turn-1"},
    }
    plans = [plan("plan-a", 250, ["OI-7"]), plan("plan-b", 250, ["OI-8"])]
    r = run(request(extra=plans, checkpoint=checkpoint), pol)
    summary = next(t for t in r.manifest.transforms if t.output_item_id == "structured-summary-state")
    text = delivered_blocks(r.serialized_input, r.manifest_dict())["structured-summary-state"]
    assert "Goal: map how tool calls are paired" in text and "Draft Revision: 2" in text
    evicted = [i for i in ("plan-a", "plan-b") if reasons(r).get(i) == "budget_evicted"]
    assert evicted and sorted(summary.input_item_ids) == evicted
    for item_id in evicted:
        rec = excluded_record(r, item_id)
        assert item_id in text and rec.content_hash in text  # fetchable again by identity
    assert "OI-1" in text and all(f"OI-{7 + k}" in text for k, i in enumerate(("plan-a", "plan-b")) if i in evicted)


def ranked_plan(item_id: str, n: int, relevance: float) -> dict:
    return item(item_id, "runtime_state", words(n, item_id[-1]), kind="research_plan", relevance=relevance)


def test_a_summary_that_does_not_fit_folds_in_the_lowest_ranked_state_items_until_it_fits():
    # State maximum 425: stage + open items (35) and the two short plans (134 each) fit, the long
    # plan (614) does not, and its summary (159) does not fit the 122 left. Folding plan-a, the
    # lowest ranked, frees 134: the summary of both (212) fits in 256; plan-c, ranked above it, stays.
    pol = budget_policy(16000, partitions(state={"maximum": 425}))
    plans = [ranked_plan("plan-a", 60, 0.2), ranked_plan("plan-c", 60, 0.6), ranked_plan("plan-b", 300, 0.9)]
    r = run(request(extra=plans), pol)
    m = r.manifest
    assert m.assembly.status == "ready"
    assert {"plan-c", "structured-summary-state", "stage", "open"} <= set(m.included_ids())
    for folded in ("plan-a", "plan-b"):
        rec = excluded_record(r, folded)
        assert rec.reason == "budget_evicted" and rec.replaced_by == "structured-summary-state"
    assert "folded into the structured summary" in excluded_record(r, "plan-a").detail
    (t,) = [t for t in m.transforms if t.output_item_id == "structured-summary-state"]
    assert sorted(t.input_item_ids) == ["plan-a", "plan-b"] and t.status == "applied"
    assert m.budget.partitions["state"].used <= 425


def test_when_no_summary_of_the_evictable_state_fits_the_assembly_is_blocked_not_ready():
    # State maximum 225: stage + open items (resident kinds, never folded, 35) and plan-a (134) fit;
    # the summary of plan-b (159) does not fit beside them, and even the summary of both plans (212)
    # does not fit beside the residents (247 > 225), so state would be dropped unsummarised: blocked.
    pol = budget_policy(16000, partitions(state={"maximum": 225}))
    r = run(request(extra=[ranked_plan("plan-a", 60, 0.2), ranked_plan("plan-b", 300, 0.9)]), pol)
    m = r.manifest
    assert (m.assembly.status, m.assembly.blocked_reason, m.assembly.missing) == ("blocked", "required_partition_missing", ["state"])
    assert m.assembly.blocked_detail[0].startswith("budget_exhausted: ")
    assert any("every evictable state item" in d and "'state'" in d for d in m.assembly.blocked_detail)
    assert excluded_record(r, "plan-b").reason == "budget_evicted" and excluded_record(r, "plan-b").replaced_by is None
    assert r.serialized_input is None and m.assembly.assembly_input_hash is None


def test_without_summarize_allowed_over_budget_state_is_only_evicted():
    pol = budget_policy(16000, partitions(state={"maximum": 400}), allowed=["none", "excerpt"])  # 35 + 614 > 400
    r = run(request(extra=[plan("plan-a", 300, ["OI-7"])]), pol)
    rec = excluded_record(r, "plan-a")
    assert rec.reason == "budget_evicted" and rec.replaced_by is None
    assert "no structured summary: transforms.allowed has no 'summarize'" in rec.detail
    assert not [t for t in r.manifest.transforms if t.type == "summarize"]


def test_a_trigger_without_over_partition_builds_no_structured_summary():
    pol = budget_policy(16000, partitions(state={"maximum": 400}), trigger="over_source_limit")  # 35 + 614 > 400
    r = run(request(extra=[plan("plan-a", 300, ["OI-7"])]), pol)
    assert excluded_record(r, "plan-a").replaced_by is None
    assert "leaves out over_partition" in excluded_record(r, "plan-a").detail


# --------------------------------------------------------------------------- reduce_candidates


def test_evidence_is_dropped_whole_lowest_rank_first():
    # Pass 1 fills the 300-token minimum with the small, lower-ranked item (149); the rule then drops
    # it so the higher-ranked item (629) fits the 700-token maximum (629 + 149 > 700).
    pol = budget_policy(16000, partitions(direct_evidence={"minimum": 300, "maximum": 700}))
    high = item("ev-high", content=words(300, "h"), relevance=0.9)
    low = item("ev-low", content=words(60, "l"), relevance=0.2)
    r = run(request(extra=[high, low]), pol)
    assert "ev-high" in r.manifest.included_ids()
    assert reasons(r)["ev-low"] == "budget_evicted"
    assert "eviction rule reduce_candidates" in excluded_record(r, "ev-low").detail
    assert not r.manifest.transforms  # nothing was shortened to make room


def test_evidence_too_big_for_its_partition_is_dropped_whole_never_cut():
    pol = budget_policy(16000, partitions(direct_evidence={"minimum": 0, "maximum": 400}))
    r = run(request(extra=[item("ev-big", content=words(400, "b"), relevance=0.9), item("ev-small", content="small", relevance=0.1)]), pol)
    assert reasons(r)["ev-big"] == "budget_evicted" and "ev-small" in r.manifest.included_ids()
    assert "b1 b2" not in str(r.serialized_input)


# --------------------------------------------------------------------------- complete_pair_only


def pair_request(**fields) -> dict:
    results = [tool_result("r1", "c1", words(80, "a"), relevance=0.9), tool_result("r2", "c2", words(400, "b"), relevance=0.1)]
    return request(extra=results, tool_calls=[tool_call("c1", "r1"), tool_call("c2", "r2")], **fields)


def test_an_evicted_pair_leaves_its_call_answered_by_a_synthetic_result():
    pol = budget_policy(16000, partitions(recent_tool_pairs={"maximum": 700}))
    r = run(pair_request(adapter="anthropic_messages"), pol)
    validate(r.serialized_input, "anthropic_messages")
    assert call_ids(r.serialized_input) == (["c1", "c2"], ["c1", "c2"])
    pairs = {p.call_id: p for p in r.manifest.tool_pairs}
    assert pairs["c2"].decision == "excluded" and pairs["c2"].unresolved_handling == "synthetic_result"
    assert reasons(r)["r2"] == "budget_evicted"
    assert r.manifest.budget.partitions["recent_tool_pairs"].used <= 700


def test_an_evicted_pair_is_left_out_whole_under_omit_call():
    pol = budget_policy(16000, partitions(recent_tool_pairs={"maximum": 700}))
    pol["structure"] = {"unresolved_tool_calls": "omit_call"}
    r = run(pair_request(), pol)
    validate(r.serialized_input, "openai_chat")
    assert call_ids(r.serialized_input) == (["c1"], ["c1"])
    (c2,) = [p for p in r.manifest.tool_pairs if p.call_id == "c2"]
    assert c2.decision == "excluded" and c2.unresolved_handling == "omit_call" and c2.serialized_order is None


def test_when_not_even_the_synthetic_result_fits_the_call_is_left_out():
    # c1's pair takes 199; c2's synthetic result and its call (60) do not fit the 31 left.
    pol = budget_policy(16000, partitions(recent_tool_pairs={"maximum": 230}))
    r = run(pair_request(), pol)
    validate(r.serialized_input, "openai_chat")
    calls, results = call_ids(r.serialized_input)
    assert calls == results and "c2" not in calls
    (c2,) = [p for p in r.manifest.tool_pairs if p.call_id == "c2"]
    assert c2.unresolved_handling == "omit_call"


# --------------------------------------------------------------------------- first


def test_background_goes_first_even_when_it_ranks_higher_than_evidence():
    # Room for one of the two: the background item is more relevant, the evidence still wins.
    pol = budget_policy(4200, partitions(control={"minimum": 0}, state={"minimum": 0}))
    pol["resident"]["include"] = []
    note = item("note", "editable_project_file", words(300, "n"), relevance=1.0)
    ev = item("ev", content=words(300, "e"), relevance=0.1)
    r = run(request([item("system", "system_policy", "rules"), note, ev], model=model(4200)), pol)
    assert "ev" in r.manifest.included_ids()
    assert reasons(r)["note"] == "budget_evicted"
    assert "eviction rule first" in excluded_record(r, "note").detail


# --------------------------------------------------------------------------- truncate_item and decision_compress


def transcript(n: int) -> str:
    return "\n".join(f"{'user' if i % 2 == 0 else 'assistant'}: turn {i} " + words(20, f"t{i}x") + f"\n  detail of turn {i}" for i in range(n))


def test_background_over_its_partition_is_truncated_to_its_newest_whole_turns():
    pol = budget_policy(16000, partitions(background={"maximum": 500}), allowed=["none", "excerpt", "summarize", "truncate_item"])
    notes = item("notes", "editable_project_file", transcript(20), kind="background")
    r = run(request(extra=[notes]), pol)
    inc = next(i for i in r.manifest.included if i.item_id == "notes")
    (t,) = [t for t in r.manifest.transforms if t.output_item_id == "notes"]
    assert (t.type, t.trigger, t.status) == ("truncate_item", "over_partition", "applied")
    assert set(t.preservation_assertions.values()) == {"passed"}
    first, last = (int(x) for x in inc.source_ref["turns"].split("-"))
    assert last == 20 and 1 < first <= 20  # the newest turns, a whole number of them
    body = delivered_blocks(r.serialized_input, r.manifest_dict())["notes"].split("\n", 1)[1]
    assert body.startswith(f"{'user' if (first - 1) % 2 == 0 else 'assistant'}: turn {first - 1} ")
    assert transcript(20).endswith(body)
    assert r.manifest.budget.partitions["background"].used <= 500


def test_without_truncate_item_allowed_background_is_evicted_whole():
    pol = budget_policy(16000, partitions(background={"maximum": 500}))
    r = run(request(extra=[item("notes", "editable_project_file", transcript(20), kind="background")]), pol)
    assert reasons(r)["notes"] == "budget_evicted" and not r.manifest.transforms


def test_a_truncation_that_cuts_inside_a_turn_is_caught(monkeypatch):
    from ctxeng.engine import transforms

    real = transforms.truncate_turns

    def mid_turn(asm, cand, room):
        out, ref = real(asm, cand, room)
        head, body = out.split("\n", 1)
        return head + "\n" + body.split("\n", 1)[1], ref  # drops the first line of the first kept turn

    monkeypatch.setattr(transforms, "truncate_turns", mid_turn)
    pol = budget_policy(16000, partitions(background={"maximum": 500}), allowed=["none", "truncate_item"])
    r = run(request(extra=[item("notes", "editable_project_file", transcript(20), kind="background")]), pol)
    assert "whole_turns_only" in excluded_record(r, "notes").failed_assertions


DECISION_LOG = "\n".join(
    [
        "Plan v6 for the article.",
        *(f"note {i}: " + words(25, f"n{i}x") for i in range(12)),
        "Decision: cover all five repositories.",
        "Reason: the task spec names five (plan-42@5).",
        "Source: https://example.org/spec#repos",
        *(f"more {i}: " + words(25, f"m{i}x") for i in range(12)),
        "Decision: cite fixed commits only.",
        "Because: reviewers re-check line ranges at pi@53fa77c.",
    ]
)


def test_state_over_its_partition_is_decision_compressed_before_it_is_summarized():
    pol = budget_policy(16000, partitions(state={"maximum": 600}), allowed=["none", "summarize", "decision_compress"])
    plan_item = item("plan", "runtime_state", DECISION_LOG, kind="research_plan", relevance=0.3)
    r = run(request(extra=[plan_item]), pol)
    assert "plan" in r.manifest.included_ids() and "structured-summary-state" not in r.manifest.included_ids()
    (t,) = [t for t in r.manifest.transforms if t.output_item_id == "plan"]
    assert (t.type, t.transformer_version, t.trigger) == ("decision_compress", "ctxeng-decision-compress/1", "over_partition")
    assert set(t.preservation_assertions.values()) == {"passed"}
    kept = delivered_blocks(r.serialized_input, r.manifest_dict())["plan"].split("\n")[1:]
    assert kept == [ln for ln in DECISION_LOG.split("\n") if ln.split(":")[0] in ("Decision", "Reason", "Source", "Because")]
    inc = next(i for i in r.manifest.included if i.item_id == "plan")
    assert inc.source_ref["lines"] == "14-16,29-30"


def test_without_decision_compress_allowed_state_goes_to_the_structured_summary():
    pol = budget_policy(16000, partitions(state={"maximum": 600}), allowed=["none", "summarize"])
    r = run(request(extra=[item("plan", "runtime_state", DECISION_LOG, kind="research_plan", relevance=0.3)]), pol)
    assert excluded_record(r, "plan").replaced_by == "structured-summary-state"


def test_a_decision_compression_that_drops_a_reason_is_caught(monkeypatch):
    from ctxeng.engine import transforms

    real = transforms.decision_compress

    def lossy(cand):
        out, ref = real(cand)
        return "\n".join(ln for ln in out.split("\n") if not ln.startswith("Because:")), ref

    monkeypatch.setattr(transforms, "decision_compress", lossy)
    pol = budget_policy(16000, partitions(state={"maximum": 600}), allowed=["none", "summarize", "decision_compress"])
    r = run(request(extra=[item("plan", "runtime_state", DECISION_LOG, kind="research_plan", relevance=0.3)]), pol)
    rec = excluded_record(r, "plan")
    assert rec.reason == "transform_blocked" and "decisions_and_reasons_kept" in rec.failed_assertions
