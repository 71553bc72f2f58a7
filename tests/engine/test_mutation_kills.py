"""Cases written for mutants that survived `make mutate` (docs/mutation.md).

Each test pins a behaviour the README states but no other test observed closely enough to notice a
wrong line: how much room a truncation gets when the usable budget (not the partition maximum)
binds, what a displaced item gives back, what a transform record says it did. The expected values
are written by hand from the request and the policy.
"""

from __future__ import annotations

import pytest

from tests.golden import delivered_blocks

from .builders import item, reasons, request, run, sha, tool_call, tool_result
from .test_decisions_pinned import FRAMING, block_order, ev, included, memo, open_policy, tight
from .test_eviction import DECISION_LOG, transcript

TRUNCATE = {"allowed": ["none", "truncate_item"], "preserve": ["goal", "open_items", "source_refs"]}


def notes(relevance: float = 0.1) -> dict:
    """A 20-turn transcript of about 2,000 tokens: it never fits whole in these budgets."""
    return item("notes", "editable_project_file", transcript(20), kind="background", relevance=relevance)


def truncated_turns(result) -> tuple[int, int]:
    rec = next(i for i in result.manifest.included if i.item_id == "notes")
    first, last = (int(x) for x in rec.source_ref["turns"].split("-"))
    return first, last


def test_a_truncation_gets_the_room_its_partition_maximum_leaves_beside_what_it_already_holds():
    # Background may hold 900; `bg0` (~200) is in it already, so the transcript is cut to fit ~700.
    pol, model = tight(3000, {"background": {"maximum": 900, "eviction": "first", "kinds": ["background"]}}, transforms=TRUNCATE)
    r = run(request([memo("bg0", 40, 0.9), notes()], model=model), pol)
    assert included(r) == {"bg0", "notes"}
    first, last = truncated_turns(r)
    assert last == 20 and first > 1
    assert r.manifest.budget.partitions["background"].used <= 900


def test_a_truncation_gets_only_the_usable_budget_left_after_other_partitions_unused_minimums():
    # No maximum: the usable budget binds. Evidence's unused minimum (300) is kept back for it.
    parts = {
        "direct_evidence": {"minimum": 300, "eviction": "reduce_candidates", "kinds": ["evidence"]},
        "background": {"eviction": "first", "kinds": ["background"]},
    }
    pol, model = tight(1200, parts, borrowing="preserve_all_minimums", transforms=TRUNCATE)
    r = run(request([memo("bg0", 40, 0.9), notes()], model=model), pol)
    assert included(r) == {"bg0", "notes"}
    budget = r.manifest.budget
    assert budget.partitions["background"].used <= budget.usable_input - 300


def test_a_displaced_items_tokens_are_given_back_to_the_budget():
    # Pass 1 fills evidence's minimum (450) with s1 (68) and s2 (348), not `big` (486); `big` displaces
    # s2 (lowest rank first). What s2 gave back is then room for the background transcript, cut to
    # its newest turns: 800 - 486 - 68 = 246 holds its newest turn (164 fenced), while 800 - 902,
    # had s2's tokens not been given back, holds nothing.
    parts = {
        "direct_evidence": {"minimum": 450, "eviction": "reduce_candidates", "kinds": ["evidence"]},
        "background": {"eviction": "first", "kinds": ["background"]},
    }
    pol, model = tight(FRAMING + 800, parts, transforms=TRUNCATE)
    r = run(request([ev("big", 230, 0.9), ev("s1", 20, 0.5), ev("s2", 140, 0.4), notes(0.05)], model=model), pol)
    assert reasons(r) == {"s2": "budget_evicted"}
    assert included(r) == {"big", "s1", "notes"}
    assert truncated_turns(r)[1] == 20


def test_a_truncation_records_its_objective_and_what_it_kept():
    pol, model = tight(3000, {"background": {"maximum": 900, "eviction": "first", "kinds": ["background"]}}, transforms=TRUNCATE)
    r = run(request([notes()], model=model), pol)
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "notes"]
    assert (record.type, record.objective, record.trigger, record.status) == (
        "truncate_item",
        "keep_the_newest_whole_turns",
        "over_partition",
        "applied",
    )
    assert record.input_item_ids == ["notes"]
    body = delivered_blocks(r.serialized_input, r.manifest_dict())["notes"].split("\n", 1)[1]
    assert transcript(20).endswith(body)
    assert record.token_estimate_after < record.token_estimate_before


def test_a_decision_compression_records_its_objective():
    parts = {
        "state": {"maximum": 600, "eviction": "structured_summary", "kinds": ["research_plan"]},
        "background": {"eviction": "first", "kinds": ["background"]},
    }
    pol, model = tight(3000, parts, transforms={"allowed": ["none", "decision_compress"], "preserve": ["goal", "open_items", "source_refs"]})
    plan = item("plan", "runtime_state", DECISION_LOG, kind="research_plan")
    r = run(request([plan], model=model), pol)
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "plan"]
    assert (record.type, record.objective) == ("decision_compress", "keep_decisions_reasons_and_source_refs")
    assert "plan" in included(r)


def test_a_truncation_that_drops_the_newest_turn_fails_newest_turn_kept(monkeypatch):
    from ctxeng.engine import transforms

    real = transforms.truncate_turns

    def without_newest(asm, cand, room):
        out, ref = real(asm, cand, room)
        return out.rsplit("\nassistant: turn 19 ", 1)[0], ref  # the last turn (19, an assistant turn) is gone

    monkeypatch.setattr(transforms, "truncate_turns", without_newest)
    pol, model = tight(3000, {"background": {"maximum": 900, "eviction": "first", "kinds": ["background"]}}, transforms=TRUNCATE)
    r = run(request([notes()], model=model), pol)
    rec = next(e for e in r.manifest.excluded if e.item_id == "notes")
    assert "newest_turn_kept" in rec.failed_assertions


