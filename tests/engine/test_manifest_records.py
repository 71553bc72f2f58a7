"""The sealed manifest records what the request said (seal.py), field by field.

"The record is true": each record below is compared with the request the test wrote, not with
another part of the manifest. A candidate record is the item as received (before any reduction);
an included or excluded record names the item's own identity; a tool pair record says how the pair
was decided and in what order it was serialized; artifact refs name the artifact, not the item.
"""

from __future__ import annotations

from .builders import SCOPE, excluded_record, item, policy, request, run, sha, tool_call, tool_result

EV_REF = {"repo": "pi", "commit": "c0ffee", "path": "src/ev.ts", "lines": "1-20"}


def test_a_candidate_record_is_the_item_as_received():
    ev = item("ev", content="a finding", source_ref=EV_REF, revision=3, producer="retriever/2", security_class="internal", completeness="partial")
    m = run(request(extra=[ev])).manifest
    rec = next(c for c in m.candidate_items if c.item_id == "ev")
    assert (rec.kind, rec.source_type, rec.source_ref, rec.content_hash) == ("evidence", "repository_source", EV_REF, sha("a finding"))
    assert (rec.revision, rec.scope, rec.producer, rec.security_class, rec.completeness) == (3, SCOPE, "retriever/2", "internal", "partial")
    assert (rec.trust, rec.intended_role, rec.freshness) == ("repository_evidence", "untrusted_data", "valid")
    assert rec.estimated_tokens and rec.estimated_tokens > 0
    assert [c.item_id for c in m.candidate_items] == ["system", "goal", "constraints", "stage", "open", "ev"]  # request order


def test_included_and_excluded_records_name_the_items_own_identity_in_request_order():
    ev = item("ev", content="a finding", source_ref=EV_REF, revision=3, security_class="internal")
    stale = item("old", content="old text", freshness="expired")
    m = run(request(extra=[stale, ev])).manifest
    inc = next(i for i in m.included if i.item_id == "ev")
    assert (inc.kind, inc.source_type, inc.source_ref, inc.content_hash, inc.revision) == ("evidence", "repository_source", EV_REF, sha("a finding"), 3)
    assert (inc.scope, inc.trust, inc.intended_role, inc.zone, inc.security_class) == (SCOPE, "repository_evidence", "untrusted_data", "untrusted_data", "internal")
    assert inc.partition == "direct_evidence" and inc.load_mode is not None
    assert [i.item_id for i in m.included] == ["system", "goal", "constraints", "stage", "open", "ev"]
    ex = next(e for e in m.excluded if e.item_id == "old")
    assert (ex.kind, ex.source_type, ex.content_hash, ex.trust, ex.reason) == ("evidence", "repository_source", sha("old text"), "repository_evidence", "expired")
    assert ex.hard_gate == "freshness" and ex.hard_gate_results["freshness"] == "failed"


def test_tool_pair_records_follow_assistant_order_with_their_decision_and_serialized_position():
    results = [tool_result("r2", "c2", "two"), tool_result("r1", "c1", "one")]
    calls = [tool_call("c1", "r1", completed_seq=2), tool_call("lost", None), tool_call("c2", "r2", status="error", completed_seq=1)]
    m = run(request(extra=results, tool_calls=calls)).manifest
    recs = {p.call_id: p for p in m.tool_pairs}
    assert [p.call_id for p in m.tool_pairs] == ["c1", "lost", "c2"]
    assert [p.source_order for p in m.tool_pairs] == [0, 1, 2]
    assert (recs["c1"].decision, recs["c1"].serialized_order, recs["c1"].result_item_id) == ("included", 0, "r1")
    assert (recs["lost"].decision, recs["lost"].serialized_order, recs["lost"].result_item_id) == ("unresolved", 1, None)
    assert (recs["c2"].decision, recs["c2"].serialized_order, recs["c2"].status) == ("included", 2, "error")
    assert recs["c1"].result_hash == sha("one") and recs["lost"].result_hash is None
    assert recs["c1"].pairing_assertion == "exactly_one_result_for_call"
    assert recs["lost"].pairing_assertion == "no_result_for_call"
    assert recs["c1"].completed_seq == 2 and recs["c2"].completed_seq == 1
    assert all(p.tokens and p.tokens > 0 for p in m.tool_pairs)


def test_an_omitted_call_is_unresolved_without_a_position_or_tokens():
    pol = policy()
    pol["structure"] = {"unresolved_tool_calls": "omit_call"}
    m = run(request(tool_calls=[tool_call("lost", None)]), pol).manifest
    (rec,) = m.tool_pairs
    assert (rec.decision, rec.serialized_order, rec.tokens, rec.unresolved_handling) == ("unresolved", None, None, "omit_call")


def test_an_artifact_ref_names_the_artifact_and_its_revision_not_the_item():
    plan = item("plan-item", "editable_project_file", "the plan", source_ref={"artifact_id": "plan-42", "revision": 5}, kind="background")
    doc = item("doc", "editable_project_file", "a note", kind="background")
    m = run(request(extra=[plan, doc])).manifest
    (ref,) = m.artifact_refs
    assert (ref.id, ref.revision, ref.item_id, ref.hash, ref.kind) == ("plan-42", 5, "plan-item", sha("the plan"), "background")


def test_a_blocked_manifest_has_no_input_hashes_and_names_what_is_missing():
    cands = [c for c in request()["candidates"] if c["item_id"] != "goal"]
    m = run(request(cands)).manifest
    assert m.assembly.status == "blocked" and m.assembly.blocked_reason == "required_partition_missing"
    assert m.assembly.missing == ["goal"]
    assert m.assembly.assembly_input_hash is None and m.assembly.serialized_model_input_hash is None


def test_a_required_item_excluded_by_a_gate_blocks_naming_it():
    r = run(request(extra=[item("must", content="x", required=True, freshness="expired")]))
    assert r.manifest.assembly.status == "blocked" and "must" in r.manifest.assembly.missing
    assert excluded_record(r, "must").reason == "expired"


def test_a_required_partition_left_empty_blocks_naming_the_partition():
    pol = policy()
    pol["budget"]["partitions"]["direct_evidence"]["required"] = True
    m = run(request(), pol).manifest
    assert m.assembly.blocked_reason == "required_partition_missing" and m.assembly.missing == ["direct_evidence"]
    assert run(request(extra=[item("ev")]), pol).manifest.assembly.status == "ready"


def test_the_manifest_names_the_checkpoint_it_was_given():
    checkpoint = {"summary_id": "cp-7", "goal": "g", "current_stage": "drafting", "input_item_ids": ["turn-1"],
                  "input_range": {"start_item_id": "turn-1", "end_item_id": "turn-1"}}
    assert run(request(checkpoint=checkpoint)).manifest.checkpoint_ref == "cp-7"
    assert run(request()).manifest.checkpoint_ref is None
