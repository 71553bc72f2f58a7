"""The six invariants of seed §9, pinned through the manifest's `stages` log and exclusion records."""

from __future__ import annotations

from ctxeng.engine import assemble, parse_policy, parse_request
from tests.golden import load_example

from .builders import (
    CREATED_AT,
    canonical,
    excluded_record,
    item,
    policy,
    reasons,
    request,
    run,
    sha,
    tool_call,
    tool_result,
    with_budget,
)

PIPELINE = ["acquisition", "hard_gates", "ranking", "load_modes", "structure", "source_limits", "summary_verification", "budget", "transforms", "seal"]


def _stages(r):
    return [s.stage for s in r.manifest.stages]


def test_the_stages_run_in_the_seeds_order_and_are_logged():
    r = run(request(extra=[item("ev")]))
    assert _stages(r) == PIPELINE
    assert [s.seq for s in r.manifest.stages] == list(range(1, len(PIPELINE) + 1))


# 1. acquisition before admission


def test_acquisition_outcomes_are_recorded_verbatim_and_never_become_exclusions():
    acquisition = [
        {"source_request_id": "sr-ok", "source": {"type": "repository", "id": "pi"}, "outcome": "retrieved"},
        {"source_request_id": "sr-none", "source": {"type": "official_document", "id": "gone"}, "outcome": "not_retrieved", "reason": "no match"},
        {"source_request_id": "sr-fail", "source": {"type": "repository", "id": "hello"}, "outcome": "retrieval_failed", "reason": "timeout"},
    ]
    r = run(request(extra=[item("ev", source_request_id="sr-ok")], source_acquisition=acquisition))
    m = r.manifest
    assert [a.model_dump(mode="json", exclude_none=True) for a in m.source_acquisition] == acquisition
    names = {e.item_id for e in m.excluded} | {c.source_request_id for c in m.candidate_items if c.source_request_id}
    assert not {"sr-none", "sr-fail", "gone", "hello"} & {e.item_id for e in m.excluded}
    assert "sr-ok" in names
    assert m.stages[0].stage == "acquisition" and m.stages[0].items_in == m.stages[0].items_out == len(m.candidate_items)


# 2. hard gates before ranking


def test_hard_gates_decide_before_ranking_and_relevance_cannot_rescue_an_item():
    bad = item("wrong-tenant", scope="tenant-z/p", relevance=1.0)
    r = run(request(extra=[bad, item("ok", relevance=0.1)]))
    assert _stages(r).index("hard_gates") < _stages(r).index("ranking")
    rec = excluded_record(r, "wrong-tenant")
    assert rec.reason == "permission_denied" and rec.hard_gate == "permission"
    gates = next(s for s in r.manifest.stages if s.stage == "hard_gates")
    ranking = next(s for s in r.manifest.stages if s.stage == "ranking")
    assert ranking.items_in == gates.items_out  # ranking only sees what passed the gates
    assert "ok" in r.manifest.included_ids()


# 3. structure before transforms


def test_structure_runs_before_any_transform_and_pairs_survive_the_test_log_reduction():
    log = "\n".join(["PASSED a"] * 50 + ["FAILED b - boom"])
    res = tool_result("log", "c1", log, source_type="test_log", source_ref={"repo": "pi", "commit": "c", "artifact_id": "tl-1"})
    r = run(request(extra=[res], tool_calls=[tool_call("c1", "log", tool_name="run_tests", status="partial")]))
    stages = _stages(r)
    assert stages.index("structure") < stages.index("source_limits") < stages.index("transforms")
    (pair,) = r.manifest.tool_pairs
    assert pair.result_item_id == "log" and pair.decision == "included"
    assert pair.result_hash == sha(log)  # the pair keeps the original result's identity
    rec = next(i for i in r.manifest.included if i.item_id == "log")
    assert rec.transform_record_id and rec.zone == "untrusted_data" and rec.call_id == "c1"


# 4. budget never overrides eligibility


def test_a_huge_budget_never_admits_an_ineligible_item():
    pol = with_budget(policy(), model_context_limit=2_000_000)
    ineligible = [
        item("expired", "official_document", freshness="expired"),
        item("stale", "editable_project_file", kind="research_plan", source_ref={"artifact_id": "plan", "revision": 1}, revision=1),
        item("tampered", "official_document", content="x", content_hash=sha("y")),
        item("secret", "editable_project_file", security_class="secret"),
        item("foreign", scope="tenant-q/p"),
    ]
    r = run(request(extra=ineligible, required_revisions={"plan": 2}, model={"provider": "anthropic", "name": "huge", "context_limit": 2_000_000}), pol)
    assert set(reasons(r)) == {"expired", "stale", "tampered", "secret", "foreign"}
    assert "budget_evicted" not in reasons(r).values()
    assert r.manifest.budget.estimated_used < r.manifest.budget.usable_input / 100