def test_the_structured_summary_names_each_unresolved_call_and_checks_it():
    from .test_eviction import budget_policy, partitions, plan

    pol = budget_policy(16000, partitions(state={"maximum": 400}))  # 35 resident + plan-a 614 > 400
    r = run(request(extra=[plan("plan-a", 300, ["OI-7"])], tool_calls=[tool_call("lost-call", None)]), pol)
    (t,) = [t for t in r.manifest.transforms if t.output_item_id == "structured-summary-state"]
    assert t.preservation_assertions["unresolved_tool_calls"] == "passed"
    summary = delivered_blocks(r.serialized_input, r.manifest_dict())["structured-summary-state"]
    assert "lost-call" in summary


def test_a_canceled_or_failed_call_and_a_synthetic_result_are_errors_and_a_success_is_not():
    results = [tool_result("ok", "c-ok"), tool_result("cx", "c-cx"), tool_result("er", "c-er")]
    calls = [tool_call("c-ok", "ok"), tool_call("c-cx", "cx", status="canceled"), tool_call("c-er", "er", status="error"), tool_call("c-lost", None)]
    r = run(request(extra=results, tool_calls=calls))
    assert {p["call_id"]: p["is_error"] for p in r.assembly_input["tool_pairs"]} == {"c-ok": False, "c-cx": True, "c-er": True, "c-lost": True}
    r = run(request(extra=results, tool_calls=calls, adapter="anthropic_messages"))
    flags = {b["tool_use_id"]: b["is_error"] for m in r.serialized_input["messages"] if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"}
    assert flags == {"c-ok": False, "c-cx": True, "c-er": True, "c-lost": True}


def test_the_assembly_input_is_format_v2_and_every_block_is_a_tagless_fence():
    r = run(request(extra=[ev("ev", 5, 0.9)]))
    assert r.manifest.assembly.data_fence_nonce == ""
    assert r.assembly_input["format"] == "ctxeng-assembly-input/v2"
    assert all(b["text"].startswith("<<<ctx ") and b["text"].endswith("\n<<<ctx:end>>>") for b in r.assembly_input["blocks"])


def test_evidence_priority_ranks_by_kind_when_it_is_the_only_factor():
    # Same source, trust and relevance; only the kind differs: evidence (direct) before background.
    pol = open_policy()
    pol["admission"]["ranking"] = ["evidence_priority"]
    pol["budget"]["partitions"]["direct_evidence"]["kinds"] = ["evidence", "official_document", "background"]
    pol["budget"]["partitions"]["background"]["kinds"] = ["trace", "memory"]
    cands = [item("a-bg", "repository_source", "a note", kind="background"), item("z-ev", "repository_source", "a finding")]
    assert block_order(run(request(cands), pol)) == ["z-ev", "a-bg"]


def _summarised(extra: list, **fields):
    from .test_eviction import budget_policy, partitions

    pol = budget_policy(16000, partitions(state={"maximum": 560}))  # a 300-word state item (~620 tokens) does not fit whole
    r = run(request(extra=extra, **fields), pol)
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "structured-summary-state"]
    return r, record, delivered_blocks(r.serialized_input, r.manifest_dict())["structured-summary-state"]


def test_the_structured_summary_records_each_documented_assertion_by_name():
    from .test_eviction import plan

    _, record, _ = _summarised([plan("plan-a", 300, ["OI-7"])])
    assert record.preservation_assertions == {
        "input_items": "passed",
        "input_digests_present": "passed",
        "goal": "passed",
        "current_stage": "passed",
        "open_items": "passed",
        "article_draft_revision": "not_applicable",  # no article draft among the evicted items
        "artifact_refs": "not_applicable",  # no artifact among them
        "unresolved_tool_calls": "not_applicable",  # every call has its result
        "trust_not_raised": "passed",
        "conflicts_and_negative_findings": "not_applicable",  # no evicted item states a negative finding
    }


def test_the_structured_summary_names_the_artifacts_it_replaces():
    from .test_eviction import words

    plan_artifact = item(
        "plan-a", "runtime_state", words(300, "a"), kind="research_plan", relevance=0.3,
        source_ref={"object_id": "plan-a", "artifact_id": "plan-42", "revision": 5}, revision=5,
    )
    _, record, text = _summarised([plan_artifact])
    assert record.preservation_assertions["artifact_refs"] == "passed"
    assert "plan-42@5" in text


def test_the_structured_summary_carries_the_checkpoints_unresolved_calls():
    from .test_eviction import plan

    checkpoint = {
        "goal": "Find how tool calls are paired.",
        "current_stage": "drafting",
        "unresolved_tool_calls": ["old-call-9"],
        "input_item_ids": ["plan-a"],
    }
    _, record, text = _summarised([plan("plan-a", 300, ["OI-7"])], checkpoint=checkpoint)
    assert "old-call-9" in text
    assert record.preservation_assertions["unresolved_tool_calls"] == "passed"


