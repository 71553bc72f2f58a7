"""Superseded writes (issue 47, `ctxeng.engine.elision`): a write call's long arguments elided in the
payload once a later turn wrote the same object, with the record and its computed assertions.

The oracle is written by hand: which call is superseded, which arguments are long, and the marker's
exact text follow from the request below, never from the manifest the engine produced."""

from __future__ import annotations

import json

from ctxeng.engine.elision import MIN_CHARS, check_elision

from .builders import policy, request, run, tool_call, tool_result

PLAN1 = "PLAN v1: " + "align the token ttl with the contract; " * 12
PLAN2 = "PLAN v2: " + "pin the runner image in ci-config; " * 12
ON = {"allowed": ["none", "excerpt", "summarize", "elide_superseded"], "preserve": ["goal", "open_items", "source_refs"]}
MARKER_W2 = "[elided by ctxeng: superseded by the write in call w2]"


def write(call_id: str, turn: int, content: str, *, path: str = "PLAN.md", **args) -> tuple[dict, dict]:
    result = tool_result(f"result-{call_id}", call_id, f"Wrote {path}", source_ref={"path": path, "access": "write", "replaces": True})
    call = dict(tool_call(call_id, result["item_id"], tool_name="write_file", arguments={"path": path, "content": content, **args}), turn=turn)
    return result, call


def req(*writes: tuple[dict, dict]) -> dict:
    return request(extra=[r for r, _ in writes], tool_calls=[c for _, c in writes])


def sent_arguments(result) -> dict[str, dict]:
    """call id -> its arguments as the payload carries them (OpenAI chat)."""
    return {c["id"]: json.loads(c["function"]["arguments"])
            for m in result.serialized_input["messages"] for c in m.get("tool_calls") or []}


def test_an_earlier_write_is_elided_when_a_later_turn_writes_the_same_object():
    r = run(req(write("w1", 1, PLAN1), write("w2", 3, PLAN2)), policy(transforms=ON))
    args = sent_arguments(r)
    assert args["w1"] == {"path": "PLAN.md", "content": MARKER_W2}
    assert args["w2"] == {"path": "PLAN.md", "content": PLAN2}
    assert PLAN1 not in json.dumps(r.serialized_input)


def test_a_later_write_in_the_same_turn_supersedes_nothing():
    r = run(req(write("w1", 1, PLAN1), write("w2", 1, PLAN2)), policy(transforms=ON))
    assert sent_arguments(r)["w1"]["content"] == PLAN1
    assert r.manifest.transforms == []


def test_a_single_write_is_never_elided():
    r = run(req(write("w1", 1, PLAN1)), policy(transforms=ON))
    assert sent_arguments(r)["w1"]["content"] == PLAN1
    assert r.manifest.transforms == []


def test_a_write_of_another_object_or_a_failed_later_write_supersedes_nothing():
    other = write("w2", 3, PLAN2, path="NOTES.md")
    failed_result, failed_call = write("w3", 4, PLAN2)
    failed_call["status"] = "error"
    r = run(req(write("w1", 1, PLAN1), other, (failed_result, failed_call)), policy(transforms=ON))
    assert sent_arguments(r)["w1"]["content"] == PLAN1


def test_the_elided_call_stays_paired_with_its_unchanged_result():
    r = run(req(write("w1", 1, PLAN1), write("w2", 3, PLAN2)), policy(transforms=ON))
    messages = r.serialized_input["messages"]
    call_msg = next(i for i, m in enumerate(messages) for c in m.get("tool_calls") or [] if c["id"] == "w1")
    answers = [m for m in messages if m.get("role") == "tool" and m.get("tool_call_id") == "w1"]
    assert len(answers) == 1 and "Wrote PLAN.md" in answers[0]["content"]
    assert messages.index(answers[0]) > call_msg
    pair = next(p for p in r.manifest.tool_pairs if p.call_id == "w1")
    assert (pair.decision, pair.result_item_id) == ("included", "result-w1")


def test_the_transform_is_recorded_with_its_assertions_and_counted_in_its_elided_form():
    on = run(req(write("w1", 1, PLAN1), write("w2", 3, PLAN2)), policy(transforms=ON))
    off = run(req(write("w1", 1, PLAN1), write("w2", 3, PLAN2)), policy())
    (record,) = on.manifest.transforms
    assert (record.type, record.trigger, record.status) == ("elide_superseded", "superseded_write", "applied")
    assert record.input_item_ids == ["result-w1"] and record.output_item_id == "result-w1"
    assert record.preservation_assertions == {
        "call_paired": "passed", "same_keys": "passed", "identity_arguments_unchanged": "passed",
        "only_long_strings_elided": "passed", "marker_names_a_later_write": "passed",
    }
    assert "'w2'" in record.objective and MARKER_W2 in record.after_excerpt
    pair_on = next(p for p in on.manifest.tool_pairs if p.call_id == "w1")
    pair_off = next(p for p in off.manifest.tool_pairs if p.call_id == "w1")
    assert pair_on.tokens < pair_off.tokens
    assert pair_off.tokens - pair_on.tokens == record.token_estimate_before - record.token_estimate_after
    # The canonical argument hash identifies the call as received, not the elided form.
    assert pair_on.canonical_argument_hash == pair_off.canonical_argument_hash


