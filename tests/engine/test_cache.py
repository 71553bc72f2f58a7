"""Prompt-cache identity (stage 9): a stable prefix of control text only, invalidated by identity changes."""

from __future__ import annotations

import copy

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


def test_a_cache_hit_skips_no_admission_decision():
    first = run(request())
    r = run(request(extra=[item("bad", freshness="expired")], previous_cache=previous(first)))
    assert r.manifest.cache.status == "hit" and r.manifest.excluded_reasons() == {"bad": "expired"}


def test_without_a_stable_source_the_cache_is_bypassed():
    r = run(request(candidates=[i for i in request()["candidates"] if i["item_id"] != "system"]))
    assert r.manifest.cache.policy == "bypassed" and r.manifest.cache.prefix_hash is None