def test_evidence_priority_orders_direct_evidence_official_documents_and_background():
    pol = open_policy()
    pol["admission"]["ranking"] = ["evidence_priority"]
    pol["budget"]["partitions"]["direct_evidence"]["kinds"] = ["evidence", "official_document", "background"]
    pol["budget"]["partitions"]["background"]["kinds"] = ["trace", "memory"]
    cands = [
        item("a-bg", "repository_source", "a note", kind="background"),
        item("b-doc", "repository_source", "a manual page", kind="official_document"),
        item("z-ev", "repository_source", "a finding"),
    ]
    assert block_order(run(request(cands), pol)) == ["z-ev", "b-doc", "a-bg"]


def test_a_permission_revoked_event_asks_for_the_permission_to_be_granted_again():
    events = [{"event": "permission_revoked", "item_id": "ev"}]
    r = run(request(extra=[ev("ev", 5, 0.9)], lifecycle_events=events))
    rec = next(e for e in r.manifest.excluded if e.item_id == "ev")
    assert (rec.reason, rec.refresh_condition) == ("permission_denied", "permission_granted_again")
    assert "permission_revoked" in rec.detail


def test_memory_in_the_state_role_is_recorded_as_fenced_as_state():
    mem = item("mem", "memory_object", "The user prefers short answers.", intended_role="state", kind="memory")
    r = run(request(extra=[mem]))
    rec = next(i for i in r.manifest.included if i.item_id == "mem")
    assert rec.security_assessment["external_instruction_isolation"] == "fenced_as_state"
    assert rec.zone == "state"


def test_the_checkpoint_summary_writes_every_section_and_none_for_an_empty_one():
    from ctxeng.engine.models import CheckpointState
    from ctxeng.engine.transforms import render_checkpoint

    empty = CheckpointState(goal="Find how tool calls are paired.", current_stage="drafting", input_item_ids=["plan-a"])
    assert render_checkpoint(empty).split("\n") == [
        "Goal: Find how tool calls are paired.",
        "Hard Constraints: none",
        "Current Stage: drafting",
        "Done / In Progress / Blocked: done: none | in progress: none | blocked: none",
        "Confirmed Claims: none",
        "Conflicts and Negative Findings: none",
        "Open Items: none",
        "Draft Revision: none",
        "Unresolved Tool Calls: none",
        "Next Steps: none",
        "Artifact / Checkpoint Refs: none",
    ]
    full = CheckpointState(
        input_item_ids=["plan-a"],
        goal="g",
        current_stage="s",
        constraints=["c1", "c2"],
        done=["d"],
        in_progress=["p"],
        blocked=["b"],
        confirmed_claims=[{"claim": "pairs by id", "source_ref": {"repo": "pi", "commit": "c0ffee", "path": "a.ts", "lines": "1-2"}}],
        open_item_ids=["OI-1", "OI-2"],
        draft_revision=4,
        unresolved_tool_calls=["call-1"],
        next_steps=["n"],
        artifact_refs=["plan-42@5"],
    )
    lines = render_checkpoint(full).split("\n")
    assert lines[1] == "Hard Constraints: c1; c2"
    assert lines[3] == "Done / In Progress / Blocked: done: d | in progress: p | blocked: b"
    assert lines[4] == "Confirmed Claims: pairs by id [pi@c0ffee:a.ts:1-2]"
    assert lines[6:] == [
        "Open Items: OI-1, OI-2",
        "Draft Revision: 4",
        "Unresolved Tool Calls: call-1",
        "Next Steps: n",
        "Artifact / Checkpoint Refs: plan-42@5",
    ]


def test_tool_pairs_go_to_the_partition_that_lists_tool_call_when_none_lists_tool_result():
    pol = open_policy()
    pol["budget"]["partitions"]["recent_tool_pairs"]["kinds"] = ["tool_call"]
    r = run(request([tool_result("r1", "c1")], tool_calls=[tool_call("c1", "r1")]), pol)
    parts = r.manifest.budget.partitions
    assert parts["recent_tool_pairs"].used > 0 and parts["background"].used == 0


def test_a_usable_input_of_one_token_blocks_naming_the_budget():
    pol, model = tight(1, {"direct_evidence": {"eviction": "reduce_candidates", "kinds": ["evidence"]}})
    r = run(request([ev("ev", 5, 0.9)], model=model), pol)
    assert r.manifest.assembly.status == "blocked"
    assert r.manifest.assembly.blocked_reason == "required_partition_missing"
    assert r.manifest.assembly.blocked_detail[0].startswith("budget_exhausted: ")
    assert r.manifest.assembly.missing == ["budget.usable_input"]


def test_a_tool_pair_over_a_structured_summary_partition_is_evicted_whole_and_its_call_answered():
    parts = {
        "state": {"maximum": 200, "eviction": "structured_summary", "kinds": ["research_plan", "tool_call", "tool_result"]},
        "background": {"eviction": "first", "kinds": ["background"]},
    }
    pol, model = tight(3000, parts)
    r = run(request([tool_result("r1", "c1", " ".join(f"x{i}" for i in range(200)))], tool_calls=[tool_call("c1", "r1")], model=model), pol)
    assert r.manifest.assembly.status == "ready"
    assert reasons(r) == {"r1": "budget_evicted"}
    (pair,) = r.manifest.tool_pairs
    assert (pair.decision, pair.unresolved_handling) == ("excluded", "synthetic_result")
    tool_message = next(m for m in r.serialized_input["messages"] if m["role"] == "tool")
    assert "evicted by the token budget" in tool_message["content"] and "x199" not in tool_message["content"]


