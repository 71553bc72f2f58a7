"""No silent clauses: each policy clause either changes a decision or is refused by path.

One test per clause that the other engine test modules do not already cover (gates, trust,
provenance, lifecycle, cache, re-injection, output checks); docs/conformance.md maps every clause
to its test."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
import yaml

from ctxeng.engine import InvalidInput, parse_policy, policy_digest

from .builders import excluded_record, item, policy, request, run


def policy_errors(pol) -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        parse_policy(pol)
    return exc.value.errors


def request_errors(req, pol=None) -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        run(req, pol)
    return exc.value.errors


def test_a_freshness_state_the_policy_does_not_recognize_is_unverifiable():
    pol = policy(freshness={"states": ["valid", "expired", "unverifiable"]})
    rec = excluded_record(run(request(extra=[item("ev", freshness="refresh_required")]), pol), "ev")
    assert rec.reason == "unverifiable" and "freshness.states" in rec.detail
    # Under the default states the same item is a refresh, not unverifiable.
    assert excluded_record(run(request(extra=[item("ev", freshness="refresh_required")])), "ev").reason == "hard_gate_rejected"


def test_freshness_states_must_include_valid():
    assert policy_errors(policy(freshness={"states": ["expired"]}))[0].startswith("freshness.states: must include 'valid'")


def test_a_freshness_action_the_engine_does_not_perform_is_refused():
    assert policy_errors(policy(freshness={"expired": "admit_with_warning"}))[0].startswith("freshness.expired:")


def test_an_acquisition_outcome_the_policy_does_not_record_is_refused_by_path():
    pol = policy(source_acquisition={"outcomes": ["retrieved", "not_retrieved"]})
    rec = {"source_request_id": "sr-1", "source": {"type": "repository", "id": "pi"}, "outcome": "retrieval_failed"}
    assert request_errors(request(source_acquisition=[rec]), pol) == [
        "source_acquisition[0].outcome: 'retrieval_failed' is not an outcome policy test-policy/1 records (source_acquisition.outcomes)"
    ]


def test_a_required_revision_asserted_by_a_source_the_policy_does_not_trust_is_refused():
    req = request(required_revisions={"pi": {"revision": "abc", "source": "artifact_manifest"}})
    pol = policy(revision_authority={"required_revision_sources": ["task_spec"]})
    assert request_errors(req, pol)[0].startswith("required_revisions.pi.source: 'artifact_manifest' is not a revision authority")


def test_a_bare_required_revision_is_asserted_by_the_task_spec():
    pol = policy(revision_authority={"required_revision_sources": ["runtime_business_state"]})
    assert request_errors(request(required_revisions={"pi": "abc"}), pol)[0].startswith("required_revisions.pi.source: 'task_spec'")
    ok = run(request(required_revisions={"pi": {"revision": "c0ffee", "source": "runtime_business_state"}}, extra=[item("ev")]), pol)
    assert "ev" in ok.manifest.included_ids()


def test_a_retrieval_result_cannot_be_a_revision_authority():
    assert policy_errors(policy(revision_authority={"required_revision_sources": ["retrieval_result"]}))[0].startswith(
        "revision_authority.required_revision_sources[0]: unknown value 'retrieval_result'"
    )


def test_exclusion_reasons_cannot_switch_a_reason_off():
    errors = policy_errors(policy(admission={"hard_filters": policy()["admission"]["hard_filters"], "exclusion_reasons": ["ranking_lost"]}))
    assert errors[0].startswith("admission.exclusion_reasons: must include hard_gate_rejected")


def test_retrieval_require_cannot_drop_a_check_and_names_unknown_ones():
    assert policy_errors(policy(retrieval={"require": ["stable_source_ref"]}))[0].startswith("retrieval.require: must include scope_check")
    assert policy_errors(policy(retrieval={"require": ["vibes"]}))[0].startswith("retrieval.require[0]: unknown value 'vibes'")


def test_structure_preserve_names_unknown_properties():
    assert policy_errors(policy(structure={"preserve": ["trust", "mood"]}))[0].startswith("structure.preserve[1]: unknown value 'mood'")


def test_memory_is_never_an_externalization_target():
    assert policy_errors(policy(externalization={"targets": ["memory"]})) == [
        "externalization.targets[0]: 'memory' is not an externalization target: context never writes to Memory (seed §7)"
    ]


def test_without_the_file_target_project_files_do_not_re_enter():
    pol = policy(externalization={"targets": ["artifact_store", "checkpoint"]})
    rec = excluded_record(run(request(extra=[item("plan", "editable_project_file")]), pol), "plan")
    assert rec.reason == "hard_gate_rejected" and "'file'" in rec.detail


def test_without_the_checkpoint_target_a_checkpoint_is_refused():
    pol = policy(externalization={"targets": ["artifact_store", "file"]})
    checkpoint = {"goal": "g", "current_stage": "drafting", "input_item_ids": ["turn-1"]}
    assert request_errors(request(checkpoint=checkpoint), pol) == [
        "checkpoint: policy test-policy/1 does not externalize to checkpoints (externalization.targets)"
    ]


def test_the_policy_applies_only_to_its_principal_and_task_type():
    pol = policy(scope={"task_type": "research", "principal_policy": "agent/v1"})
    assert run(request(task_type="research"), pol).manifest.assembly.status == "ready"
    assert request_errors(request(task_type="coding"), pol) == ["task_type: policy test-policy/1 is for task type 'research', not 'coding'"]
    other = {"id": "agent/v2", "tenant": "tenant-x", "project": "project-y"}
    assert request_errors(request(principal=other), pol)[0].startswith("principal.id: policy test-policy/1 applies to principal 'agent/v1'")


def test_a_repeated_clause_value_is_named_by_its_index():
    assert policy_errors(policy(expiry={"on": ["task_closed", "task_closed"]})) == ["expiry.on[1]: 'task_closed' is listed twice"]


def _reordered(value):
    """The same value with every mapping's keys in reverse order (lists keep theirs: order is meaning)."""
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


