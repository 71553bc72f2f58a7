"""Prompt-cache identity (stage 9): a stable prefix of control text only, invalidated by identity changes."""

from __future__ import annotations

import copy
import json

import pytest

from ctxeng.engine import InvalidInput, parse_policy
from ctxeng.engine.tokens import tokenizer_for

from .builders import item, policy, request, run, system_text


def test_the_stable_prefix_is_the_system_policy_only():
    r = run(request(extra=[item("ev")]))
    c = r.manifest.cache
    assert c.prefix_source_ids == ["system"] and c.policy == "eligible"
    assert system_text(r.serialized_input).startswith("You are a careful research agent")


def test_the_prefix_identity_is_unchanged_when_only_the_dynamic_tail_changes():
    a = run(request(extra=[item("ev", content="first evidence")]))
    b = run(request(extra=[item("ev", content="other evidence"), item("more")], stage="reviewing"))
    assert a.manifest.cache.prefix_identity == b.manifest.cache.prefix_identity
    assert a.manifest.cache.prefix_hash == b.manifest.cache.prefix_hash
    assert a.manifest.assembly.serialized_model_input_hash != b.manifest.assembly.serialized_model_input_hash


def test_the_prefix_identity_changes_with_the_policy_revision():
    pol = policy()
    pol2 = copy.deepcopy(pol)
    pol2["policy"]["revision"] = 2
    a = run(request(), pol)
    b = run(request(policy={"id": "test-policy", "revision": 2}), pol2)
    assert a.manifest.cache.prefix_identity != b.manifest.cache.prefix_identity
    assert a.manifest.cache.prefix_hash == b.manifest.cache.prefix_hash  # same bytes, new identity


def test_the_prefix_identity_changes_with_the_runtime_policy_or_the_system_text():
    base = run(request()).manifest.cache.prefix_identity
    assert run(request(runtime_policy_revision="rt-2")).manifest.cache.prefix_identity != base
    req = request()
    req["candidates"][0] = item("system", "system_policy", "New rules.")
    assert run(req).manifest.cache.prefix_identity != base


def previous(result) -> dict:
    """What an agent sends back at its next step: the previous manifest's cache record, verbatim."""
    return result.manifest.cache.model_dump(mode="json")


def test_a_matching_previous_cache_record_is_a_hit_and_anything_else_a_miss():
    first = run(request())
    assert run(request(previous_cache=previous(first))).manifest.cache.status == "hit"
    other = previous(first) | {"prefix_identity": "sha256:" + "0" * 64}
    c = run(request(previous_cache=other)).manifest.cache
    assert c.status == "miss" and c.invalidated_by == ["prefix_identity_changed"]


def test_a_previous_identity_alone_cannot_verify_the_invalidation_causes_so_it_is_a_miss():
    identity = run(request()).manifest.cache.prefix_identity
    c = run(request(previous_prefix_identity=identity)).manifest.cache
    assert c.status == "miss" and c.invalidated_by == ["previous_invalidation_keys_unknown"]


def test_a_blocked_steps_cache_record_has_no_prefix_and_sent_back_it_makes_a_miss():
    """A blocked assembly produces no payload: no prefix hash, identity, marker or keys. Sent back
    as `previous_cache` (as a client may), it names why the next step cannot be a hit."""
    req = request()
    req["candidates"] = [c for c in req["candidates"] if c["kind"] != "open_items_summary"]  # resident, so blocked
    blocked = run(req).manifest
    assert blocked.assembly.status == "blocked"
    c = blocked.cache
    assert (c.prefix_hash, c.prefix_identity, c.provider_marker, c.invalidation_keys) == (None, None, None, {})
    assert c.status == "bypassed" and c.prefix_source_ids == []
    after = run(request(previous_cache=blocked.cache.model_dump(mode="json"))).manifest.cache
    assert after.status == "miss" and after.invalidated_by == ["previous_step_blocked"]


def test_a_cache_hit_skips_no_admission_decision():
    first = run(request())
    r = run(request(extra=[item("bad", freshness="expired")], previous_cache=previous(first)))
    assert r.manifest.cache.status == "hit" and r.manifest.excluded_reasons() == {"bad": "expired"}


def test_without_a_stable_source_the_cache_is_bypassed():
    r = run(request(candidates=[i for i in request()["candidates"] if i["item_id"] != "system"]))
    assert r.manifest.cache.policy == "bypassed" and r.manifest.cache.prefix_hash is None


def test_changing_the_principals_permissions_never_reports_a_hit():
    first = run(request())
    grants = {"id": "agent/v1", "tenant": "tenant-x", "project": "project-y", "permissions": ["publish"]}
    c = run(request(principal=grants, previous_cache=previous(first))).manifest.cache
    assert c.status == "miss" and c.invalidated_by == ["permission_change"]


def test_a_changed_project_rule_is_a_miss_with_its_cause():
    first = run(request())
    req = request(previous_cache=previous(first))
    req["candidates"][2] = item("constraints", "user_request", "Cite fixed revisions only. Never publish.", kind="hard_constraints")
    c = run(req).manifest.cache
    assert c.status == "miss" and c.invalidated_by == ["project_rule_change"]