def _summary(item_id: str = "sum", content: str = "Goal: g\nOI-1", **fields) -> dict:
    base = {
        "input_item_ids": ["ev"],
        "source_refs": [{"repo": "pi", "commit": "c0ffee", "path": "src/ev.ts", "lines": "2-5"}],
        "preserves": {"open_item_ids": ["OI-1"]},
        "producer": "agent/v1",
    }
    base.update(fields)
    return item(item_id, "model_summary", content, **base)


def test_a_verified_supplied_summary_records_its_own_digest_as_the_output():
    r = run(request(extra=[item("ev"), _summary()]))
    assert "sum" in included(r)
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    assert record.status == "verified" and record.trigger == "supplied"
    assert record.output_digest == sha("Goal: g\nOI-1")


def test_a_supplied_summary_naming_no_inputs_fails_inputs_resolve_by_name():
    r = run(request(extra=[item("ev"), _summary(input_item_ids=[])]))
    rec = next(e for e in r.manifest.excluded if e.item_id == "sum")
    assert rec.reason == "transform_blocked"
    assert {"input_items", "inputs_resolve"} <= set(rec.failed_assertions)
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    assert record.output_digest is None  # a summary that failed produced no admitted output


def test_the_structured_summary_shortens_a_long_goal_line_with_an_ellipsis():
    from .builders import base_items
    from .test_eviction import plan

    long_goal = "Find " + "x" * 300
    cands = [c if c["item_id"] != "goal" else item("goal", "user_request", long_goal, kind="goal") for c in base_items()]
    _, _, text = _summarised([], candidates=cands + [plan("plan-a", 300, ["OI-7"])])
    (goal_line,) = [ln for ln in text.split("\n") if ln.startswith("Goal: ")]
    assert goal_line == "Goal: " + long_goal[:199] + "…"


def test_a_verified_supplied_summary_records_its_declared_input_range():
    summary = _summary(input_item_ids=["ev", "ev2"], input_range={"start_item_id": "ev", "end_item_id": "ev2"})
    r = run(request(extra=[item("ev"), item("ev2"), summary]))
    assert "sum" in included(r)
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    assert (record.input_range.start_item_id, record.input_range.end_item_id) == ("ev", "ev2")


def test_a_redaction_record_shows_the_redacted_text_after():
    text = "config line before\nkey = AKIAIOSFODNN7EXAMPLE\nconfig line after"
    r = run(request(extra=[item("cfg", "repository_source", text, relevance=0.9)]))
    (record,) = [t for t in r.manifest.transforms if t.type == "redact"]
    assert record.after_excerpt == "config line before\nkey = [ctxeng:redacted credential]\nconfig line after"


def test_a_claims_source_label_leaves_out_lines_it_does_not_have():
    from ctxeng.engine.models import CheckpointState
    from ctxeng.engine.transforms import render_checkpoint

    state = CheckpointState(
        input_item_ids=["plan-a"], goal="g", current_stage="s",
        confirmed_claims=[{"claim": "pairs by id", "source_ref": {"repo": "pi", "commit": "c0ffee", "path": "a.ts"}}],
    )
    assert "Confirmed Claims: pairs by id [pi@c0ffee:a.ts:]" in render_checkpoint(state).split("\n")


def test_an_item_truncation_cannot_shorten_enough_is_evicted_not_delivered():
    # One ~2,000-token line: no whole turn fits the 900-token background maximum, so truncation
    # gives up; the item must then be evicted like any other that does not fit.
    pol, model = tight(3000, {"background": {"maximum": 900, "eviction": "first", "kinds": ["background"]}}, transforms=TRUNCATE)
    one_line = item("blob", "editable_project_file", " ".join(f"w{i}" for i in range(900)), kind="background")
    r = run(request([memo("bg0", 40, 0.9), one_line], model=model), pol)
    assert reasons(r) == {"blob": "budget_evicted"}
    assert "blob" not in delivered_blocks(r.serialized_input, r.manifest_dict())


def test_a_partitions_item_count_is_the_number_of_items_it_delivers():
    pol, model = tight(3000, {"background": {"eviction": "first", "kinds": ["background"]}, "direct_evidence": {"eviction": "reduce_candidates", "kinds": ["evidence"]}})
    r = run(request([memo("a", 5), memo("b", 5), memo("c", 5), ev("e", 5, 0.5)], model=model), pol)
    parts = r.manifest.budget.partitions
    assert (parts["background"].items, parts["direct_evidence"].items) == (3, 1)


def test_a_malformed_policy_file_is_refused_as_a_policy():
    import pytest

    from ctxeng.engine.errors import InvalidInput, load_yaml_text

    with pytest.raises(InvalidInput) as exc:
        load_yaml_text("a: [1, 2", what="policy")
    assert str(exc.value).startswith("invalid policy: body: malformed YAML (")


# --------------------------------------------------------------------------- survivors of the fresh sample of 2026-11-30
# Written after that sample was judged (docs/mutation.md): they do not count in its score.


def test_a_successful_result_that_is_only_diagnostic_says_so_to_the_model():
    from types import SimpleNamespace

    from ctxeng.engine.render import header_text
    from ctxeng.engine.vocabulary import EvidenceUse, Role, ToolResultStatus

    def header(status, use):
        item = SimpleNamespace(item_id="r", kind="tool_result", source_ref={"tool_name": "grep"}, revision=None, call_id="c1")
        return header_text(SimpleNamespace(item=item, role=Role.UNTRUSTED_DATA, result_status=status, evidence_use=use))

    # In its tool message a result says only its trust, and its status and use when they are not plain.
    assert header(ToolResultStatus.SUCCESS, EvidenceUse.CONFIRMED_BY_POLICY) == " untrusted>>>\n"
    assert header(ToolResultStatus.SUCCESS, EvidenceUse.DIAGNOSTIC_ONLY) == " untrusted diagnostic_only>>>\n"
    assert header(ToolResultStatus.ERROR, EvidenceUse.DIAGNOSTIC_ONLY) == " untrusted status=error diagnostic_only>>>\n"


