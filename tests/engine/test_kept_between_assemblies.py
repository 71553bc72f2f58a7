"""What one assembly keeps for the next (issue 48: the candidate records, the secret findings of a
call's arguments by their text, a policy's folded secret classes) never answers for an input it was
not made from. Each case assembles, in one process and with the memos on, a run of requests that
differ in one fact only (a value's JSON type, a revision's type, the trust, the scope, the content,
the arguments, the policy); every assembly's manifest and payload are a fresh engine's for the same
request (every memo empty: `memo.off()`), whatever was assembled before it."""

from __future__ import annotations

import copy

import pytest

from ctxeng.engine import memo

from .builders import SCOPE, base_items, item, policy, request, run, tool_call, tool_result

KEY = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2


@pytest.fixture(autouse=True)
def _empty_memos():
    memo.clear_all()


def assembled_as_fresh(req: dict, pol: dict | None = None):
    kept = run(copy.deepcopy(req), pol)
    with memo.off():
        fresh = run(copy.deepcopy(req), pol)
    assert kept.manifest_dict() == fresh.manifest_dict()
    assert kept.serialized_input == fresh.serialized_input
    return kept


def doc(**fields) -> dict:
    return item("doc", "official_document", "The pairing rule: a result follows its call.", **fields)


def record(result, item_id: str = "doc") -> dict:
    return next(r for r in result.manifest_dict()["candidate_items"] if r["item_id"] == item_id)


# A source_ref value that Python calls equal (and hashes alike) in another JSON type, and -0.0.
@pytest.mark.parametrize("values", [[1, True, 1.0, "1", 1], [0, False, 0.0, -0.0, None, 0]])
def test_a_candidate_record_follows_its_source_refs_json_types(values):
    for value in values:
        ref = {"url": "https://docs.example.org/doc", "n": value}
        result = assembled_as_fresh(request(extra=[doc(source_ref=ref)]))
        kept = record(result)["source_ref"]["n"]
        assert kept == value and type(kept) is type(value) and repr(kept) == repr(value)


def test_a_candidate_record_follows_its_revisions_type():
    for revision in (1, "1", 2, 1):
        result = assembled_as_fresh(request(extra=[doc(revision=revision)]))
        assert type(record(result)["revision"]) is type(revision)


def test_a_candidate_record_follows_the_trust_and_security_class():
    for fields in ({"trust": "external_evidence"}, {"trust": "project_editable"}, {"security_class": "public"},
                   {"trust": "external_evidence"}):
        result = assembled_as_fresh(request(extra=[doc(**fields)]))
        assert all(record(result)[k] == v for k, v in fields.items())


def test_a_candidate_record_follows_the_scope_of_another_run():
    # Two runs in one process with the same history under two scopes (another task of the project).
    for scope in (SCOPE, "tenant-x/project-y/task-2", SCOPE):
        items = [{**c, "scope": scope} for c in base_items() + [doc()]]
        result = assembled_as_fresh(request(items, scope=scope))
        assert record(result)["scope"] == scope


def test_a_candidate_record_follows_a_content_changed_in_the_middle():
    for text in ("first reading", "second reading", "first reading"):
        middle = item("middle", "official_document", text)
        result = assembled_as_fresh(request(extra=[doc(), middle, item("last", "official_document", "unchanged")]))
        assert record(result, "middle")["content_hash"] == middle["content_hash"]


def call_request(arguments: dict) -> dict:
    calls = [tool_call("call-1", "result-1", arguments=arguments)]
    return request(extra=[tool_result("result-1", "call-1", "export const pair = 1;")], tool_calls=calls)


def test_a_calls_findings_follow_its_arguments_not_its_place():
    # The same call at the same place (the same field path), with arguments that change between
    # assemblies: a credential appears, moves to another key, changes type around it, and goes.
    for arguments in ({"path": "src/a.ts"}, {"path": "src/a.ts", "token": KEY}, {"path": "src/a.ts", "env": {"API": KEY}},
                      {"path": "src/a.ts", "token": 1}, {"path": "src/a.ts", "token": True}, {"path": "src/a.ts"}):
        result = assembled_as_fresh(call_request(arguments))
        sent = str(result.serialized_input)
        assert KEY not in sent
        pair = result.manifest_dict()["tool_pairs"][0]
        assert bool(pair["argument_redactions"]) == (KEY in str(arguments))


def test_each_policy_judges_by_its_own_secret_classes():
    internal = request(extra=[doc(security_class="internal")])
    strict = policy()
    strict["security"] = {**strict.get("security", {}), "secret_classes": ["secret", "internal"]}
    for pol in (policy(), strict, policy(), strict):
        result = assembled_as_fresh(internal, pol)
        excluded = {e["item_id"] for e in result.manifest_dict()["excluded"]}
        assert ("doc" in excluded) == (pol is strict)


def test_a_candidate_record_follows_the_count_of_the_models_encoding():
    # The same item counted by two encodings (cl100k for gpt-4, o200k for gpt-4o) in one process.
    text = "配对规则：每个结果都跟在它的调用之后。" * 8
    counts = {}
    for name in ("gpt-4", "gpt-4o", "gpt-4"):
        model = {"provider": "openai", "name": name, "context_limit": 16000}
        result = assembled_as_fresh(request(extra=[item("doc", "official_document", text)], model=model))
        counts[name] = record(result)["estimated_tokens"]
    assert counts["gpt-4"] != counts["gpt-4o"]


def test_the_kept_candidate_record_is_keyed_by_every_field_the_record_holds():
    # seal._candidate_record's key names each input of a CandidateRecord by hand: a field added to
    # the record (or taken from another input) must be added to the key too, or a record kept for
    # one item would stand in for another that differs only there. This list is that key's fields;
    # a change of the record's fields fails here until the key is looked at.
    from ctxeng.engine.manifest_models import CandidateRecord

    keyed = {"item_id", "kind", "source_type", "source_ref", "source_request_id", "producer", "content_hash",
             "revision", "scope", "freshness", "trust", "intended_role", "security_class", "completeness",
             "estimated_tokens", "token_count", "artifact_ref"}
    assert set(CandidateRecord.model_fields) == keyed
