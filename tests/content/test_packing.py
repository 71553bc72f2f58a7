"""Packing is lossless and content-addressed (ctxeng.content.packing), checked without a database.

The oracle is the value itself: `unpack(pack(x))` must equal `x`, key order included (compared as
`json.dumps` text), and every blob must be stored under the sha256 of its own bytes.
"""

from __future__ import annotations

import hashlib
import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxeng.content.packing import (
    MARKERS,
    TEXT_MIN,
    Packer,
    UnpackError,
    pack_document,
    references,
    unpack,
)
from ctxeng.engine.source_limits import EXCERPT_GAP

FENCED = "<<<ctx untrusted status=partial>>>\n" + "body line\n" * 40 + "<<<ctx:end>>>"


def _round_trip(value, packer: Packer | None = None):
    skeleton, packer = pack_document(value, packer)
    return unpack(skeleton, lambda digests: {d: packer.blobs[d] for d in digests if d in packer.blobs}), skeleton, packer


def _text(value) -> str:
    return json.dumps(value, ensure_ascii=False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20) | st.text(min_size=TEXT_MIN, max_size=TEXT_MIN + 40)
    | st.sampled_from([FENCED, FENCED.replace("body", "\ud800b"), "x" * 600 + EXCERPT_GAP + "y" * 300]),
    lambda children: st.lists(children, max_size=6)
    | st.dictionaries(st.text(max_size=6) | st.sampled_from(sorted(MARKERS)), children, max_size=5),
    max_leaves=40,
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(json_values)
@example({"$t": "sha256:" + "0" * 64})  # the agent's own object that looks like a reference
@example({"$lit": {"$j": 1}})
@example([{"$cat": ["a", "b"]}] * 3)
@example({"candidates": [{"content": "z" * 300, "$pre": [1, 2]}]})
def test_unpack_gives_back_the_value_packed_key_order_included(value):
    back, _, packer = _round_trip(value)
    assert _text(back) == _text(value)
    for digest, data in packer.blobs.items():
        assert digest == "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_long_string_is_a_text_blob_keyed_by_the_sha256_of_its_utf8_bytes():
    content = "résumé " * 100
    skeleton, packer = pack_document({"candidates": [{"content": content}]})
    digest = "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()
    assert packer.blobs[digest] == content.encode("utf-8") and packer.kinds[digest] == "text"
    assert content not in skeleton


def test_the_same_records_pack_to_the_same_blobs_so_a_repeated_step_adds_only_its_skeleton():
    candidates = [{"item_id": f"doc-{n}", "kind": "document", "content": f"text {n} " * 60} for n in range(50)]
    first, a = pack_document({"step_id": "1", "candidates": candidates})
    second, b = pack_document({"step_id": "2", "candidates": [dict(c) for c in candidates]})
    assert set(a.blobs) == set(b.blobs)
    assert first != second and len(second) < 200


def test_a_fenced_block_shares_its_body_blob_with_the_submitted_content():
    body = "body line\n" * 39 + "body line"
    _, packer = pack_document({"messages": [{"role": "tool", "content": FENCED}]})
    assert "sha256:" + hashlib.sha256(body.encode()).hexdigest() in packer.blobs
    assert all("<<<ctx" not in data.decode() for data, kind in zip(packer.blobs.values(), packer.kinds.values(), strict=True)
               if kind == "text")


def test_an_excerpt_of_a_known_text_is_stored_as_slices_of_it():
    content = "".join(f"line {n}\n" for n in range(400))
    excerpt = content[:600] + EXCERPT_GAP + content[-600:]
    packer = Packer()
    packer.know([content])
    back, skeleton, packer = _round_trip({"transforms": [{"before_excerpt": excerpt, "prefix": content[:700]}]}, packer)
    assert back["transforms"][0]["before_excerpt"] == excerpt and back["transforms"][0]["prefix"] == content[:700]
    assert set(packer.kinds.values()) == {"text", "json"}
    texts = [data for data, kind in zip(packer.blobs.values(), packer.kinds.values(), strict=True) if kind == "text"]
    assert texts == [content.encode()]  # only the known text itself, no copy of the excerpt


def test_an_excerpt_that_is_not_a_slice_of_the_known_text_is_stored_as_itself():
    content = "".join(f"line {n}\n" for n in range(400))
    other = content[:600] + EXCERPT_GAP + "not the tail of the content " * 30
    packer = Packer()
    packer.know([content])
    back, _, packer = _round_trip({"t": [{"before_excerpt": other}]}, packer)
    assert back["t"][0]["before_excerpt"] == other
    assert other.encode() in packer.blobs.values()


def test_reading_names_the_missing_blob():
    skeleton, packer = pack_document({"candidates": [{"content": "c" * 400}]})
    missing = next(d for d, kind in packer.kinds.items() if kind == "text")
    try:
        unpack(skeleton, lambda digests: {d: packer.blobs[d] for d in digests if d != missing})
    except UnpackError as exc:
        assert missing in str(exc)
    else:
        raise AssertionError("a missing blob must not read as a value")


def test_references_name_every_blob_a_skeleton_reaches_directly():
    skeleton, packer = pack_document({"a": ["x" * 300], "b": {"c": "y" * 300}, "d": [{"k": "v" * 200, "n": 1}]})
    direct = {digest for _, digest in references(json.loads(skeleton))}
    assert direct and direct <= set(packer.blobs)
