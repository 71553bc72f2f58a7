"""Every payload message traced to its items (issue 52): the system text to its control items, a
user or assistant turn to the item whose text it is, a tool call and its result to the pair's
result item, each fenced block to its cite id's item; the inspector names the item's message.
Oracles: the worked example's expected.json (`system_role_only_from`, `tool_pairs`) and
hand-written payloads and records."""

from __future__ import annotations

import html
import re

from ctxeng.engine.hashing import sha256_text
from ctxeng.engine.render import EMPTY_USER, cite_id
from manifests.dashboard_selectors import input_messages
from manifests.examples import example_json

from .long_run import CORRECTION, corrected_step


def _heads(body: str) -> list[tuple[str, str, list[str]]]:
    """(message number, role, item ids linked) of each message head on the page."""
    heads = re.findall(r'<li class="message-head role-([a-z]+)" id="message-(\d+)">(.*?)</li>', body, re.S)
    return [(number, role, re.findall(r'class="message-item" href="[^"]*\?item=([^"]+)"', head)) for role, number, head in heads]


def test_every_message_of_the_worked_examples_payload_links_to_its_items(owner_client, example):
    expected = example_json("expected.json")
    body = owner_client.get(f"/assemblies/{example['ready'].id}/input/").content.decode()
    heads = _heads(body)
    assert heads and all(items for _, _, items in heads), heads
    assert heads[0][:2] == ("1", "system") and heads[0][2] == expected["system_role_only_from"]
    linked = {item for _, _, items in heads for item in items}
    assert set(expected["tool_pairs"].values()) <= linked
    tool_messages = [items for _, role, items in heads if role == "tool"]
    assert sorted(item for items in tool_messages for item in items) == sorted(expected["tool_pairs"].values())
    # the assistant message carrying the calls names each call's result item
    calls = [items for _, role, items in heads if role == "assistant"]
    assert calls and sorted(calls[0]) == sorted(expected["tool_pairs"].values())


def test_each_fenced_blocks_cite_id_is_shown_with_its_item(owner_client, example):
    body = owner_client.get(f"/assemblies/{example['ready'].id}/input/").content.decode()
    pairs = re.findall(r'<code class="cite">([^<]+)</code> → <a href="[^"]*\?item=([^"]+)"><code>([^<]+)</code>', body)
    assert pairs
    for cite, linked, shown in pairs:
        assert linked == shown
        assert cite == html.unescape(cite_id(html.unescape(linked)))  # the engine's own cite id of the item


def test_a_user_turn_links_to_the_item_whose_words_it_is(owner_client, example):
    job = corrected_step(example)
    body = owner_client.get(f"/assemblies/{job.id}/input/").content.decode()
    turn = next((items for _, role, items in _heads(body) if role == "user" and items == ["user-correction"]), None)
    assert turn == ["user-correction"]
    assert "user turn" in body and CORRECTION in body.replace("&#x27;", "'")
    place = owner_client.get(f"/assemblies/{job.id}/item/", {"item_id": "user-correction", "part": "payload"},
                             HTTP_HX_REQUEST="true").content.decode()
    number = next(n for n, role, items in _heads(body) if items == ["user-correction"])
    assert re.search(rf'message {number} \(<span class="badge role">user</span>\) as user turn', place)


def _record(item_id: str, **fields) -> dict:
    return {"item_id": item_id, "zone": "task", "intended_role": "task_intent", "content_hash": "", **fields}


def test_message_items_follow_the_layout_rules_written_by_hand():
    first, second = "I will read the README.", "Then the sources."
    manifest = {
        "included": [
            _record("sys", zone="control", intended_role="control"),
            _record("u1", turn={"index": 1, "speaker": "user"}, content_hash=sha256_text("Which file pairs calls?")),
            # two assistant items of one turn are joined into one text: no hash matches it
            _record("a2", intended_role="derived_context", turn={"index": 2, "speaker": "assistant"}, content_hash=sha256_text(first)),
            _record("a2b", intended_role="derived_context", turn={"index": 2, "speaker": "assistant"}, content_hash=sha256_text(second)),
            _record("ra", zone="untrusted_data"),
        ],
        "tool_pairs": [{"serialized_call_id": "call-a", "result_item_id": "ra", "tool_name": "read_file"}],
    }
    payload = {"messages": [
        {"role": "system", "content": "control text\n\nnotice"},
        {"role": "user", "content": EMPTY_USER},
        {"role": "user", "content": "Which file pairs calls?"},
        {"role": "assistant", "content": f"{first}\n{second}",
         "tool_calls": [{"id": "call-a", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call-a", "content": "<<<ctx untrusted>>>\nREADME\n<<<ctx:end>>>"},
    ]}
    messages = input_messages(payload, manifest)
    assert [[(i["item_id"], i["as"]) for i in m["items"]] for m in messages] == [
        [("sys", "control text")],
        [],
        [("u1", "user turn")],
        [("ra", "call read_file"), ("a2", "assistant turn"), ("a2b", "assistant turn")],
        [("ra", "tool result")],
    ]
    assert messages[0]["framing"] == "ctxeng's data-boundary notice"
    assert "placeholder" in messages[1]["framing"]


def test_an_unmatched_turn_falls_back_to_its_speakers_turns_in_order_else_to_nothing():
    messages = input_messages({"messages": [{"role": "user", "content": "words of no item"}]},
                              {"included": [_record("u9", turn={"index": 1, "speaker": "user"}, content_hash=sha256_text("other"))]})
    # the only user turn of the manifest is the one not matched by its hash: it is matched by order
    assert [i["item_id"] for i in messages[0]["items"]] == ["u9"]
    assert input_messages({"messages": [{"role": "user", "content": "words"}]}, {"included": [_record("x")]})[0]["items"] == []
