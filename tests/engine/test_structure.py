"""Structure (stage 5): trust zones, and tool calls paired with exactly one result by call_id."""

from __future__ import annotations

import copy
import random

import pytest

from ctxeng.engine.structure import canonical_argument_hash, serialized_call_id

from .builders import canonical, item, policy, reasons, request, run, sha, tool_call, tool_result
from .payloads import call_ids, fence_header, validate


def _three_calls() -> dict:
    results = [tool_result(f"r{i}", f"c{i}", f"output of call {i}") for i in range(1, 4)]
    calls = [tool_call(f"c{i}", f"r{i}", completed_seq=seq) for i, seq in zip(range(1, 4), (3, 1, 2), strict=True)]
    return request(extra=results, tool_calls=calls)


def test_each_call_is_paired_with_its_own_result_by_call_id():
    r = run(_three_calls())
    assert {p.call_id: p.result_item_id for p in r.manifest.tool_pairs} == {"c1": "r1", "c2": "r2", "c3": "r3"}
    for p in r.manifest.tool_pairs:
        assert p.result_hash == sha(f"output of call {p.call_id[1]}")
    # The payload, not the manifest's label, shows the pairing: one tool message per call, each
    # holding that call's own output and no other call's.
    answers = {m["tool_call_id"]: m["content"] for m in r.serialized_input["messages"] if m["role"] == "tool"}
    assert sorted(answers) == ["c1", "c2", "c3"]
    for call_id, content in answers.items():
        outputs = [n for n in "123" if f"output of call {n}" in content]
        assert outputs == [call_id[1]], (call_id, content)


@pytest.mark.parametrize("seed", range(5))
def test_shuffled_completion_and_candidate_order_change_neither_pairing_nor_the_serialized_input(seed):
    base = _three_calls()
    shuffled = copy.deepcopy(base)
    rng = random.Random(seed)
    rng.shuffle(shuffled["candidates"])
    seqs = [c["completed_seq"] for c in shuffled["tool_calls"]]
    rng.shuffle(seqs)
    for call, seq in zip(shuffled["tool_calls"], seqs, strict=True):
        call["completed_seq"] = seq
    a, b = run(base), run(shuffled)
    pairing = lambda r: [(p.call_id, p.result_item_id, p.serialized_order) for p in r.manifest.tool_pairs]  # noqa: E731
    assert pairing(a) == pairing(b)
    assert call_ids(a.serialized_input) == call_ids(b.serialized_input) == (["c1", "c2", "c3"], ["c1", "c2", "c3"])
    assert canonical(a.serialized_input) == canonical(b.serialized_input)
    assert a.manifest.assembly.serialized_model_input_hash == b.manifest.assembly.serialized_model_input_hash
    assert a.manifest.assembly.assembly_input_hash == b.manifest.assembly.assembly_input_hash


def test_completion_order_is_recorded_but_serialization_follows_assistant_source_order():
    r = run(_three_calls())
    # Completion order is 2, 3, 1 (completed_seq 3, 1, 2); the payload keeps the request's order.
    assert call_ids(r.serialized_input) == (["c1", "c2", "c3"], ["c1", "c2", "c3"])
    assert {p.call_id: p.completed_seq for p in r.manifest.tool_pairs} == {"c1": 3, "c2": 1, "c3": 2}


@pytest.mark.parametrize("bad_id", ["call with space", "call/with/slash", "x" * 41, "ünïcode"])
@pytest.mark.parametrize("adapter", ["openai_chat", "anthropic_messages"])
def test_a_call_id_a_provider_would_reject_is_rewritten_the_same_way_on_both_sides(bad_id, adapter):
    req = request(extra=[tool_result("r1", bad_id)], tool_calls=[tool_call(bad_id, "r1")], adapter=adapter)
    r = run(req)
    (pair,) = r.manifest.tool_pairs
    assert pair.call_id == bad_id and pair.serialized_call_id != bad_id
    assert pair.serialized_call_id == serialized_call_id(bad_id) == run(req).manifest.tool_pairs[0].serialized_call_id
    validate(r.serialized_input, adapter)
    assert call_ids(r.serialized_input) == ([pair.serialized_call_id], [pair.serialized_call_id])


def test_a_valid_call_id_is_kept_verbatim():
    assert serialized_call_id("call_ABC-123") == "call_ABC-123"


def test_two_ids_that_rewrite_alike_are_never_merged():
    clash = serialized_call_id("a b")
    req = request(extra=[tool_result("r1", clash), tool_result("r2", "a b")], tool_calls=[tool_call(clash, "r1"), tool_call("a b", "r2")])
    r = run(req)
    sids = [p.serialized_call_id for p in r.manifest.tool_pairs]
    assert len(set(sids)) == 2
    validate(r.serialized_input, "openai_chat")


@pytest.mark.parametrize("adapter", ["openai_chat", "anthropic_messages"])
def test_an_unresolved_call_gets_a_typed_synthetic_result_by_default(adapter):
    r = run(request(tool_calls=[tool_call("lost", None)], adapter=adapter))
    (pair,) = r.manifest.tool_pairs
    assert pair.decision == "unresolved" and pair.unresolved_handling == "synthetic_result"
    assert pair.evidence_use == "unresolved" and pair.pairing_assertion == "no_result_for_call"
    validate(r.serialized_input, adapter)
    calls, results = call_ids(r.serialized_input)
    assert calls == results == ["lost"]
    assert "ctxeng_synthetic_result" in canonical(r.serialized_input)


