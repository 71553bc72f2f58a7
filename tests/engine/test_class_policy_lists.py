"""Bug class 3 (issue 54): every list in the policy, read with a member and with a non-member.

A list the engine reads positively ("who may approve", "which sources", "which statuses count as
evidence") was tested with members only, so a check that accepted anyone passed. Each test here
runs the same request twice, once with the value on the list and once with it off (or with
another value the list does not hold), and expects the two outcomes the clause names. The oracles
are written from the clause descriptions in ctxeng.engine.policy_models and docs/policy.md.

Lists covered (policy path -> what a non-member gets):

- stages.<stage>.approved_by.<kind>.producers      -> the approval does not count (blocked)
- stages.<stage>.approved_by.<kind>.source_types   -> the approval does not count (blocked)
- stages.<stage>.require                            -> a kind not listed is not required
- stages.<stage>.not_relevant                       -> a kind not listed keeps its ranking
- trust.producers.<source_type>                     -> hard_gate_rejected, naming the producer
- trust.default_by_source (keys)                    -> untrusted data only
- role_limits.<trust>                               -> hard_gate_rejected, naming the role
- retrieval.default_sources                         -> ranking_lost
- retrieval.diagnostic_stages                       -> a trace loses ranking at an unlisted stage
- resident.include / resident.when_present          -> neither blocked when absent nor pinned
- disclosure.indexes                                -> loaded `retrieve`, not `disclose`
- structure.evidence_use_allowed_for                -> diagnostic_only
- security.secret_classes                           -> not denied as a secret
- cache.stable_prefix_sources                       -> not in the stable prefix
- externalization.targets                           -> rejected (item) or refused (checkpoint)
- revision_authority.required_revision_sources      -> the request is refused, naming the field
- source_acquisition.outcomes                       -> the request is refused, naming the field
- expiry.on                                         -> the request is refused, naming the field
- budget.partitions.<name>.kinds                    -> the item goes to the `first` partition
- transforms.allowed                                -> the transform does not run
"""

from __future__ import annotations

import copy

import pytest

from ctxeng.engine import InvalidInput

from .builders import excluded_record, item, policy, reasons, request, run, tool_call, tool_result
from .test_admission_integrity_iv import DESTINATION, draft, review
from .test_eviction import budget_policy, partitions, transcript


def status(result) -> str:
    return result.manifest.assembly.status


def included(result, item_id: str):
    return next((i for i in result.manifest.included if i.item_id == item_id), None)


def detail(result, item_id: str) -> str:
    return excluded_record(result, item_id).detail


# --------------------------------------------------------------------------- stages


def approval_policy(source_types: list[str], producers: list[str]) -> dict:
    approved_by = {"review_decision": {"source_types": source_types, "producers": producers}}
    return policy(stages={"publishing": {"require": ["review_decision"], "approved_by": approved_by}})


def publish(review_item: dict, pol: dict):
    return run(request(extra=[draft(), review_item], stage="publishing",
                       runtime_state={"publish_destination": DESTINATION}), pol)


def test_a_review_from_a_producer_on_approved_by_producers_approves_and_one_from_a_producer_off_it_does_not():
    pol = approval_policy(["runtime_state"], ["review-desk/v1"])
    assert status(publish(review(producer="review-desk/v1"), pol)) == "ready"
    off = publish(review(producer="copy-desk/v1"), pol)
    a = off.manifest.assembly
    assert (a.status, a.missing) == ("blocked", ["review_decision"])
    assert "producer 'copy-desk/v1' is not a named approver" in a.blocked_detail[0]


def test_a_review_of_a_source_type_on_approved_by_source_types_approves_and_one_off_it_does_not():
    # user_request is authority text the request carries, yet not the source the policy names.
    assert status(publish(review("runtime_state"), approval_policy(["runtime_state"], ["review-desk/v1"]))) == "ready"
    off = publish(review("user_request", intended_role="task_intent", trust="task_authority"),
                  approval_policy(["runtime_state"], ["review-desk/v1"]))
    assert status(off) == "blocked"
    assert "source type 'user_request' is not an approval source" in off.manifest.assembly.blocked_detail[0]
    on = publish(review("user_request", intended_role="task_intent", trust="task_authority"),
                 approval_policy(["runtime_state", "user_request"], ["review-desk/v1"]))
    assert status(on) == "ready"


