"""The per-content memos (issue 48, `ctxeng.engine.memo`) give what a fresh computation gives: a
kept canonical JSON text, digest, sha256 prefix state or secret answer equals the one made at once,
for every JSON value (hypothesis), also right after a value Python calls equal but JSON does not
(`1`, `True`, `1.0`); a fact outside the value (a path) is part of the key; kept values cannot be
changed through what a caller was handed; the memos stay bounded. The oracles are the plain
functions (`canonical_json`, `sha256_text` over the whole text), never the memo's own output."""

from __future__ import annotations

import enum
import hashlib
import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxeng.engine import memo
from ctxeng.engine.gates import _ref_secrets
from ctxeng.engine.hashing import (
    canonical_json,
    canonical_json_composed,
    canonical_json_kept,
    sha256_chain,
    sha256_json,
    sha256_json_kept,
    sha256_text,
    sha256_text_kept,
)
from ctxeng.engine.secrets import find_in_json, find_in_json_text, find_secrets

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, -0.0, 1.0, 2.5, 1e300]),
    st.text(alphabet="ab<>\"\\\u00e9\u2028\n", max_size=4),
)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
                    max_leaves=12)
# Values Python calls equal (and hashes alike) that are different JSON texts.
LOOKALIKES = [1, True, 1.0, 0, False, 0.0, -0.0, [1], [True], {"a": 1}, {"a": True}, {"a": 1.0}, {"a": [0]}, {"a": [False]}]


@pytest.fixture(autouse=True)
def _empty_memos():
    memo.clear_all()


@settings(max_examples=200, derandomize=True, deadline=None)
@given(values=st.lists(JSON, min_size=1, max_size=6))
@example(values=LOOKALIKES)
@example(values=list(reversed(LOOKALIKES)))
def test_a_kept_text_or_digest_is_the_one_made_at_once_whatever_came_before(values):
    for value in values + values:  # the second round from the memos
        assert canonical_json_kept(value) == canonical_json(value)
        assert sha256_json_kept(value) == sha256_json(value)
        for levels in range(4):
            assert canonical_json_composed(value, levels) == canonical_json(value)


def test_values_python_calls_equal_have_their_own_keys():
    keys = [memo.freeze(v) for v in LOOKALIKES]
    for i, a in enumerate(keys):
        for j, b in enumerate(keys):
            assert (a == b) == (i == j), (LOOKALIKES[i], LOOKALIKES[j])


class Colour(enum.StrEnum):
    RED = "red"


@pytest.mark.parametrize("value", [Colour.RED, ("a", 1), {1: "a"}, {"a": ("b",)}, [object()]])
def test_what_is_not_plain_json_is_refused_a_key_and_computed_without_the_memo(value):
    with pytest.raises(memo.Unfreezable):
        memo.freeze(value)
    if not isinstance(value, list):  # json.dumps serializes these; the kept text is still its text
        assert canonical_json_kept(value) == canonical_json(value)


@settings(max_examples=100, derandomize=True, deadline=None)
@given(texts=st.lists(st.text(alphabet="ab,\n\u00e9", max_size=5), max_size=6), more=st.lists(st.text(alphabet="ab", max_size=3), max_size=3),
       start=st.sampled_from(["", "{", '{"m":[']), separator=st.sampled_from(["", ","]), terminator=st.sampled_from(["", "\n"]))
def test_each_chained_digest_is_the_digest_of_its_whole_prefix(texts, more, start, separator, terminator):
    def expected(items):
        return [sha256_text(start + separator.join(t + terminator for t in items[: n + 1])) for n in range(len(items))]

    for items in (texts, texts + more, texts):  # a history that grew, then the shorter one again
        digests, running = sha256_chain(items, start=start, separator=separator, terminator=terminator)
        assert digests == expected(items)
        running.update(b"]")
        assert running.hexdigest() == hashlib.sha256((start + separator.join(t + terminator for t in items) + "]").encode()).hexdigest()


def test_the_same_texts_under_another_separator_or_terminator_are_another_chain():
    texts = ["a", "b", "c"]
    for separator, terminator in [(",", ""), ("", ""), ("", "\n"), (",", "\n")]:
        digests, _ = sha256_chain(texts, start="[", separator=separator, terminator=terminator)
        assert digests[-1] == sha256_text("[" + separator.join(t + terminator for t in texts))


def test_a_text_digest_is_kept_by_the_text():
    for text in ["a", "a", "b", "\u00e9" * 3]:
        assert sha256_text_kept(text) == sha256_text(text)


KEY = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2  # a GitHub token's shape


