"""Transforms (stage 7): supplied summaries verified, the checkpoint summary built, failures blocked."""

from __future__ import annotations

import pytest

from ctxeng.engine.models import CheckpointState
from ctxeng.engine.transforms import render_checkpoint

from .builders import excluded_record, item, policy, reasons, request, run, tool_call, tool_result

GOOD = "Goal: find pairing rules\nConstraints: fixed revisions\nOpen Items: OI-1\nConflicts: none"


def summary(item_id: str = "sum", content: str = GOOD, **fields):
    base = dict(
        input_item_ids=["turn-1", "turn-2"],
        input_range={"start_item_id": "turn-1", "end_item_id": "turn-2"},
        source_refs=[{"repo": "pi", "commit": "c0ffee", "path": "a.ts", "lines": "1-9"}],
        preserves={"open_item_ids": ["OI-1"]},
        producer="research-agent/v2",
    )
    base.update(fields)
    return item(item_id, "model_summary", content, **base)


def full_preserve_policy():
    pol = policy()
    pol["transforms"]["preserve"] = ["goal", "constraints", "open_items", "source_refs", "conflicts_and_negative_findings", "unresolved_tool_calls", "artifact_refs", "article_draft_revision"]
    return pol


def test_a_summary_that_keeps_what_the_policy_requires_is_verified_and_included():
    r = run(request(extra=[summary()]))
    assert "sum" in r.manifest.included_ids()
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "sum"]
    assert record.type == "summarize" and record.status == "verified"
    assert record.input_item_ids == ["turn-1", "turn-2"] and record.input_range.end_item_id == "turn-2"
    (s,) = r.manifest.summaries
    assert s.decision == "included" and s.transform_record_id == record.record_id


def test_a_summary_that_drops_an_open_item_is_transform_blocked_naming_the_assertion():
    lossy = summary(content="Goal: g\nConstraints: c\nOpen Items: none", preserves={"open_item_ids": []})
    r = run(request(extra=[lossy]))
    rec = excluded_record(r, "sum")
    assert rec.reason == "transform_blocked" and rec.failed_assertions == ["open_items"]
    assert r.manifest.assembly.status == "ready"  # an optional summary failing blocks only itself


def test_a_summary_without_pinned_source_refs_is_transform_blocked():
    r = run(request(extra=[summary(source_refs=[{"path": "a.ts"}])]))
    assert excluded_record(r, "sum").failed_assertions == ["source_refs"]


def test_a_summary_without_input_item_ids_is_transform_blocked():
    r = run(request(extra=[summary(input_item_ids=[], input_range=None)]))
    assert "input_items" in excluded_record(r, "sum").failed_assertions


def test_a_summary_must_keep_the_error_lines_of_its_inputs_when_they_are_candidates():
    pol = policy()
    pol["transforms"]["preserve"] = ["exact_values_and_errors"]
    turn = item("turn-1", "runtime_state", "ran tests\nFAILED tests/test_a.py::test_x - boom", kind="trace", relevance=0.1)
    refs = [{"object_id": "turn-1", "revision": 1}]
    lossy = summary(content="Goal: g (tests ran fine)", input_item_ids=["turn-1"], input_range=None, source_refs=refs)
    assert reasons(run(request(extra=[turn, lossy]), pol))["sum"] == "transform_blocked"
    kept = summary(content="Goal: g\nFAILED tests/test_a.py::test_x - boom", input_item_ids=["turn-1"], input_range=None, source_refs=refs)
    assert "sum" in run(request(extra=[turn, kept]), pol).manifest.included_ids()


def test_a_summary_must_name_calls_still_waiting_for_a_result():
    pol = policy()
    pol["transforms"]["preserve"] = ["unresolved_tool_calls"]
    req = request(extra=[summary()], tool_calls=[tool_call("pending-7", None)])
    assert excluded_record(run(req, pol), "sum").failed_assertions == ["unresolved_tool_calls"]
    req = request(extra=[summary(content=GOOD + "\nUnresolved: pending-7")], tool_calls=[tool_call("pending-7", None)])
    assert "sum" in run(req, pol).manifest.included_ids()


def test_a_summary_cannot_claim_more_trust_than_its_inputs():
    raised = summary(trust="trusted_state", intended_role="state")
    assert reasons(run(request(extra=[raised])))["sum"] == "hard_gate_rejected"  # the trust gate refuses the claim
    other_agent = item(
        "sum", "agent_summary", GOOD, kind="summary", trust="trusted_state", intended_role="state",
        source_ref={"summary_id": "sum"}, input_item_ids=["turn-1"], preserves={"open_item_ids": ["OI-1"]}, producer="agent-b/v1",
        input_range={"start_item_id": "turn-1", "end_item_id": "turn-1"},
        source_refs=[{"repo": "pi", "commit": "c0ffee"}],
    )
    # A source type with no trust default may only be untrusted data: the gate refuses the claim.
    rec = excluded_record(run(request(extra=[other_agent])), "sum")
    assert rec.reason == "hard_gate_rejected" and rec.hard_gate == "trust_role_compatibility"
    # Even where the policy grants the source that trust, a summary may not rank above its inputs.
    pol = policy()
    pol["trust"]["default_by_source"]["agent_summary"] = "trusted_state"
    rec = excluded_record(run(request(extra=[other_agent]), pol), "sum")
    assert rec.reason == "transform_blocked" and rec.failed_assertions == ["trust_not_raised"]


