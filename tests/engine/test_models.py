"""Bad input: every refusal names the field path (`candidates[3].item_id: field required`)."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from ctxeng.engine import InvalidInput, assemble, parse_policy, parse_request
from ctxeng.engine.models import AssemblyRequest, ContextAssemblyManifest, ContextPolicy

from .builders import CREATED_AT, item, policy, request, run, tool_call, tool_result


def request_errors(data) -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        parse_request(data)
    return exc.value.errors


def policy_errors(data) -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        parse_policy(data)
    return exc.value.errors


def test_a_missing_item_id_is_named_by_its_path():
    req = request()
    del req["candidates"][3]["item_id"]
    assert request_errors(req) == ["candidates[3].item_id: field required"]


def test_an_item_without_content_or_artifact_ref_is_named_by_its_path():
    req = request()
    req["candidates"][2]["content"] = None
    assert request_errors(req)[0].startswith("candidates[2].content: field required")


def test_duplicate_item_ids_are_refused():
    req = request(extra=[item("goal", "user_request")])
    assert request_errors(req) == ["candidates[5].item_id: duplicate item_id 'goal' (also candidates[1])"]


def test_duplicate_call_ids_are_refused():
    req = request(tool_calls=[tool_call("c1", None), tool_call("c1", None)])
    assert request_errors(req) == ["tool_calls[1].call_id: duplicate call_id 'c1'"]


def test_a_tool_call_whose_result_item_is_missing_is_refused():
    assert request_errors(request(tool_calls=[tool_call("c1", "nowhere")]))[0].startswith("tool_calls[0].result_item_id: result item 'nowhere'")


def test_a_result_item_naming_another_call_is_refused():
    req = request(extra=[tool_result("r1", "c2")], tool_calls=[tool_call("c1", "r1"), tool_call("c2", None)])
    assert request_errors(req)[0].startswith("candidates[5].call_id: must be 'c1'")


def test_a_result_item_for_an_unknown_call_is_refused():
    assert request_errors(request(extra=[tool_result("r1", "ghost")]))[0] == "candidates[5].call_id: no tool call with call_id 'ghost'"


def test_unknown_enum_values_are_refused_with_the_allowed_values():
    req = request()
    req["candidates"][0]["freshness"] = "fresh"
    req["candidates"][1]["intended_role"] = "admin"
    errors = request_errors(req)
    assert errors[0].startswith("candidates[0].freshness: unknown value 'fresh'; expected 'valid'")
    assert errors[1].startswith("candidates[1].intended_role: unknown value 'admin'")


def test_unknown_fields_are_refused_never_ignored():
    req = request()
    req["candidates"][0]["relevence"] = 0.4
    assert request_errors(req) == ["candidates[0].relevence: unknown field"]


def test_a_malformed_content_hash_is_refused():
    req = request()
    req["candidates"][0]["content_hash"] = "md5:abc"
    assert request_errors(req)[0].startswith("candidates[0].content_hash:")


def test_a_tool_name_a_provider_would_reject_is_refused():
    assert request_errors(request(tool_calls=[tool_call("c1", None, tool_name="fs.read file")]))[0].startswith("tool_calls[0].tool_name:")


def test_duplicate_source_request_ids_are_refused():
    rec = {"source_request_id": "sr", "source": {"type": "repository", "id": "pi"}, "outcome": "retrieved"}
    assert request_errors(request(source_acquisition=[rec, rec]))[0].startswith("source_acquisition[1].source_request_id: duplicate")


def test_an_unknown_acquisition_outcome_is_refused():
    rec = {"source_request_id": "sr", "source": {"type": "repository", "id": "pi"}, "outcome": "lost"}
    assert request_errors(request(source_acquisition=[rec]))[0].startswith("source_acquisition[0].outcome: unknown value 'lost'")


def test_malformed_json_and_non_objects_are_refused_plainly():
    assert request_errors("{not json")[0].startswith("body: malformed JSON")
    assert request_errors("[1, 2]") == ["body: expected a JSON object, got list"]


def test_policy_errors_name_their_path():
    pol = policy()
    pol["role_limits"]["root"] = ["control"]
    pol["budget"]["partitions"]["extra"] = {"minimum": 5, "maximum": 3}
    errors = policy_errors(pol)
    assert any(e.startswith("role_limits.root: unknown value 'root'") for e in errors)
    assert "budget.partitions.extra: minimum 5 exceeds maximum 3" in errors


def test_a_policy_whose_minimums_exceed_its_usable_budget_is_refused():
    pol = copy.deepcopy(policy())
    pol["budget"]["partitions"]["control"]["minimum"] = 50_000
    assert policy_errors(pol)[0].startswith("budget.partitions: minimums sum to")


def test_a_kind_in_two_partitions_is_refused():
    pol = copy.deepcopy(policy())
    pol["budget"]["partitions"]["background"]["kinds"].append("evidence")
    assert policy_errors(pol)[0].startswith("budget.partitions.background.kinds: kind 'evidence' already in partition")


def test_a_policy_without_room_for_the_answer_is_refused():
    # Anthropic rejects max_tokens 0, and no provider can answer in zero tokens.
    pol = copy.deepcopy(policy())
    pol["budget"]["response_reserve"] = 0
    assert policy_errors(pol) == ["budget.response_reserve: Input should be greater than 0"]


def test_yaml_that_reads_expiry_on_as_a_boolean_still_parses():
    text = "policy: {id: p, revision: 1}\nrole_limits: {}\nbudget: {model_context_limit: 10, response_reserve: 1, protocol_overhead: 1, safety_margin: 1, partitions: {a: {}}}\nexpiry:\n  on: [task_closed]\n"
    assert parse_policy(text).expiry.on == ["task_closed"]


def test_a_request_for_another_policy_is_refused_at_assembly():
    with pytest.raises(InvalidInput) as exc:
        assemble(parse_request(request(policy={"id": "other", "revision": 1})), parse_policy(policy()), created_at=CREATED_AT)
    assert exc.value.errors[0].startswith("policy.id:")


def test_an_unknown_adapter_is_refused_at_assembly():
    with pytest.raises(InvalidInput) as exc:
        run(request(adapter="gemini"))
    assert exc.value.errors[0].startswith("adapter: unknown adapter 'gemini'")


def test_models_are_frozen_and_round_trip_through_json():
    req = parse_request(request(extra=[item("ev")]))
    with pytest.raises(ValidationError):
        req.run_id = "other"  # type: ignore[misc]
    assert AssemblyRequest.model_validate_json(req.model_dump_json()) == req
    pol = parse_policy(policy())
    assert ContextPolicy.model_validate(pol.model_dump(mode="json")) == pol
    manifest = run(request()).manifest
    assert ContextAssemblyManifest.model_validate(manifest.model_dump(mode="json")) == manifest