def test_a_system_message_written_as_text_parts_is_read_as_its_text():
    from types import SimpleNamespace

    from ctxeng.engine.checks import serialization_checks
    from ctxeng.engine.render import DATA_BOUNDARY_NOTICE
    from ctxeng.engine.vocabulary import SerializationPreserve, Zone

    asm = SimpleNamespace(policy=SimpleNamespace(serialization=SimpleNamespace(preserve=[SerializationPreserve.INSTRUCTION_DATA_BOUNDARY])))
    rules = SimpleNamespace(content="Be careful.", zone=Zone.CONTROL)
    parts = [{"type": "text", "text": "Be careful.\n\n"}, {"type": "text", "text": DATA_BOUNDARY_NOTICE}]
    payload = {"messages": [{"role": "system", "content": parts}], "tools": []}
    assert serialization_checks(asm, [rules], payload) == {"instruction_data_boundary": "passed"}


def test_a_text_body_with_a_lone_surrogate_is_refused_by_path_not_a_crash():
    from ctxeng.engine.errors import InvalidInput, loads_bounded

    with pytest.raises(InvalidInput) as refused:
        loads_bounded('{"a": "\ud800"}')
    assert refused.value.errors == [
        "a: contains a lone surrogate (\\ud800), which is no Unicode character; send text that UTF-8 can encode"]


def test_an_artifact_that_could_not_be_loaded_is_named_with_its_revision():
    ghost = item("plan", "editable_project_file", kind="research_plan", source_ref={"artifact_id": "plan-42", "revision": 5}, artifact_ref={"artifact_id": "plan-42", "revision": 5})
    ghost["content"] = None
    ghost["content_hash"] = sha("plan v5")
    r = run(request([*request()["candidates"], ghost]))
    assert next(e for e in r.manifest.excluded if e.item_id == "plan").detail == "artifact plan-42@5 could not be loaded"


def test_a_role_refused_by_role_limits_names_the_roles_that_trust_may_take():
    odd = item("ev", content="x", intended_role="state")
    r = run(request([*request()["candidates"], odd]))
    rec = next(e for e in r.manifest.excluded if e.item_id == "ev")
    assert rec.detail == "trust 'repository_evidence' may not take role 'state' (allowed: untrusted_data)"


def test_a_go_log_holding_only_a_build_failure_is_read_as_go_test():
    from ctxeng.engine.logformats import read_failures

    log = "# example.com/pkg\n./a.go:3:1: syntax error: unexpected }\nFAIL\texample.com/pkg [build failed]\n"
    f = read_failures(log)
    assert (f.format, f.needles) == ("go_test", ("FAIL\texample.com/pkg [build failed]",))


def test_an_invalid_request_is_named_as_a_request():
    import pytest

    from ctxeng.engine import parse_request
    from ctxeng.engine.errors import InvalidInput

    bad = request()
    del bad["run_id"]
    with pytest.raises(InvalidInput) as exc:
        parse_request(bad)
    assert str(exc.value) == "invalid request: run_id: field required"


def test_the_assembly_input_names_each_tool_results_item():
    r = run(request(extra=[tool_result("r1", "c1")], tool_calls=[tool_call("c1", "r1"), tool_call("lost", None)]))
    results = {p["call_id"]: p["result"] for p in r.assembly_input["tool_pairs"]}
    assert (results["c1"]["item_id"], results["c1"]["synthetic"]) == ("r1", False)
    assert (results["lost"]["item_id"], results["lost"]["synthetic"]) == (None, True)


def test_a_synthetic_result_tells_the_model_why_the_call_has_no_result():
    import json

    r = run(request(tool_calls=[tool_call("lost", None)]))
    (pair,) = r.assembly_input["tool_pairs"]
    body = json.loads(pair["result"]["text"])
    assert body["ctxeng_synthetic_result"] is True and body["call_id"] == "lost" and body["status"] == "unknown"
    assert body["reason"]


def test_the_budget_record_states_each_partitions_maximum_from_the_policy():
    from .builders import policy

    parts = run(request()).manifest.budget.partitions
    want = {n: p.get("maximum") for n, p in policy()["budget"]["partitions"].items()}
    assert {n: p.maximum for n, p in parts.items()} == want


def test_a_code_excerpt_without_a_body_line_is_not_non_empty():
    from ctxeng.engine.models import ContextItem
    from ctxeng.engine.source_limits import check_code
    from ctxeng.engine.working import Candidate

    it = ContextItem.model_validate(item("ev", content="a\nb"))
    c = Candidate(item=it, order=0, content="a\nb", trust=it.trust)
    assert check_code(c, f"[excerpt {it.content_hash}]", {"lines": "1-1"})["non_empty"] == "failed"


def test_a_source_limit_reduction_that_fails_says_which_assertions_failed():
    pol = policy_with_log_limit()
    log = item("log", "ci_log", "collected 1 item\ntests/t.py::test_x FAILED\n1 failed", source_ref={"path": "ci/run-7.txt"})
    r = run(request([*request()["candidates"], log]), pol)
    rec = next(e for e in r.manifest.excluded if e.item_id == "log")
    assert (rec.reason, rec.detail) == ("transform_blocked", "preservation assertions failed: artifact_ref_present")


