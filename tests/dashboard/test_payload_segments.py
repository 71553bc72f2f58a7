"""The payload view splits each message into plain text and fenced item blocks in linear time.

A native turn and a control item reach the payload unescaped, so a message can hold any number of
fence-like openers without ends; a reader that searched the rest of the text from each of them
took 74 s of a dashboard process on 30 KB. The oracle here is a regular expression of the fence
written from docs/sdk.md ("What the model sees"), run on small texts; a megabyte of each hostile
shape is split under a hang guard.
"""

from __future__ import annotations

import random
import re

import pytest

from manifests.dashboard_selectors import _segments, input_messages
from tests.engine.test_linear_time import finishes

FENCE = re.compile(r"<<<ctx ([^\n<>]*)>>>\n(.*?)\n<<<ctx:end>>>", re.DOTALL)
ZONE = {"task": "task", "state": "state", "derived": "derived_context", "untrusted": "untrusted_data"}


def regex_segments(text: str) -> list[tuple[str, str | None]]:
    """(text, the first header word or None) of each segment, by the fence's regular expression."""
    out: list[tuple[str, str | None]] = []
    cursor = 0
    for m in FENCE.finditer(text):
        if text[cursor:m.start()].strip():
            out.append((text[cursor:m.start()], None))
        out.append((m.group(2), m.group(1).split(" ")[0]))
        cursor = m.end()
    if text[cursor:].strip():
        out.append((text[cursor:], None))
    return out


def _block(words: str, body: str) -> str:
    return f"<<<ctx {words}>>>\n{body}\n<<<ctx:end>>>"


PIECES = ["<<<ctx ", "a note task", "untrusted", ">>>", ">>>\n", "\n", "body text", " ", "\n<<<ctx:end>>>", "<<<ctx:end>>>",
          "<<<ctx", "x", "<", "\n\n", "<<<ctx-escaped:end>>>"]


def _generated(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 14)))


def test_generated_texts_split_as_the_fence_pattern_reads_them():
    rng = random.Random(11)
    for _ in range(3000):
        text = _generated(rng)
        got = [(s["text"], (s["block"] or {}).get("cite") or (s["block"] or {}).get("trust")) for s in _segments(text)]
        assert got == regex_segments(text), text


def test_a_block_s_parts_are_its_header_body_and_zone():
    text = "intro\n\n" + _block("web-1 web_page untrusted https://example.org/a", "line 1\nline 2") + "\n\nafter"
    segments = _segments(text, {"web-1": "web-1"}, hashes={"web-1": "sha256:ab"})
    assert [s["text"] for s in segments] == ["intro\n\n", "line 1\nline 2", "\n\nafter"]
    block = segments[1]["block"]
    assert (block["item_id"], block["kind"], block["source"], block["zone"], block["content_hash"]) == (
        "web-1", "web_page", "https://example.org/a", "untrusted_data", "sha256:ab")
    assert segments[1]["untrusted"] is True and segments[0]["untrusted"] is False
    assert _segments(_block("a note task", ""))[0]["text"] == ""  # an empty body is a body
    assert [s["block"] for s in _segments(_block("a note task", "x").replace("<<<ctx:end>>>", "<<<ctx-escaped:end>>>"))] == [None]


def test_blocks_are_named_by_the_manifest_a_cite_id_or_a_tool_call_names():
    payload = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": _block("c123456789 code untrusted pi@53fa77c:a.py", "x")}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                               "function": {"name": "grep", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": _block("untrusted status=error", "no match")},
    ]}
    manifest = {"included": [{"item_id": "code-0123456789abcdef", "content_hash": "sha256:c"},
                             {"item_id": "result-a", "content_hash": "sha256:r"}],
                "tool_pairs": [{"serialized_call_id": "call_1", "result_item_id": "result-a"}]}
    import hashlib

    cite = "c" + f"{int(hashlib.sha256(b'code-0123456789abcdef').hexdigest(), 16) % 10**9:09d}"
    payload["messages"][0]["content"][0]["text"] = _block(f"{cite} code untrusted pi@53fa77c:a.py", "x")
    messages = input_messages(payload, manifest)
    blocks = [s["block"] for m in messages for s in m["segments"] if s["block"]]
    assert [(b["item_id"], b["content_hash"], b["status"]) for b in blocks] == [
        ("code-0123456789abcdef", "sha256:c", "success"), ("result-a", "sha256:r", "error")]


HOSTILE = {
    "openers without ends": "<<<ctx a note task>>>\n" * 40_000,
    "openers on one line": "<<<ctx a note task" * 50_000 + ">>>\n",
    "bare openers": "<<<ctx " * 140_000 + "\n",
    "ends without openers": "\n<<<ctx:end>>>" * 70_000,
    "closed blocks": _block("a note task", "x") * 25_000,
}


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_a_megabyte_of_any_shape_splits_in_linear_time(shape):
    text = HOSTILE[shape]
    assert len(text) > 800_000
    with finishes():
        segments = _segments(text)
    assert "".join(s["text"] for s in segments if s["block"] is None) in text
    if shape == "closed blocks":
        assert sum(1 for s in segments if s["block"] is not None) == 25_000