@pytest.mark.parametrize("adapter", ["openai_chat", "anthropic_messages"])
def test_omit_call_leaves_an_unresolved_call_out_of_the_payload_entirely(adapter):
    pol = policy(structure={"unresolved_tool_calls": "omit_call"})
    req = request(extra=[tool_result("r1", "c1")], tool_calls=[tool_call("c1", "r1"), tool_call("lost", None)], adapter=adapter)
    r = run(req, pol)
    pairs = {p.call_id: p for p in r.manifest.tool_pairs}
    assert pairs["lost"].decision == "unresolved" and pairs["lost"].unresolved_handling == "omit_call"
    assert pairs["lost"].serialized_order is None
    validate(r.serialized_input, adapter)
    assert call_ids(r.serialized_input) == (["c1"], ["c1"])


def test_a_call_whose_result_was_rejected_by_a_gate_is_unresolved_not_orphaned():
    tampered = tool_result("r1", "c1", "output", content_hash=sha("forged"))
    r = run(request(extra=[tampered], tool_calls=[tool_call("c1", "r1")]))
    assert reasons(r) == {"r1": "hard_gate_rejected"}
    (pair,) = r.manifest.tool_pairs
    assert pair.decision == "unresolved"
    assert "r1 was excluded (hard_gate_rejected)" in canonical(r.serialized_input)
    calls, results = call_ids(r.serialized_input)
    assert calls == results == ["c1"]


def test_the_canonical_argument_hash_ignores_key_order():
    assert canonical_argument_hash("read", {"a": 1, "b": {"x": 1, "y": 2}}) == canonical_argument_hash("read", {"b": {"y": 2, "x": 1}, "a": 1})
    assert canonical_argument_hash("read", {"a": 1}) != canonical_argument_hash("write", {"a": 1})
    # The documented form, written out by hand: sha256 over the sorted, compact JSON of both.
    assert canonical_argument_hash("read", {"b": 2, "a": 1}) == sha('{"arguments":{"a":1,"b":2},"tool_name":"read"}')


def test_the_same_arguments_under_two_call_ids_are_two_pairs():
    args = {"path": "a.ts"}
    req = request(
        extra=[tool_result("r1", "c1", "first read"), tool_result("r2", "c2", "second read")],
        tool_calls=[tool_call("c1", "r1", arguments=args), tool_call("c2", "r2", arguments=dict(reversed(list(args.items()))))],
    )
    r = run(req)
    pairs = r.manifest.tool_pairs
    assert len(pairs) == 2
    expected = sha('{"arguments":{"path":"a.ts"},"tool_name":"read_source"}')
    assert [p.canonical_argument_hash for p in pairs] == [expected, expected]
    assert {p.result_item_id for p in pairs} == {"r1", "r2"}
    assert call_ids(r.serialized_input) == (["c1", "c2"], ["c1", "c2"])


def test_partial_and_error_results_are_diagnostic_only_unless_the_policy_allows():
    req = request(
        extra=[tool_result("r1", "c1"), tool_result("r2", "c2")],
        tool_calls=[tool_call("c1", "r1", status="partial"), tool_call("c2", "r2", status="error")],
    )
    assert {p.evidence_use for p in run(req).manifest.tool_pairs} == {"diagnostic_only"}
    pol = policy(structure={"evidence_use_allowed_for": ["success", "partial"]})
    uses = {p.call_id: p.evidence_use for p in run(req, pol).manifest.tool_pairs}
    assert uses == {"c1": "confirmed_by_policy", "c2": "diagnostic_only"}


def test_every_admitted_item_is_placed_in_the_zone_its_role_maps_to():
    r = run(request(extra=[item("ev"), item("sum", "model_summary", "Goal: g\nOI-1", input_item_ids=["ev"], source_refs=[{"repo": "pi", "commit": "c0ffee", "path": "src/ev.ts", "lines": "2-5"}], preserves={"open_item_ids": ["OI-1"]}, producer="agent/v1")]))
    zones = {i.item_id: i.zone for i in r.manifest.included}
    assert zones["system"] == "control" and zones["goal"] == "task" and zones["stage"] == "state"
    assert zones["ev"] == "untrusted_data" and zones["sum"] == "state"
    # What the model reads: each fenced block's header names its trust in one word (by role), and
    # control text is only in the system message.
    delivered = {b["item_id"]: fence_header(b["text"])["trust"] for b in r.assembly_input["blocks"]}
    assert delivered == {"goal": "task", "constraints": "task", "stage": "state", "open": "state", "sum": "derived", "ev": "untrusted"}
    assert r.assembly_input["control"]["item_ids"] == ["system"]


def test_source_lineage_is_kept_in_order_on_the_included_record():
    lineage = [
        {"node_id": "raw", "type": "repository_source", "digest": sha("raw")},
        {"node_id": "ev", "type": "excerpt", "input_node_ids": ["raw"], "digest": sha("content of ev")},
    ]
    r = run(request(extra=[item("ev", source_lineage=lineage)]))
    rec = next(i for i in r.manifest.included if i.item_id == "ev")
    assert [n.node_id for n in rec.source_lineage] == ["raw", "ev"]