def test_a_required_summary_that_fails_its_assertions_blocks_the_assembly():
    lossy = summary(content="Goal: g", preserves={"open_item_ids": []}, required=True)
    r = run(request(extra=[lossy]))
    m = r.manifest
    assert m.assembly.status == "blocked" and m.assembly.blocked_reason == "transform_blocked"
    assert m.assembly.missing == ["sum"]
    assert excluded_record(r, "sum").reason == "transform_blocked"
    assert r.serialized_input is None and m.assembly.serialized_model_input_hash is None


def test_a_resident_summary_kind_that_fails_blocks_the_assembly():
    pol = policy()
    pol["resident"]["include"].append("summary")
    lossy = summary(content="Goal: g", preserves={"open_item_ids": []})
    assert run(request(extra=[lossy]), pol).manifest.assembly.blocked_reason == "transform_blocked"


def checkpoint(**fields):
    state = dict(
        summary_id="checkpoint-7",
        goal="find pairing rules",
        constraints=["fixed revisions"],
        current_stage="drafting",
        done=["read pi"],
        in_progress=["read continue"],
        confirmed_claims=[{"claim": "results keyed by call id", "source_ref": {"repo": "continue", "commit": "9e8d", "path": "x.ts", "lines": "8-69"}}],
        conflicts_and_negative_findings=["context7 has no pairing (searched: context7/src)"],
        open_item_ids=["OI-1"],
        draft_revision=2,
        unresolved_tool_calls=["pending-7"],
        artifact_refs=["article_draft@2"],
        input_item_ids=["turn-1", "turn-2"],
        input_range={"start_item_id": "turn-1", "end_item_id": "turn-2"},
    )
    state.update(fields)
    return state


def test_the_deterministic_checkpoint_summary_passes_its_own_assertions():
    req = request(extra=[tool_result("r1", "c1")], tool_calls=[tool_call("c1", "r1"), tool_call("pending-7", None)], checkpoint=checkpoint(), runtime_state={"open_item_ids": ["OI-1"], "article_draft_revision": 2})
    r = run(req, full_preserve_policy())
    assert "checkpoint-7" in r.manifest.included_ids()
    (record,) = [t for t in r.manifest.transforms if t.output_item_id == "checkpoint-7"]
    assert record.transformer_version == "checkpoint-summarizer/v1" and record.status == "verified"
    assert set(record.preservation_assertions.values()) <= {"passed", "not_applicable"}
    assert r.manifest.checkpoint_ref == "checkpoint-7"
    assert next(c for c in r.manifest.candidate_items if c.item_id == "checkpoint-7").source_type == "checkpoint_summary"


def test_the_checkpoint_summary_is_byte_identical_for_the_same_state():
    a = render_checkpoint(CheckpointState.model_validate(checkpoint()))
    b = render_checkpoint(CheckpointState.model_validate(checkpoint()))
    assert a == b
    for section in ("Goal:", "Constraints:", "Current Stage:", "Done / In Progress / Blocked:", "Confirmed Claims:", "Conflicts and Negative Findings:", "Open Items: OI-1", "Draft Revision: 2", "Unresolved Tool Calls: pending-7", "Artifact / Checkpoint Refs:"):
        assert section in a


def test_a_checkpoint_that_misses_an_open_item_the_runtime_knows_is_blocked():
    req = request(checkpoint=checkpoint(open_item_ids=[]), runtime_state={"open_item_ids": ["OI-1", "OI-2"]})
    r = run(req, full_preserve_policy())
    assert "open_items" in excluded_record(r, "checkpoint-7").failed_assertions


def test_a_checkpoint_with_a_stale_draft_revision_is_blocked():
    req = request(checkpoint=checkpoint(draft_revision=1), runtime_state={"article_draft_revision": 2})
    assert "article_draft_revision" in excluded_record(run(req, full_preserve_policy()), "checkpoint-7").failed_assertions


@pytest.mark.parametrize("field", ["goal", "current_stage"])
def test_a_checkpoint_is_refused_without_its_mandatory_sections(field):
    from ctxeng.engine import InvalidInput, parse_request

    state = checkpoint()
    del state[field]
    with pytest.raises(InvalidInput) as exc:
        parse_request(request(checkpoint=state))
    assert f"checkpoint.{field}: field required" in exc.value.errors
