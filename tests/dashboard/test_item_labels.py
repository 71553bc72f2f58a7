"""Items are shown with a human label beside their id: a tool result by its call (tool name and
arguments), a message by its first words, a file by its path and lines, a web page by its URL.
The expected labels are written by hand from the worked example's request."""

from __future__ import annotations

import html
import unicodedata

import pytest
from django.template import Context, Template

from manifests.examples import example_json
from manifests.item_labels import BIDI_CONTROLS, LABEL_CHARS, candidate_label, ref_label, request_labels

from .conftest import run_job

# From request.json: call-a is read_source(repo, path, lines) answered by result-call-a; call-c is
# run_tests(repo, suite); task-goal is a goal whose source_ref names only itself.
RESULT_A = 'read_source(repo="pi", path="packages/agent/README.md", lines="87-124") → result'
RESULT_C = 'run_tests(repo="pi", suite="compaction") → result'
GOAL = "goal: “Research question: how do pi, continue, context7, planning-with-files and…”"
FILE = "packages/agent/src/types.ts:149-200 @ pi"
URL = "https://context7.com/docs/agentic-tools/overview"


def test_a_tool_result_is_named_by_its_call_and_a_message_by_its_first_words():
    calls = {"c1": {"call_id": "c1", "tool_name": "search", "arguments": {"query": "retry policy", "limit": 5}}}
    assert candidate_label({"item_id": "r1", "kind": "tool_result", "call_id": "c1", "source_ref": {}, "content": "x"},
                           calls) == 'search(query="retry policy", limit=5) → result'
    message = {"item_id": "m7", "kind": "message", "source_ref": {"message_id": "m7"}, "turn": {"index": 3, "speaker": "user"},
               "content": "please  compare the two caching strategies we discussed yesterday and pick one for production"}
    assert candidate_label(message, {}) == "user: “please compare the two caching strategies we discussed yesterday and…”"


def test_a_file_or_page_keeps_its_ref_label_even_with_content():
    file = {"item_id": "f1", "kind": "evidence", "source_ref": {"path": "a/b.py", "lines": "3-9", "repo": "r"}, "content": "def f(): ..."}
    page = {"item_id": "w1", "kind": "official_document", "source_ref": {"url": "https://x.test/p"}, "content": "Docs say"}
    assert request_labels({"candidates": [file, page]}) == {"f1": "a/b.py:3-9 @ r", "w1": "https://x.test/p"}


def test_long_arguments_and_labels_are_clipped_on_one_line():
    calls = {"c": {"tool_name": "grep", "arguments": {"pattern": "x" * 100, "paths": ["a", "b"] * 30}}}
    label = candidate_label({"item_id": "r", "kind": "tool_result", "call_id": "c", "source_ref": {}, "content": ""}, calls)
    assert len(label) <= LABEL_CHARS and label.endswith("…")
    assert label.startswith('grep(pattern="' + "x" * 31 + '…", paths=["a","b","a"')
    multiline = {"item_id": "n", "kind": "note", "source_ref": {}, "content": "first\nsecond\tthird"}
    assert candidate_label(multiline, {}) == "note: “first second third”"


def test_a_candidate_whose_call_is_missing_or_content_purged_falls_back_to_its_ref():
    orphan = {"item_id": "r", "kind": "tool_result", "call_id": "gone", "source_ref": {"tool_name": "fetch"}, "content": "x"}
    purged = {"item_id": "g", "kind": "goal", "source_ref": {"object_id": "g"}, "content": None}
    assert request_labels({"candidates": [orphan, purged]}) == {"r": "fetch", "g": "goal"}


def test_the_label_is_escaped_in_the_page():
    labels = {"x": "<img src=x onerror=alert(1)>"}
    shown = Template("{% load dashboard %}{{ r|item_label:labels }}").render(Context({"r": {"item_id": "x"}, "labels": labels}))
    assert "<img" not in shown and html.unescape(shown) == labels["x"]


def test_the_inspector_names_files_and_pages_in_its_list_and_calls_and_words_in_the_items_content(owner_client, example):
    page = f"/assemblies/{example['ready'].id}/"
    for item_id, label in {"evidence-pi-transform-context": FILE, "web-context7-overview": URL}.items():
        listed = html.unescape(owner_client.get(page, {"q": item_id}).content.decode())
        assert f'<div class="item-label">{label}</div>' in listed, item_id
        selected = html.unescape(owner_client.get(page, {"item": item_id}).content.decode())
        assert f'<span class="item-label big-label">{label}</span>' in selected, item_id
    for item_id, label in {"result-call-a": RESULT_A, "result-call-c": RESULT_C, "task-goal": GOAL}.items():
        content = html.unescape(owner_client.get(f"{page}item/", {"item_id": item_id}).content.decode())
        assert f'<dd class="item-label submitted-label">{label}</dd>' in content, item_id