def test_a_kind_stages_require_lists_blocks_the_step_when_absent_and_an_unlisted_kind_does_not():
    listed = policy(stages={"drafting": {"require": ["research_plan"]}})
    r = run(request(), listed)
    assert (status(r), r.manifest.assembly.missing) == ("blocked", ["research_plan"])
    assert status(run(request(), policy(stages={"drafting": {"require": ["article_draft"]}}))) == "blocked"
    assert status(run(request(extra=[item("plan", "runtime_state", "plan", kind="research_plan")]), listed)) == "ready"


def test_a_kind_stages_not_relevant_lists_loses_ranking_and_an_unlisted_kind_keeps_it():
    doc = item("doc", "official_document", "Retries back off.")
    assert reasons(run(request(extra=[doc]), policy(stages={"drafting": {"not_relevant": ["official_document"]}})))["doc"] == "ranking_lost"
    assert included(run(request(extra=[doc]), policy(stages={"drafting": {"not_relevant": ["evidence"]}})), "doc") is not None


# --------------------------------------------------------------------------- trust


def producers_policy(names: list[str]) -> dict:
    pol = policy()
    pol["trust"]["producers"] = {"runtime_state": names, "system_policy": ["ops"], "user_request": ["ui"]}
    return pol


def bound_request(state_producer: str) -> dict:
    cands = [
        item("system", "system_policy", "Rules.", producer="ops"),
        item("goal", "user_request", "Find pairing.", kind="goal", producer="ui"),
        item("constraints", "user_request", "Cite.", kind="hard_constraints", producer="ui"),
        item("stage", "runtime_state", "stage: drafting", kind="current_stage", producer="runtime"),
        item("open", "runtime_state", "OI-1", kind="open_items_summary", open_item_ids=["OI-1"], producer="runtime"),
        item("plan", "runtime_state", "plan v2", kind="research_plan", producer=state_producer),
    ]
    return request(cands)


def test_an_authority_item_from_a_producer_on_trust_producers_passes_and_from_one_off_it_is_rejected_naming_it():
    on = run(bound_request("runtime"), producers_policy(["runtime"]))
    assert included(on, "plan") is not None
    off = run(bound_request("plugin-x"), producers_policy(["runtime"]))
    assert reasons(off)["plan"] == "hard_gate_rejected"
    assert "producer 'plugin-x' may not emit source type 'runtime_state'" in detail(off, "plan")


def test_a_source_type_with_a_trust_default_may_carry_it_and_one_without_is_untrusted_data_only():
    status_item = item("ci", "ci_status", "build green", trust="trusted_state", intended_role="state", source_ref={"object_id": "ci-1"})
    with_default = policy()
    with_default["trust"]["default_by_source"]["ci_status"] = "trusted_state"
    assert included(run(request(extra=[status_item]), with_default), "ci") is not None
    r = run(request(extra=[status_item]))
    assert reasons(r)["ci"] == "hard_gate_rejected"
    assert "no trust default" in detail(r, "ci")


def test_a_role_on_role_limits_for_the_trust_is_admitted_and_a_role_off_it_is_rejected_naming_it():
    memory = item("mem", "memory_object", "prefers tabs", intended_role="state")
    assert included(run(request(extra=[memory])), "mem") is not None
    narrowed = policy()
    narrowed["role_limits"]["governed_memory_candidate"] = ["untrusted_data"]
    r = run(request(extra=[memory]), narrowed)
    assert reasons(r)["mem"] == "hard_gate_rejected"
    assert "may not take role 'state'" in detail(r, "mem")


# --------------------------------------------------------------------------- retrieval, resident, disclosure


