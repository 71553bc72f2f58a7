"""The budget's structured summary (transforms.structured_summary), one documented fact at a time.

State items over a `structured_summary` partition are replaced by a deterministic summary built
from them and `request.checkpoint`. Each case evicts a hand-chosen set of items (every plan here is
~700 tokens, over the 700-token state maximum, so all of them are evicted) and checks one line of
what the summary says, or one assertion it records, against what the request itself states.
"""

from __future__ import annotations

from tests.golden import delivered_blocks

from .builders import excluded_record, item, request, run
from .test_eviction import budget_policy, partitions, words

SUMMARY = "structured-summary-state"


def state_item(item_id: str, source_type: str = "runtime_state", **fields) -> dict:
    fields.setdefault("kind", "research_plan")
    return item(item_id, source_type, words(300, item_id[-1]), relevance=0.3, **fields)


def summarised(extra: list[dict], pol: dict | None = None, **fields):
    # A 300-word state item is ~620 tokens with its fence: a 560-token state partition holds none whole.
    r = run(request(extra=extra, **fields), pol or budget_policy(16000, partitions(state={"maximum": 560})))
    record = next(t for t in r.manifest.transforms if t.type == "summarize" and t.trigger == "over_partition")
    text = delivered_blocks(r.serialized_input, r.manifest_dict()).get(record.output_item_id) if r.serialized_input else None
    return r, record, text


def line(text: str, heading: str) -> str:
    return next(ln for ln in text.split("\n") if ln.startswith(heading + ":"))


def test_without_a_checkpoint_the_goal_is_the_first_line_of_the_goal_item():
    # base_items() has the goal "Find how tool calls are paired."
    _, _, text = summarised([state_item("plan-a")])
    assert line(text, "Goal") == "Goal: Find how tool calls are paired."


def test_without_a_checkpoint_or_a_goal_item_the_goal_points_to_the_task_items():
    pol = budget_policy(16000, partitions(state={"maximum": 560}))
    pol["resident"]["include"] = []
    cands = [item("system", "system_policy", "Be careful."), state_item("plan-a")]
    r = run(request(cands), pol)
    text = delivered_blocks(r.serialized_input, r.manifest_dict())[SUMMARY]
    assert line(text, "Goal") == "Goal: (in the task items)"


def test_the_stage_is_the_evicted_stage_items_first_line_else_the_requests_stage():
    _, _, text = summarised([state_item("plan-a")])
    assert line(text, "Current Stage") == "Current Stage: drafting"  # request(stage="drafting")
    stage = item("stage-2", "runtime_state", "verifying claims\nmore detail " + words(300, "s"), kind="current_stage", relevance=0.2)
    r, _, text = summarised([stage])
    assert excluded_record(r, "stage-2").replaced_by == SUMMARY
    assert line(text, "Current Stage") == "Current Stage: verifying claims"


def test_the_draft_revision_is_the_runtimes_when_no_evicted_item_is_a_draft():
    _, record, text = summarised([state_item("plan-a")], runtime_state={"article_draft_revision": 3})
    assert line(text, "Draft Revision") == "Draft Revision: 3"
    assert record.preservation_assertions["article_draft_revision"] == "not_applicable"


def test_the_draft_revision_is_the_newest_evicted_draft_and_is_checked():
    pol = budget_policy(16000, partitions(state={"maximum": 700, "kinds": [*partitions()["state"]["kinds"], "article_draft"]}))
    drafts = [state_item("draft-9", kind="article_draft", revision=9), state_item("draft-10", kind="article_draft", revision=10)]
    _, record, text = summarised(drafts, pol)
    assert line(text, "Draft Revision") == "Draft Revision: 10"
    assert record.preservation_assertions["article_draft_revision"] == "passed"


def test_open_items_are_the_checkpoints_then_the_evicted_items_each_once():
    checkpoint = {"goal": "g", "current_stage": "drafting", "open_item_ids": ["OI-1", "OI-7"], "input_item_ids": ["plan-a"]}
    _, record, text = summarised([state_item("plan-a", open_item_ids=["OI-7", "OI-8"])], checkpoint=checkpoint)
    assert line(text, "Open Items") == "Open Items: OI-1, OI-7, OI-8"
    assert record.preservation_assertions["open_items"] == "passed"


def test_summarising_governed_memory_would_raise_its_trust_so_the_summary_is_blocked():
    mem = state_item("mem-a", "memory_object", intended_role="state")
    r, record, _ = summarised([mem])
    assert record.preservation_assertions["trust_not_raised"] == "failed"
    assert record.status == "blocked" and record.output_digest is None and record.token_estimate_after is None
    assert excluded_record(r, "mem-a").replaced_by is None
    assert r.manifest.excluded_reasons().get(SUMMARY) == "transform_blocked"


def test_the_record_names_the_highest_trust_it_summarised_by_rank_not_by_name():
    # task_authority ranks above trusted_state, though "trusted_state" sorts after it by name.
    plans = [state_item("plan-a"), state_item("plan-b", "user_request", intended_role="task_intent")]
    r, record, _ = summarised(plans)
    assert {e for e in ("plan-a", "plan-b") if excluded_record(r, e).replaced_by == SUMMARY} == {"plan-a", "plan-b"}
    assert record.trust_before == "task_authority" and record.trust_after == "derived_context"


def test_the_summary_is_fetchable_by_its_own_ref_and_its_lineage_names_its_record():
    r, record, text = summarised([state_item("plan-a")])
    inc = next(i for i in r.manifest.included if i.item_id == SUMMARY)
    assert inc.source_ref == {"summary_id": SUMMARY, "partition": "state"}
    assert inc.source_lineage[-1].transform_record_id == record.record_id == inc.transform_record_id
    (s,) = [s for s in r.manifest.summaries if s.item_id == SUMMARY]
    assert s.transform_record_id == record.record_id and s.summary_id == SUMMARY


def test_a_candidate_already_named_like_the_summary_keeps_its_id_and_the_summary_takes_another():
    taken = item(SUMMARY, "runtime_state", "an unrelated state note", kind="current_stage", relevance=0.9)
    r, record, text = summarised([taken, state_item("plan-a")])
    assert record.output_item_id == f"{SUMMARY}-2"
    assert SUMMARY in r.manifest.included_ids() and f"{SUMMARY}-2" in r.manifest.included_ids()
    assert "plan-a" in text


def test_the_record_hashes_the_evicted_items_contents_and_its_own_output():
    from ctxeng.engine.hashing import sha256_json

    from .builders import sha

    plan = state_item("plan-a")
    r, record, text = summarised([plan])
    assert record.input_digest == sha256_json([["plan-a", sha(plan["content"])]])
    assert record.output_digest == sha(text)
    other = dict(plan, content=plan["content"] + " changed", content_hash=sha(plan["content"] + " changed"))
    assert summarised([other])[1].input_digest != record.input_digest


def test_the_negative_findings_of_evicted_items_are_carried_with_their_scope_and_checked():
    finding = "no vector retrieval found in planning-with-files (searched: README.md, docs/, skills/)"
    plan = item("plan-a", "runtime_state", f"{finding}\n" + words(300, "a"), kind="research_plan", relevance=0.3)
    _, record, text = summarised([plan])
    assert finding in line(text, "Conflicts and Negative Findings")
    assert record.preservation_assertions["conflicts_and_negative_findings"] == "passed"
    # an evicted item without a negative finding gives the assertion nothing to check
    _, record, _ = summarised([state_item("plan-b")])
    assert record.preservation_assertions["conflicts_and_negative_findings"] == "not_applicable"
