"""The payload view splits each message into plain text and fenced item blocks in linear time.

A control item's text reaches the system message unescaped, so a message can hold any number of
block openers without ends; the regular expression this reader replaces searched the rest of the
text from each of them (74 s of a dashboard process on 30 KB). The reader gives the old answers
on what the engine renders and on generated texts, and a megabyte of each hostile shape is split
in milliseconds (a hang guard fails the test instead of letting it run for hours).
"""

from __future__ import annotations

import random
import re

import pytest

from manifests.dashboard_selectors import UNTRUSTED_ZONES, _segments
from tests.engine.test_linear_time import finishes

OLD_FENCE = re.compile(r"<<<ctxeng:block nonce=\S+ (\{.*?\})>>>\n(.*?)\n<<<ctxeng:end nonce=\S+>>>", re.DOTALL)


def old_segments(text: str) -> list[dict]:
    """The reader before this change, as it was (manifests/dashboard_selectors.py)."""
    import json

    out: list[dict] = []
    cursor = 0
    for match in OLD_FENCE.finditer(text):
        if text[cursor:match.start()].strip():
            out.append({"text": text[cursor:match.start()], "block": None, "untrusted": False})
        try:
            header = json.loads(match.group(1))
        except ValueError:
            header = {}
        zone = header.get("zone") or header.get("role") or ""
        out.append({"text": match.group(2), "block": header, "zone": zone, "untrusted": zone in UNTRUSTED_ZONES})
        cursor = match.end()
    if text[cursor:].strip():
        out.append({"text": text[cursor:], "block": None, "untrusted": False})
    return out


def _message_texts(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _message_texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _message_texts(v)]
    return []


def test_what_the_engine_renders_splits_as_before(example):
    from manifests.selectors import manifest_payload

    texts = [t for key in ("ready", "hostile") for t in _message_texts(manifest_payload(example[key].manifest))]
    blocks = 0
    for text in texts:
        assert _segments(text) == old_segments(text)
        blocks += sum(1 for s in _segments(text) if s["block"] is not None)
    assert blocks >= 10


PIECES = [
    "<<<ctxeng:block nonce=123456 ", '{"item_id": "a", "zone": "untrusted_data"}', "{}", '{"zone": "state"}', ">>>",
    "}>>>", ">>>\n", "\n", "body text", " ", "\n<<<ctxeng:end nonce=123456>>>", "<<<ctxeng:end nonce=123456>>>",
    "<<<ctxeng:block nonce=", "x", "{", "\n\n",
]


def _generated(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40)))


def _block(nonce: str, header: str, body: str) -> str:
    return f"<<<ctxeng:block nonce={nonce} {header}>>>\n{body}\n<<<ctxeng:end nonce={nonce}>>>"


def test_generated_texts_split_as_before():
    """Blocks as the engine renders them (a newline after each end marker), among text that
    imitates no fence (the engine escapes every item's content): the same segments as the old
    reader. (Where non-blank text follows an end marker at once, the old `nonce=\\S+>>>` ran on
    into it and swallowed up to its last `>>>`; the nonce is digits, so the new reader stops.)"""
    rng = random.Random(20261201)
    plain = [p for p in PIECES if "<<<ctxeng" not in p]
    seen_blocks = 0
    for _ in range(2000):
        parts = []
        for _ in range(rng.randint(1, 6)):
            junk = "".join(rng.choice(plain) for _ in range(rng.randint(0, 12)))
            header = rng.choice(['{"zone": "state"}', '{"zone": "untrusted_data", "n": 1}', "{}", '{"role": "tool"}'])
            parts.append(_block("123456789012345678", header, junk) if rng.random() < 0.6 else junk)
        text = rng.choice(["\n\n", "\n"]).join(parts)
        new = _segments(text)
        assert new == old_segments(text), text
        seen_blocks += sum(1 for s in new if s["block"] is not None)
    assert seen_blocks > 3000


def test_any_text_splits_into_its_own_parts_and_only_whole_blocks():
    """Fence-like text anywhere (a control item's text is not escaped): every segment is a piece of
    the text, and a block's body is only ever one between a header line and an end marker."""
    rng = random.Random(7)
    for _ in range(3000):
        text = _generated(rng)
        for segment in _segments(text):
            assert segment["text"] in text
            if segment["block"] is not None:
                assert re.search(rf">>>\n{re.escape(segment['text'])}\n<<<ctxeng:end nonce=\d+>>>", text), (text, segment)


def test_a_block_s_parts_are_its_header_body_and_zone():
    text = "intro\n\n" + _block("42", '{"item_id": "w", "zone": "untrusted_data"}', "line 1\nline 2") + "\n\nafter"
    segments = _segments(text)
    assert [s["text"] for s in segments] == ["intro\n\n", "line 1\nline 2", "\n\nafter"]
    assert segments[1]["block"] == {"item_id": "w", "zone": "untrusted_data"} and segments[1]["untrusted"] is True
    # An end with another nonce does not close a block; an empty body is a body.
    assert [s["block"] for s in _segments(_block("1", "{}", "x").replace("end nonce=1", "end nonce=2"))] == [None]
    assert _segments(_block("7", "{}", ""))[0]["text"] == ""


HOSTILE = {
    "openers without ends": "<<<ctxeng:block nonce=1 {}>>>\n" * 40_000,
    "openers on one line": "<<<ctxeng:block nonce=1 {" * 40_000 + "}>>>\n",
    "bare openers": "<<<ctxeng:block nonce=" * 45_000 + "\n",
    "a new nonce each": "".join(f"<<<ctxeng:block nonce={n} {{}}>>>\n" for n in range(40_000)),
    "ends of another nonce": "<<<ctxeng:block nonce=1 {}>>>\nx\n<<<ctxeng:end nonce=2>>>\n" * 20_000,
    "closed blocks": _block("9", "{}", "x") * 20_000,
}


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_a_megabyte_of_any_shape_splits_in_linear_time(shape):
    text = HOSTILE[shape]
    assert len(text) > 800_000
    with finishes():
        segments = _segments(text)
    assert "".join(s["text"] for s in segments if s["block"] is None) in text
    if shape == "closed blocks":
        assert sum(1 for s in segments if s["block"] is not None) == 20_000