def test_a_category_on_retrieval_default_sources_is_retrieved_and_one_off_every_list_loses_ranking():
    doc = item("doc", "official_document", "Retries back off.")
    assert included(run(request(extra=[doc])), "doc") is not None
    r = run(request(extra=[doc]), policy(retrieval={"default_sources": ["repository", "artifacts"]}))
    assert reasons(r)["doc"] == "ranking_lost"
    assert "official_docs is not among" in detail(r, "doc")


def test_a_trace_is_admitted_at_a_stage_on_diagnostic_stages_and_loses_ranking_at_a_stage_off_it():
    trace = item("tr", "trace", "step 3 failed", trust="trusted_state")
    pol_on = policy(retrieval={"diagnostic_stages": ["drafting"]})
    pol_on["trust"]["default_by_source"]["trace"] = "trusted_state"
    pol_off = copy.deepcopy(pol_on)
    pol_off["retrieval"]["diagnostic_stages"] = ["debugging"]
    assert included(run(request(extra=[trace]), pol_on), "tr") is not None
    off = run(request(extra=[trace]), pol_off)
    assert reasons(off)["tr"] == "ranking_lost" and "diagnostic_stages" in detail(off, "tr")


def test_a_kind_on_resident_include_blocks_when_absent_and_a_kind_off_it_does_not():
    pol = policy()
    pol["resident"]["include"] = [*pol["resident"]["include"], "research_plan"]
    r = run(request(), pol)
    assert status(r) == "blocked" and "research_plan" in r.manifest.assembly.missing
    assert status(run(request())) == "ready"


@pytest.mark.parametrize("listed, load_mode", [(["research_plan"], "resident"), (["article_draft"], "retrieve")])
def test_a_kind_on_resident_when_present_is_loaded_resident_and_a_kind_off_it_is_retrieved(listed, load_mode):
    pol = policy()
    pol["resident"]["when_present"] = listed
    r = run(request(extra=[item("plan", "runtime_state", "plan v2", kind="research_plan")]), pol)
    assert included(r, "plan").load_mode == load_mode


@pytest.mark.parametrize("indexes, load_mode", [(["official_document"], "disclose"), (["evidence"], "retrieve")])
def test_a_kind_on_disclosure_indexes_loads_disclose_and_a_kind_off_it_loads_retrieve(indexes, load_mode):
    doc = item("doc", "official_document", "Index of retry docs.")
    r = run(request(extra=[doc]), policy(disclosure={"mode": "index_then_detail", "indexes": indexes}))
    assert included(r, "doc").load_mode == load_mode


# --------------------------------------------------------------------------- structure, security, cache, externalization


@pytest.mark.parametrize("allowed, evidence_use", [(["success", "error"], "confirmed_by_policy"), (["success"], "diagnostic_only")])
def test_a_call_status_on_evidence_use_allowed_for_is_evidence_and_one_off_it_is_diagnostic_only(allowed, evidence_use):
    r = run(request(extra=[tool_result("res", "c1", "exit 1: test_retry failed")], tool_calls=[tool_call("c1", "res", status="error")]),
            policy(structure={"evidence_use_allowed_for": allowed}))
    (pair,) = r.manifest.tool_pairs
    assert pair.evidence_use == evidence_use


@pytest.mark.parametrize("secret_classes, denied", [(["secret", "vault_material"], True), (["secret"], False)])
def test_a_security_class_on_secret_classes_is_denied_and_one_off_it_is_admitted(secret_classes, denied):
    doc = item("doc", "official_document", "rotation schedule", security_class="vault_material")
    r = run(request(extra=[doc]), policy(security={"secret_classes": secret_classes}))
    if denied:
        assert reasons(r)["doc"] == "security_rejected"
    else:
        assert included(r, "doc") is not None