# 5. re-injected objects are re-admitted


def test_a_reinjected_object_whose_content_no_longer_matches_its_hash_is_rejected():
    reinjected = item("plan", "editable_project_file", "plan v5 edited on disk", kind="research_plan", source_ref={"artifact_id": "plan", "revision": 5}, revision=5, artifact_ref={"artifact_id": "plan", "revision": 5}, content_hash=sha("plan v5"))
    r = run(request(extra=[reinjected]))
    rec = excluded_record(r, "plan")
    assert rec.reason == "hard_gate_rejected" and rec.hard_gate == "structural_integrity"
    assert next(c for c in r.manifest.candidate_items if c.item_id == "plan").artifact_ref.artifact_id == "plan"


def test_a_reinjected_object_that_could_not_be_loaded_is_rejected_not_trusted():
    ghost = item("plan", "editable_project_file", kind="research_plan", source_ref={"artifact_id": "plan", "revision": 5}, artifact_ref={"artifact_id": "plan", "revision": 5})
    ghost["content"] = None
    ghost["content_hash"] = sha("plan v5")
    rec = excluded_record(run(request(extra=[ghost])), "plan")
    assert rec.reason == "hard_gate_rejected" and "could not be loaded" in rec.detail


def test_a_reinjected_object_passes_every_gate_again_like_any_candidate():
    old_rev = item("plan", "editable_project_file", "plan v4", kind="research_plan", source_ref={"artifact_id": "plan", "revision": 4}, revision=4, artifact_ref={"artifact_id": "plan", "revision": 4})
    assert reasons(run(request(extra=[old_rev], required_revisions={"plan": 5})))["plan"] == "stale_revision"
    memory = item("mem", "memory_object", "tenant z prefers no citations", scope="tenant-z/p", artifact_ref={"artifact_id": "mem"})
    assert reasons(run(request(extra=[memory])))["mem"] == "permission_denied"


# 6. every attempt, ready or blocked, has a manifest


def test_a_ready_and_a_blocked_attempt_both_seal_a_manifest_with_every_stage():
    ready = run(request(extra=[item("ev")]))
    blocked = run(request(candidates=[item("ev")]))  # no resident parts at all
    for r in (ready, blocked):
        assert _stages(r) == PIPELINE
        assert len(r.manifest.candidate_items) == len(r.manifest.included) + len(r.manifest.excluded)
    assert blocked.manifest.assembly.status == "blocked"
    assert blocked.manifest.assembly.blocked_reason == "required_partition_missing"
    assert set(blocked.manifest.assembly.missing) == {"goal", "hard_constraints", "current_stage", "open_items_summary"}
    assert blocked.serialized_input is None
    assert ready.manifest.assembly.assembly_input_hash and ready.manifest.assembly.serialized_model_input_hash


# determinism


def test_the_same_inputs_give_a_byte_identical_serialized_input_and_the_same_hashes():
    data = load_example("request.json")
    pol = load_example("policy.yaml")
    a = assemble(parse_request(data), parse_policy(pol), created_at=CREATED_AT)
    b = assemble(parse_request(data), parse_policy(pol), created_at="2030-01-01T00:00:00Z")
    assert canonical(a.serialized_input) == canonical(b.serialized_input)
    assert canonical(a.assembly_input) == canonical(b.assembly_input)
    for field in ("assembly_input_hash", "serialized_model_input_hash", "candidate_set_digest", "data_fence_nonce", "id"):
        assert getattr(a.manifest.assembly, field) == getattr(b.manifest.assembly, field)
    strip = lambda m: {k: v for k, v in m.items() if k != "assembly"}  # noqa: E731
    assert strip(a.manifest_dict()) == strip(b.manifest_dict())


def test_a_changed_candidate_changes_the_hashes():
    a = run(request(extra=[item("ev", content="one")]))
    b = run(request(extra=[item("ev", content="two")]))
    assert a.manifest.assembly.serialized_model_input_hash != b.manifest.assembly.serialized_model_input_hash
    assert a.manifest.assembly.assembly_input_hash != b.manifest.assembly.assembly_input_hash