def test_the_assertions_fail_on_a_wrong_rewrite():
    """Each assertion is computed: a marker naming an earlier call, a dropped key, a changed path."""
    from ctxeng.engine import parse_policy, parse_request

    asm = _assembly(parse_request(req(write("w1", 1, PLAN1), write("w2", 3, PLAN2))), parse_policy(policy(transforms=ON)))
    w2 = next(p for p in asm.pairs if p.call.call_id == "w2")
    original = w2.arguments_json
    wrong_marker = json.dumps({"content": "[elided by ctxeng: superseded by the write in call w1]", "path": "PLAN.md"}, separators=(",", ":"))
    assert check_elision(asm, w2, original, wrong_marker)["marker_names_a_later_write"] == "failed"
    assert check_elision(asm, w2, original, json.dumps({"content": MARKER_W2}))["same_keys"] == "failed"
    moved = json.dumps({"content": MARKER_W2, "path": "OTHER.md"}, separators=(",", ":"))
    assert check_elision(asm, w2, original, moved)["identity_arguments_unchanged"] == "failed"


def _assembly(request, pol):
    """The working set after structure and source limits, where the elision runs."""
    from ctxeng.engine import acquisition, gates, loading, ranking, source_limits, structure
    from ctxeng.engine.policy import policy_digest
    from ctxeng.engine.tokens import tokenizer_for
    from ctxeng.engine.working import Assembly

    asm = Assembly(request=request, policy=pol, policy_digest=policy_digest(pol), tokenizer=tokenizer_for("cl100k_base"),
                   nonce="", candidate_set_digest="")
    acquisition.inventory(asm)
    acquisition.measure(asm)
    gates.apply_hard_gates(asm)
    ranking.rank(asm)
    loading.assign_load_modes(asm)
    structure.place_in_zones(asm)
    structure.pair_tool_calls(asm)
    source_limits.apply_source_limits(asm)
    structure.resolve_unresolved(asm)
    return asm


def test_without_the_clause_nothing_changes():
    writes = (write("w1", 1, PLAN1), write("w2", 3, PLAN2))
    off = run(req(*writes), policy())
    assert sent_arguments(off)["w1"]["content"] == PLAN1
    assert off.manifest.transforms == []
    # The same request under the clause differs only where the elision is.
    on = run(req(*writes), policy(transforms=ON))
    assert on.manifest.assembly.serialized_model_input_hash != off.manifest.assembly.serialized_model_input_hash
    assert run(req(*writes), policy(transforms=ON)).serialized_input == on.serialized_input  # deterministic


def test_an_identity_argument_and_short_strings_are_kept_whole():
    long_path = "docs/" + "nested/" * 40 + "PLAN.md"  # longer than the threshold, but it names the object
    assert len(long_path) > MIN_CHARS
    w1 = write("w1", 1, PLAN1, path=long_path, mode="overwrite", command="create")
    w2 = write("w2", 3, PLAN2, path=long_path)
    args = sent_arguments(run(req(w1, w2), policy(transforms=ON)))["w1"]
    assert args == {"path": long_path, "content": MARKER_W2, "mode": "overwrite", "command": "create"}


def test_a_write_of_some_lines_does_not_supersede_a_write_of_other_lines():
    r1, c1 = write("w1", 1, PLAN1)
    r1["source_ref"]["lines"] = "100-140"
    r2, c2 = write("w2", 3, PLAN2)
    r2["source_ref"]["lines"] = "1-20"
    assert sent_arguments(run(req((r1, c1), (r2, c2)), policy(transforms=ON)))["w1"]["content"] == PLAN1


def test_a_later_edit_leaves_an_earlier_writes_arguments_whole():
    # An edit (a diff, a str_replace: no `replaces`) changes the object but leaves what the earlier
    # write put there in place: the earlier arguments are not obsolete, so they are sent whole.
    edit_result, edit_call = write("w2", 3, "@@ -1 +1 @@\n-" + PLAN1[:40] + "\n+" + PLAN2[:40] + "\n" * 200)
    edit_result["source_ref"].pop("replaces")
    r = run(req(write("w1", 1, PLAN1), (edit_result, edit_call)), policy(transforms=ON))
    assert sent_arguments(r)["w1"]["content"] == PLAN1
    assert r.manifest.transforms == []