def test_the_findings_in_a_json_value_are_those_of_that_value_at_the_path_asked_for():
    value = {"headers": {"Authorization": f"token {KEY}"}}
    first = find_in_json(value, "tool_calls[0].arguments")
    second = find_in_json(value, "tool_calls[7].arguments")  # the same arguments, another call
    assert [where for where, _, _ in first] == ["tool_calls[0].arguments.headers.Authorization"]
    assert [where for where, _, _ in second] == ["tool_calls[7].arguments.headers.Authorization"]
    ref = {"url": f"https://x:{KEY}@example.org/"}
    assert [where for where, _, _ in _ref_secrets(ref)] == ["source_ref.url"]
    assert [where for where, _, _ in _ref_secrets(ref, "input[2].source_ref")] == ["input[2].source_ref.url"]
    # Another value under the same path is its own answer.
    assert find_in_json({"headers": {"Authorization": "token none"}}, "tool_calls[0].arguments") == []
    assert _ref_secrets({"url": "https://example.org/"}) == []


@pytest.mark.parametrize("asks", [
    # (path, JSON text) pairs asked in turn: a credential that comes and goes at one path, a value
    # whose type alone changes, and two pairs whose path and text run together into the same string.
    [("tool_calls[0].arguments", '{"path":"a"}'), ("tool_calls[0].arguments", f'{{"path":"a","token":"{KEY}"}}'),
     ("tool_calls[0].arguments", '{"path":"a","token":1}'), ("tool_calls[0].arguments", '{"path":"a","token":true}'),
     ("tool_calls[0].arguments", f'{{"path":"a","token":"{KEY}"}}'), ("tool_calls[3].arguments", f'{{"path":"a","token":"{KEY}"}}')],
    [("a", f' "{KEY}"'), ("a ", f'"{KEY}"'), ("a", f' "{KEY}"')],
])
def test_the_findings_in_a_json_text_are_those_of_the_value_it_parses_to_at_the_path_asked_for(asks):
    for path, text in asks:
        with memo.off():
            oracle = find_in_json(json.loads(text), path)
        assert find_in_json_text(text, path) == oracle


def test_what_a_caller_was_handed_cannot_change_the_next_answer():
    text = f"token: {KEY}"
    found = find_secrets(text)
    assert found
    found.clear()
    assert find_secrets(text)
    value = {"token": KEY}
    in_json = find_in_json(value, "a")
    in_json[0][2].clear()
    in_json.clear()
    assert find_in_json(value, "a")[0][2]
    in_text = find_in_json_text(json.dumps(value), "a")
    in_text[0][2].clear()
    in_text.clear()
    assert find_in_json_text(json.dumps(value), "a")[0][2]
    refs = _ref_secrets({"u": f"https://x:{KEY}@example.org/"})
    refs[0][2].clear()
    assert _ref_secrets({"u": f"https://x:{KEY}@example.org/"})[0][2]


def test_a_memo_keeps_its_newest_entries_within_its_bounds():
    kept: memo.Memo[str] = memo.Memo(3, max_chars=10)
    for n in range(5):
        kept.put(n, "x")
    assert len(kept) == 3 and kept.get(0) is None and kept.get(4) == "x"
    kept.get(2)  # used: the least recently used is now 3
    kept.put(5, "x")
    assert kept.get(3) is None and kept.get(2) == "x"
    kept.put("long key", "abcdef")  # 14 characters: everything older goes, the newest entry stays
    assert len(kept) == 1 and kept.get("long key") == "abcdef"


def test_off_computes_as_without_memos_and_gives_the_kept_entries_back():
    canonical_json_kept({"kept": 1})
    assert any(memo.freeze({"kept": 1}) in m._entries for m in memo._ALL)
    with memo.off():
        assert all(len(m) == 0 for m in memo._ALL)
        assert canonical_json_kept({"inside": 1}) == canonical_json_kept({"inside": 1}) == '{"inside":1}'
        assert all(len(m) == 0 for m in memo._ALL)  # nothing kept
    assert any(memo.freeze({"kept": 1}) in m._entries for m in memo._ALL)
    assert not any(memo.freeze({"inside": 1}) in m._entries for m in memo._ALL)


def _nesting(value) -> int:
    """The oracle: a JSON value's nesting, recursively (a scalar 0, `{}` and `[]` 1)."""
    if isinstance(value, dict):
        return 1 + max((_nesting(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_nesting(v) for v in value), default=0)
    return 0


@settings(max_examples=200, derandomize=True, deadline=None)
@given(value=JSON)
@example(value={"a": 1, "b": "x"})
@example(value={"a": 1, "b": [{}]})
def test_json_depth_answers_a_flat_object_at_once_and_any_other_value_by_its_nesting(value):
    # Not a memo: the fast path for the flat source refs every step validates twice per item.
    from ctxeng.engine.limits import json_depth

    assert json_depth(value) == _nesting(value)