def test_a_policy_digest_is_sha256_over_the_canonical_json_of_the_filled_in_body():
    parsed = parse_policy(policy())
    body = parsed.model_dump(mode="json")
    del body["policy"]["digest"]
    # Clauses added after policies were published are left out while empty (issue 32), so older
    # policies keep their digests.
    assert body["admission"].pop("allow_incomplete") == [] and body["trust"].pop("producers") == {} and body.pop("stages") == {}
    assert body.pop("upgrades") == []
    assert body["security"].pop("secrets_in_call_arguments") == "redact"  # issue 50: the default, left out likewise
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert policy_digest(parsed) == "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def test_the_same_policy_as_yaml_as_json_and_with_keys_reordered_has_one_digest():
    body = policy()
    as_dict = policy_digest(parse_policy(body))
    as_yaml = policy_digest(parse_policy(yaml.safe_dump(body, sort_keys=False)))
    as_json = policy_digest(parse_policy(json.dumps(body)))
    reordered = policy_digest(parse_policy(yaml.safe_dump(_reordered(body), sort_keys=False)))
    reordered_json = policy_digest(parse_policy(json.dumps(_reordered(body), indent=3)))
    assert as_dict == as_yaml == as_json == reordered == reordered_json
    # A default written out explicitly is the same policy.
    explicit = {**body, "security": {"secret_material": "deny_or_redact"}}
    assert policy_digest(parse_policy(explicit)) == as_dict


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b["budget"].update(safety_margin=b["budget"]["safety_margin"] + 1),
        lambda b: b["admission"].update(ranking=list(reversed(b["admission"]["ranking"]))),
        lambda b: b["budget"]["partitions"]["background"].update(maximum=1501),
        lambda b: b["policy"].update(revision=2),
        lambda b: b.update(security={"secret_material": "deny"}),
    ],
    ids=["a number", "a list's order", "a nested value", "the revision", "a default overridden"],
)
def test_a_changed_value_changes_the_digest(change):
    body = policy()
    before = policy_digest(parse_policy(body))
    changed = copy.deepcopy(body)
    change(changed)
    assert policy_digest(parse_policy(changed)) != before
    assert policy_digest(parse_policy(yaml.safe_dump(_reordered(changed)))) != before


def test_a_declared_policy_digest_must_be_the_bodys_own():
    body = policy()
    good = policy_digest(parse_policy(body))
    assert parse_policy({**body, "policy": {**body["policy"], "digest": good}}).policy.digest == good
    wrong = {**body, "policy": {**body["policy"], "digest": "sha256:" + "0" * 64}}
    assert policy_errors(wrong)[0].startswith(f"policy.digest: sha256:{'0' * 64} does not match the body ({good})")


def test_the_ranking_factors_apply_in_the_order_the_policy_lists_them():
    relevant_but_big = item("big", content="relevant " * 300, relevance=0.9)
    cheap = item("cheap", content="cheap", relevance=0.2)

    def ranks(factors):
        pol = policy()
        pol["admission"]["ranking"] = factors
        r = run(request(extra=[relevant_but_big, cheap]), pol)
        return {i.item_id: i.rank for i in r.manifest.included if i.item_id in ("big", "cheap")}

    by_relevance = ranks(["current_decision_relevance", "retrieval_cost"])
    by_cost = ranks(["retrieval_cost", "current_decision_relevance"])
    assert by_relevance["big"] < by_relevance["cheap"] and by_cost["cheap"] < by_cost["big"]


def test_a_security_class_the_policy_names_secret_is_denied():
    pol = policy(security={"secret_classes": ["pii"]})
    rec = excluded_record(run(request(extra=[item("people", security_class="pii")]), pol), "people")
    assert rec.reason == "security_rejected"
    assert "people" in run(request(extra=[item("people", security_class="pii")])).manifest.included_ids()


def test_without_stable_prefix_sources_the_cache_is_bypassed():
    c = run(request(), policy(cache={"stable_prefix_sources": []})).manifest.cache
    assert c.policy == "bypassed" and c.status == "bypassed"


@pytest.mark.parametrize(("section", "key", "value"), [
    ("security", "external_instruction_text", "obey"),
    ("security", "cross_scope_data", "allow"),
    ("security", "secret_material", "allow"),
    ("disclosure", "mode", "everything_at_once"),
])
def test_a_single_valued_clause_refuses_any_other_value_by_path(section, key, value):
    assert policy_errors(policy(**{section: {key: value}}))[0].startswith(f"{section}.{key}:")


def test_another_policy_schema_version_is_refused():
    assert policy_errors(policy(policy_schema_version="context-policy/v9"))[0].startswith("policy_schema_version:")