def policy_with_log_limit() -> dict:
    from .builders import policy

    pol = policy()
    pol["source_limits"] = {"ci_log": {"default": "failures_plus_artifact_ref"}}
    return pol


def test_the_structured_summary_check_fails_a_text_missing_an_evicted_artifact():
    from types import SimpleNamespace

    from ctxeng.engine.models import ContextItem
    from ctxeng.engine.transforms import check_structured_summary
    from ctxeng.engine.working import Candidate

    it = ContextItem.model_validate(item("plan", "runtime_state", "p", kind="research_plan", source_ref={"object_id": "plan", "artifact_id": "plan-42", "revision": 5}))
    c = Candidate(item=it, order=0, content="p", trust=it.trust)
    asm = SimpleNamespace(request=SimpleNamespace(checkpoint=None, runtime_state=None), pairs=[])
    text = f"Goal: g\nCurrent Stage: s\nReplaced Items: plan ({it.content_hash})"
    assert check_structured_summary(asm, text, [c], ["plan"])["artifact_refs"] == "failed"
    assert check_structured_summary(asm, text + " plan-42@5", [c], ["plan"])["artifact_refs"] == "passed"


def test_a_summary_of_two_inputs_is_checked_and_hashed_against_both():
    from ctxeng.engine.hashing import sha256_json

    one = item("ev1", content="first", source_ref={"repo": "pi", "commit": "c0ffee", "path": "src/one.ts", "lines": "1-20"})
    two = item("ev2", content="second", source_ref={"repo": "pi", "commit": "c0ffee", "path": "src/two.ts", "lines": "1-20"})
    s = item("sum", "model_summary", "Goal: g\nOpen Items: OI-1", input_item_ids=["ev1", "ev2"], producer="agent/v2",
             source_refs=[{"repo": "pi", "commit": "c0ffee", "path": "src/two.ts", "lines": "3-4"}], preserves={"open_item_ids": ["OI-1"]})
    r = run(request(extra=[one, two, s]))
    assert "sum" in r.manifest.included_ids()
    t = next(t for t in r.manifest.transforms if t.output_item_id == "sum")
    assert t.preservation_assertions["source_refs_within_inputs"] == "passed"
    assert t.input_digest == sha256_json([["ev1", sha("first")], ["ev2", sha("second")]])


def test_a_code_excerpt_of_a_file_without_a_declared_range_says_it_is_cut_from_the_whole_file():
    from .builders import policy

    pol = policy()
    pol["source_limits"] = {"ci_code": {"default": "excerpt_with_line_range", "max_tokens": 100}}
    body = "\n".join(f"line {i} pairing calls" for i in range(200))
    r = run(request(extra=[item("cc", "ci_code", body, source_ref={"path": "x.py"})]), pol)
    head = delivered_blocks(r.serialized_input, r.manifest_dict())["cc"].split("\n", 1)[0]
    kept = next(i for i in r.manifest.included if i.item_id == "cc").source_ref["lines"]
    assert head.startswith(f"[excerpt at source: lines {kept} of 1-200 (")


# --------------------------------------------------------------------------- survivors of fresh sample B of 2026-11-30
# Written after sample B was judged: they do not count in its score.


def test_an_openai_assistant_message_carrying_calls_has_null_content():
    r = run(request(extra=[tool_result("r1", "c1")], tool_calls=[tool_call("c1", "r1")]))
    (msg,) = [m for m in r.serialized_input["messages"] if m.get("tool_calls")]
    assert msg["role"] == "assistant" and "content" in msg and msg["content"] is None


def test_a_developer_message_first_is_read_as_the_system_text():
    from types import SimpleNamespace

    from ctxeng.engine.checks import serialization_checks
    from ctxeng.engine.render import DATA_BOUNDARY_NOTICE
    from ctxeng.engine.vocabulary import SerializationPreserve, Zone

    asm = SimpleNamespace(policy=SimpleNamespace(serialization=SimpleNamespace(preserve=list(SerializationPreserve))))
    rules = SimpleNamespace(content="Be careful.", zone=Zone.CONTROL)
    payload = {"messages": [{"role": "developer", "content": "Be careful.\n\n" + DATA_BOUNDARY_NOTICE}, {"role": "user", "content": "x"}], "tools": []}
    assert set(serialization_checks(asm, [rules], payload).values()) == {"passed"}


def test_a_source_type_without_ref_rules_needs_some_source_ref():
    from ctxeng.engine.gates import _ref_complete

    assert _ref_complete("something_new", {}) == (False, "source_ref is empty")


def test_without_a_given_time_the_manifest_is_stamped_in_utc_seconds():
    import re

    from ctxeng.engine import assemble, parse_policy, parse_request

    from .builders import policy

    m = assemble(parse_request(request()), parse_policy(policy())).manifest
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(m.assembly.created_at).replace("+00:00", "Z"))


def test_a_budget_evicted_record_states_the_tokens_it_would_have_cost():
    pol, model = tight(400, {"direct_evidence": {"eviction": "reduce_candidates", "kinds": ["evidence"]}})
    r = run(request([ev("big", 300, 0.9)], model=model), pol)
    rec = next(e for e in r.manifest.excluded if e.item_id == "big")
    assert rec.reason == "budget_evicted" and rec.tokens and rec.tokens > 400