@pytest.mark.parametrize("sources, in_prefix", [(["system_policy"], True), (["runtime_state"], False)])
def test_a_control_source_on_stable_prefix_sources_makes_the_prefix_and_one_off_it_does_not(sources, in_prefix):
    r = run(request(), policy(cache={"stable_prefix_sources": sources}))
    assert ("system" in r.manifest.cache.prefix_source_ids) is in_prefix
    assert (r.manifest.cache.prefix_hash is not None) is in_prefix


@pytest.mark.parametrize("targets, admitted", [(["file", "checkpoint", "artifact_store"], True), (["checkpoint", "artifact_store"], False)])
def test_an_item_from_a_target_on_externalization_targets_is_admitted_and_from_one_off_it_is_rejected(targets, admitted):
    notes = item("notes", "editable_project_file", "notes on retries")
    r = run(request(extra=[notes]), policy(externalization={"targets": targets}))
    if admitted:
        assert included(r, "notes") is not None
    else:
        assert reasons(r)["notes"] == "hard_gate_rejected"
        assert "externalization target 'file'" in detail(r, "notes")


# --------------------------------------------------------------------------- what a request may assert


def refused(req: dict, pol: dict) -> str | None:
    try:
        run(req, pol)
    except InvalidInput as exc:
        return str(exc)
    return None


def test_a_required_revision_from_a_source_on_required_revision_sources_is_accepted_and_from_one_off_it_refused():
    req = request(required_revisions={"pi": {"revision": "c0ffee", "source": "runtime_business_state"}})
    assert refused(req, policy(revision_authority={"required_revision_sources": ["task_spec", "runtime_business_state"]})) is None
    why = refused(req, policy(revision_authority={"required_revision_sources": ["task_spec"]}))
    assert why is not None and "required_revisions.pi.source" in why and "runtime_business_state" in why


def test_an_acquisition_outcome_on_source_acquisition_outcomes_is_accepted_and_one_off_it_refused():
    record = {"source_request_id": "sr-1", "source": {"type": "repository", "id": "pi"}, "outcome": "retrieval_failed", "reason": "timeout"}
    req = request(source_acquisition=[record])
    assert refused(req, policy()) is None
    why = refused(req, policy(source_acquisition={"outcomes": ["retrieved", "not_retrieved"]}))
    assert why is not None and "source_acquisition[0].outcome" in why


def test_a_lifecycle_event_on_expiry_on_acts_and_one_off_it_is_refused():
    doc = item("doc", "official_document", "Retries back off.")
    req = request(extra=[doc], lifecycle_events=[{"event": "source_expired", "item_id": "doc"}])
    assert reasons(run(req, policy()))["doc"] == "expired"
    why = refused(req, policy(expiry={"on": ["task_closed"]}))
    assert why is not None and "lifecycle_events[0].event" in why


# --------------------------------------------------------------------------- budget and transforms


def test_a_kind_on_a_partitions_kinds_goes_to_that_partition_and_an_unlisted_kind_to_the_first_partition():
    doc = item("doc", "official_document", "Retries back off.")
    assert included(run(request(extra=[doc])), "doc").partition == "direct_evidence"
    parts = partitions(direct_evidence={"kinds": ["evidence"]})
    # The `first` partition listed before the others, so "the last one" is another partition.
    parts = {"background": parts.pop("background"), **parts}
    assert included(run(request(extra=[doc]), budget_policy(16000, parts)), "doc").partition == "background"


@pytest.mark.parametrize("allowed, outcome", [(["none", "truncate_item"], "truncated"), (["none", "excerpt"], "budget_evicted")])
def test_a_transform_on_transforms_allowed_runs_and_one_off_it_does_not(allowed, outcome):
    pol = budget_policy(16000, partitions(background={"maximum": 500}), allowed=allowed)
    r = run(request(extra=[item("notes", "editable_project_file", transcript(20), kind="background")]), pol)
    if outcome == "truncated":
        assert [t.type for t in r.manifest.transforms if t.output_item_id == "notes"] == ["truncate_item"]
        assert included(r, "notes") is not None
    else:
        assert reasons(r)["notes"] == "budget_evicted" and not r.manifest.transforms