def test_the_matrix_why_and_compare_show_the_labels(owner_client, example):
    # the matrix shows the labels stored at seal (it reads no request: its queries are bounded)
    matrix = html.unescape(owner_client.get("/runs/run-42/matrix/", {"q": "result-call"}).content.decode())
    assert f'<div class="item-label">{RESULT_A}</div>' in matrix
    assert f'<div class="item-label">{RESULT_C}</div>' in matrix
    for group in ("", "none"):
        why = html.unescape(owner_client.get("/why/", {"q": "task-goal", "group": group}).content.decode())
        assert f'<div class="item-label">{GOAL}</div>' in why, group
    compare = html.unescape(owner_client.get("/compare/", {"a": example["ready"].id, "b": example["blocked"].id}).content.decode())
    # the blocked step leaves out the open items summary, whose source_ref names only itself
    assert '<span class="item-label">open items summary: “OI-1 verify where continue places the conversation summary OI-2…”' in compare


def test_another_tenants_request_lends_no_label(outsider_client, example):
    assert outsider_client.get("/why/", {"q": "task-goal"}).content.decode().count("Research question") == 0


# --------------------------------------------------------------------------- bidi controls (issue 51, N8)


def test_the_neutralised_controls_are_unicodes_whole_bidi_control_list():
    """Unicode's Bidi_Control property (PropList.txt), written out by hand, and every character
    whose bidi class is an explicit embedding, override or isolate: the tests below iterate over
    BIDI_CONTROLS, so a control missing from it would go unnoticed there."""
    expected = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}
    assert set(BIDI_CONTROLS) == expected
    explicit = {chr(cp) for cp in range(0x110000) if not 0xD800 <= cp < 0xE000
                and unicodedata.bidirectional(chr(cp)) in {"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"}}
    assert explicit <= expected


@pytest.mark.parametrize("control", list(BIDI_CONTROLS))
def test_a_bidi_control_anywhere_a_label_quotes_is_shown_as_a_replacement_character(control):
    calls = {"c": {"tool_name": f"fetch{control}", "arguments": {f"k{control}": f"evil{control}gnp.exe", "n": [control]}}}
    result = {"item_id": "r", "kind": "tool_result", "call_id": "c", "source_ref": {}, "content": "x"}
    message = {"item_id": "m", "kind": "message", "turn": {"speaker": f"user{control}"}, "content": f"hi {control}there"}
    file = {"item_id": "f", "kind": "evidence", "source_ref": {"path": f"a{control}b.py", "repo": f"r{control}"}, "content": "x"}
    labels = request_labels({"candidates": [result, message, file], "tool_calls": [{"call_id": "c", **calls["c"]}]})
    assert labels == {"r": 'fetch�(k�="evil�gnp.exe", n=["�"]) → result', "m": "user�: “hi �there”", "f": "a�b.py @ r�"}


def test_a_right_to_left_override_in_a_tool_argument_does_not_reach_the_inspector(owner_client, example):
    request = example_json("request.json")
    request["run_id"] = "run-bidi"
    request["tool_calls"][0]["arguments"]["path"] = "notes\u202etxt.exe"
    job = run_job(example["owner"], request, "bidi")
    content = owner_client.get(f"/assemblies/{job.id}/item/", {"item_id": "result-call-a"}).content.decode()
    label = html.unescape(content.split('<dd class="item-label submitted-label">', 1)[1].split("</dd>", 1)[0])
    assert label == 'read_source(repo="pi", path="notes�txt.exe", lines="87-124") → result'
    assert not any(control in content for control in BIDI_CONTROLS)


@pytest.mark.parametrize(("source_ref", "label"), [
    ({"tool_name": "read_file", "path": "src/app.py", "lines": "3-9"}, "read_file(src/app.py:3-9)"),
    ({"tool_name": "grep", "object": "pattern=retry"}, "grep(pattern=retry)"),
    ({"tool_name": "fetch", "url": "https://x.test/p", "call_id": "c9"}, "fetch(https://x.test/p) · call c9"),
    ({"tool_name": "bash", "objects": [{"access": "read", "path": "a.txt"}, {"path": "b.txt"}]}, "bash(a.txt)"),
    ({"tool_name": "search", "query": "retry policy"}, 'search(retry policy)'),
    ({"tool_name": "ls", "call_id": "c1"}, "ls · call c1"),
    ({"tool_name": "ls"}, "ls"),
])
def test_a_tool_label_names_its_declared_object_never_empty_parentheses(source_ref, label):
    assert ref_label(item_id="r", kind="tool_result", source_ref=source_ref) == label
    assert "()" not in label


def test_a_call_without_arguments_is_named_by_its_items_object():
    calls = {"c": {"call_id": "c", "tool_name": "read_file", "arguments": {}}}
    with_object = {"item_id": "r", "kind": "tool_result", "call_id": "c", "source_ref": {"path": "README.md"}, "content": "x"}
    bare = {"item_id": "s", "kind": "tool_result", "call_id": "c", "source_ref": {}, "content": "x"}
    assert request_labels({"candidates": [with_object, bare], "tool_calls": list(calls.values())}) == {
        "r": "read_file(README.md) → result", "s": "read_file → result"}