def test_the_identity_is_computed_from_exactly_the_listed_fields():
    pol = policy(cache={"identity": ["ordered_source_ids", "source_content_hashes"], "invalidate_on": ["runtime_policy_change"]})
    first = run(request(), pol)
    later = run(request(runtime_policy_revision="rt-2", previous_cache=previous(first)), pol).manifest.cache
    assert later.prefix_identity == first.manifest.cache.prefix_identity  # the runtime revision is not an identity field
    assert later.status == "miss" and later.invalidated_by == ["runtime_policy_change"]  # but it is a cause


def test_a_cause_the_policy_does_not_list_does_not_invalidate():
    pol = policy(cache={"invalidate_on": ["context_policy_revision"]})
    first = run(request(), pol)
    grants = {"id": "agent/v1", "tenant": "tenant-x", "project": "project-y", "permissions": ["publish"]}
    c = run(request(principal=grants, previous_cache=previous(first)), pol).manifest.cache
    assert c.status == "hit" and list(c.invalidation_keys) == ["context_policy_revision"]


def test_a_previous_record_missing_a_listed_key_cannot_be_a_hit():
    first = previous(run(request()))
    del first["invalidation_keys"]["permission_change"]
    c = run(request(previous_cache=first)).manifest.cache
    assert c.status == "miss" and c.invalidated_by == ["permission_change"]


def test_an_unknown_identity_field_is_refused_by_path():
    with pytest.raises(InvalidInput) as exc:
        parse_policy(policy(cache={"identity": ["ordered_source_ids", "phase_of_moon"]}))
    assert exc.value.errors[0].startswith("cache.identity[1]: unknown value 'phase_of_moon'")


def test_nothing_is_cache_eligible_without_the_previous_steps_payload_hashes():
    first = run(request())
    unknown = run(request(previous_cache=previous(first) | {"payload_prefix_hashes": []})).manifest.cache
    assert (unknown.cache_eligible_basis, unknown.cache_eligible_tokens, unknown.cache_eligible_share) == ("previous_prefix_hashes_unknown", 0, 0)
    known = run(request(previous_cache=previous(first))).manifest.cache
    assert known.cache_eligible_basis == "previous_step" and known.cache_eligible_share == 1  # the same request, the same bytes


def test_after_a_blocked_step_nothing_is_cache_eligible_and_a_blocked_step_has_no_figure():
    req = request()
    req["candidates"] = [c for c in req["candidates"] if c["kind"] != "open_items_summary"]
    blocked = run(req).manifest.cache
    assert (blocked.cache_eligible_basis, blocked.cache_eligible_share, blocked.payload_text_tokens, blocked.payload_prefix_hashes) == ("blocked", None, None, [])
    after = run(request(previous_cache=blocked.model_dump(mode="json"))).manifest.cache
    assert (after.cache_eligible_basis, after.cache_eligible_tokens) == ("previous_step_blocked", 0)


def test_the_record_names_the_declared_stable_sources_and_counts_the_prefix():
    r = run(request())
    c = r.manifest.cache
    assert c.stable_prefix_sources == ["system_policy"]
    encoding = tokenizer_for(r.manifest.assembly.estimate.encoding)
    assert c.stable_prefix_tokens == encoding.count("You are a careful research agent. Cite every claim.")


def test_a_previous_record_with_a_hash_that_is_not_one_is_refused_naming_the_field():
    first = run(request())
    bad = previous(first) | {"payload_prefix_hashes": ["sha256:nothex"]}
    with pytest.raises(InvalidInput) as exc:
        run(request(previous_cache=bad))
    assert any(line.startswith("previous_cache.payload_prefix_hashes[0]") for line in exc.value.errors), exc.value.errors


@pytest.mark.parametrize("adapter", ["openai_chat", "anthropic_messages", "openai_responses"])
def test_the_payload_hash_made_from_the_cache_records_unit_texts_is_the_payloads_own(adapter):
    """The seal hashes the payload from the messages' canonical JSON the cache record made (issue
    48); the oracle is sha256 of the payload serialized here, whole. Texts that JSON escapes
    (quotes, backslashes, newlines, control characters) and non-ASCII ones included."""
    from ctxeng.engine.cache import payload_sha256
    from ctxeng.engine.hashing import sha256_json

    odd = 'a "quoted" \\ path\nline two\ttab \x01 é 漢字 \u2028 <<<ctx'
    req = request(extra=[item("ev", content=odd), item("ev2", content="plain")], adapter=adapter, params={"temperature": 0.5})
    r = run(req)
    assert r.status == "ready"
    payload = r.serialized_input
    assert r.manifest.assembly.serialized_model_input_hash == sha256_json(payload)
    messages = payload.get("messages", payload.get("input"))
    assert messages and "漢字" in json.dumps(messages, ensure_ascii=False)  # the odd item is sent
    key = "messages" if "messages" in payload else "input"
    own = {f"{key}[{i}]": json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False) for i, m in enumerate(messages)}
    assert payload_sha256(payload, own) == payload_sha256(payload, {}) == sha256_json(payload)
    # A text that is not the message's own changes the hash: the unit texts are what is hashed.
    wrong = {**own, f"{key}[0]": own[f"{key}[0]"].replace("{", '{"x":1,', 1)}
    assert payload_sha256(payload, wrong) != sha256_json(payload)