def test_a_blocked_source_limit_reduction_records_no_output():
    pol = policy_with_log_limit()
    log = item("log", "ci_log", "collected 1 item\ntests/t.py::test_x FAILED\n1 failed", source_ref={"path": "ci/run-7.txt"})
    r = run(request([*request()["candidates"], log]), pol)
    (t,) = [t for t in r.manifest.transforms if t.output_item_id == "log"]
    assert (t.status, t.output_digest, t.token_estimate_after, t.after_excerpt) == ("blocked", None, None, "")


def test_the_decision_compression_check_reads_refs_on_the_first_kept_line_too():
    from ctxeng.engine.models import ContextItem
    from ctxeng.engine.transforms import check_decision_compression, decision_compress
    from ctxeng.engine.working import Candidate

    text = "intro\nDecision: use B (https://x.example/b)\nReason: faster"
    it = ContextItem.model_validate(item("plan", "runtime_state", text, kind="research_plan"))
    c = Candidate(item=it, order=0, content=text, trust=it.trust)
    out, _ = decision_compress(c)
    assert check_decision_compression(c, out)["source_refs_kept"] == "passed"
    assert check_decision_compression(c, out.replace(" (https://x.example/b)", ""))["source_refs_kept"] == "failed"


def test_summarising_state_of_equal_trust_does_not_raise_it():
    from .test_eviction import budget_policy, partitions, words

    notes = item("notes-a", "editable_project_file", words(300, "n"), kind="research_plan", relevance=0.3)
    r = run(request(extra=[notes]), budget_policy(16000, partitions(state={"maximum": 560})))
    (t,) = [t for t in r.manifest.transforms if t.output_item_id == "structured-summary-state"]
    assert t.preservation_assertions["trust_not_raised"] == "passed" and t.status == "applied"


def test_a_go_log_with_only_run_lines_and_a_panic_is_read_as_go_test():
    from ctxeng.engine.logformats import read_failures

    f = read_failures("=== RUN   TestPairs\npanic: runtime error: index out of range\n")
    assert (f.format, f.needles) == ("go_test", ("panic: runtime error: index out of range",))


def test_a_jest_log_known_only_by_its_summary_line_is_read_as_jest():
    from ctxeng.engine.logformats import read_failures

    assert read_failures("Tests:       1 failed, 2 passed, 3 total\n").format == "jest"


def test_an_items_artifact_revision_comes_from_its_artifact_ref_first():
    from ctxeng.engine.lifecycle import named_artifact
    from ctxeng.engine.models import ContextItem

    it = ContextItem.model_validate(item("plan", "editable_project_file", "p", source_ref={"artifact_id": "plan-42", "revision": 5},
                                         artifact_ref={"artifact_id": "plan-42", "revision": 6}, revision=4))
    assert named_artifact(it) == ("plan-42", "6")
    it = ContextItem.model_validate(item("plan", "editable_project_file", "p", source_ref={"artifact_id": "plan-42", "revision": 5}, revision=4))
    assert named_artifact(it) == ("plan-42", "5")
    it = ContextItem.model_validate(item("plan", "editable_project_file", "p", source_ref={"artifact_id": "plan-42"}, revision=4))
    assert named_artifact(it) == ("plan-42", "4")


def test_a_request_with_exactly_the_candidate_limit_is_read(monkeypatch):
    import pytest

    from ctxeng.engine import parse_request
    from ctxeng.engine import policy as policy_module
    from ctxeng.engine.errors import InvalidInput

    monkeypatch.setattr(policy_module, "MAX_CANDIDATES", 5)
    assert len(parse_request(request()).candidates) == 5
    with pytest.raises(InvalidInput) as exc:
        parse_request(request(extra=[item("ev")]))
    assert exc.value.errors == ["candidates: 6 candidates, more than the limit 5"]


# --------------------------------------------------------------------------- survivors of fresh sample C of 2026-11-30
# Written after sample C was judged: not measured by any sample.


def test_a_blocked_structured_summary_is_recorded_as_excluded():
    from .test_eviction import budget_policy, partitions, words

    mem = item("mem-a", "memory_object", words(300, "m"), kind="research_plan", intended_role="state", relevance=0.3)
    r = run(request(extra=[mem]), budget_policy(16000, partitions(state={"maximum": 560})))
    (s,) = [s for s in r.manifest.summaries if s.item_id == "structured-summary-state"]
    assert s.decision == "excluded"


def test_a_supplied_summary_that_fails_records_no_size_after():
    s = item("sum", "model_summary", "Goal: g", input_item_ids=["turn-1"], producer="", source_refs=[{"repo": "pi", "commit": "c"}],
             input_range={"start_item_id": "turn-1", "end_item_id": "turn-1"}, preserves={"open_item_ids": ["OI-1"]})
    r = run(request(extra=[s]))
    t = next(t for t in r.manifest.transforms if t.output_item_id == "sum")
    assert (t.status, t.output_digest, t.token_estimate_after) == ("blocked", None, None)
    assert t.token_estimate_before and t.token_estimate_before > 0


def test_a_part_present_twice_is_not_the_text_made_of_it_once():
    from ctxeng.engine.checks import _only

    assert not _only("A A", ["A"])


def test_a_role_limit_detail_lists_every_allowed_role_comma_separated():
    memo_in_control = item("mem", "memory_object", "remember this", intended_role="task_intent")
    r = run(request([*request()["candidates"], memo_in_control]))
    rec = next(e for e in r.manifest.excluded if e.item_id == "mem")
    assert rec.detail.endswith("(allowed: state, untrusted_data, derived_context)")


# --------------------------------------------------------------------------- survivors of the fresh sample of 2026-12-02 (seed 795277)
# Written after that sample was judged (docs/mutation.md): they do not count in its score.


def _evidence_candidate():
    from ctxeng.engine.models import ContextItem
    from ctxeng.engine.working import Candidate

    ref = {"repo": "pi", "commit": "c0ffee1234", "path": "src/a.ts", "lines": "1-5"}
    it = ContextItem.model_validate(item("ev", content="body", source_ref=ref))
    return Candidate(item=it, order=0, content="body", trust=it.trust)


def test_a_header_built_for_a_reduction_to_come_names_the_reductions_source_not_the_items():
    from ctxeng.engine.render import header_text

    c = _evidence_candidate()
    # ` <cite> <kind> <trust>[ <source>]>>>`: the source word is the ref given, when one is given.
    assert header_text(c) == " ev evidence untrusted pi@c0ffee1234:src/a.ts#L1-5>>>\n"
    assert header_text(c, source_ref={"url": "https://docs.example/x"}) == " ev evidence untrusted https://docs.example/x>>>\n"


def test_a_blocks_middle_is_the_header_it_is_given_then_the_body():
    from ctxeng.engine.render import block_middle

    c = _evidence_candidate()
    assert block_middle(c, " ev evidence untrusted reduced>>>\n") == " ev evidence untrusted reduced>>>\nbody\n"
    assert block_middle(c) == " ev evidence untrusted pi@c0ffee1234:src/a.ts#L1-5>>>\nbody\n"


def _example_manifest(model: dict | None = None, *, without_source: str | None = None):
    """The worked example's manifest, with `model` fields changed and the candidates of one
    source type left out (`without_source`)."""
    from .test_calibration import example
    from .test_calibration import run as run_example

    request, pol = example(model)
    if without_source is not None:
        request = request.model_copy(update={"candidates": [c for c in request.candidates if c.source_type != without_source]})
    return run_example(request, pol).manifest


def _claude_example(context_limit: int):
    from .test_calibration import CLAUDE

    return _example_manifest({**CLAUDE, "context_limit": context_limit})


def _no_room(manifest) -> str:
    return next(d for d in manifest.assembly.blocked_detail if "leaves no room for any input" in d)


def test_no_room_for_any_input_under_a_calibration_factor_says_the_room_was_divided_by_it():
    import math

    # 3050 - 2000 - 500 - 500 = 50 uncalibrated; Claude's count is an estimate, so the policy's
    # default factor 1.15 divides it: floor(50 / 1.15) = 43, less the framing: no room at all.
    m = _claude_example(3050)
    assert m.assembly.status.value == "blocked"
    why = _no_room(m)
    assert why.startswith(f"budget_exhausted: usable budget {math.floor(50 / 1.15)} (less ")
    assert why.endswith("- safety_margin 500, divided by the calibration factor 1.15 leaves no room for any input")

    why = _no_room(_example_manifest({"context_limit": 3050}))  # gpt-4o: an exact count, no factor to name
    assert why.startswith("budget_exhausted: usable budget 50 (less ") and why.endswith("- safety_margin 500 leaves no room for any input")


def test_the_cache_record_names_the_identity_fields_the_policy_declares_ready_or_blocked():
    from pathlib import Path

    import yaml

    declared = yaml.safe_load(Path("docs/examples/research-agent/policy.yaml").read_text())["cache"]["identity"]
    assert declared == ["ordered_source_ids", "source_content_hashes", "context_policy_revision", "runtime_policy_revision"]

    def identity(manifest) -> list[str]:
        return [f.value if hasattr(f, "value") else f for f in manifest.cache.identity_fields]

    ready = _example_manifest()
    assert ready.assembly.status.value == "ready" and ready.cache.prefix_hash is not None
    assert identity(ready) == declared
    blocked = _claude_example(3050)
    assert blocked.cache.policy == "bypassed"
    assert identity(blocked) == declared
    # With no stable prefix in the payload (no system_policy item), the record is bypassed and still names them.
    no_prefix = _example_manifest(without_source="system_policy")
    assert no_prefix.cache.prefix_hash is None
    assert identity(no_prefix) == declared


# Written for a survivor of seed 349366 (docs/mutation.md).
def test_describe_names_a_union_of_validated_types_by_the_users_field_only():
    """A value matching no member of a union whose members carry validators: pydantic adds each
    member's `function-before[...]` / `function-after[...]` to the error's loc; `describe` names
    the path by the user's fields only. No product model reaches this (its budget amount unions,
    the only ones with such members, sit under wrap validators that never call the union), so the
    contract is pinned on a model written here, with the formats' own `Id` as one member."""
    from typing import Annotated

    from pydantic import AfterValidator, BaseModel, ValidationError

    from ctxeng.engine.errors import describe
    from ctxeng.engine.limits import Id

    class Ref(BaseModel):
        name: Id | Annotated[int, AfterValidator(lambda v: v)]

    class Step(BaseModel):
        refs: list[Ref]

    with pytest.raises(ValidationError) as refused:
        Step.model_validate({"refs": [{"name": "ok"}, {"name": [1]}]})
    assert [e["loc"][3].split("[")[0] for e in refused.value.errors()] == ["function-before", "function-after"]
    assert describe(refused.value) == ["refs[1].name: Input should be a valid string",
                                       "refs[1].name: Input should be a valid integer"]
