"""Invalid input explained by field path (errors.py): the messages a person reads at every boundary.

The REST edge, the CLI and the policy editor all show these lines, so each case writes the exact
line by hand: the path a person would type to find the field, then what is wrong with it.
"""

from __future__ import annotations

import pytest

from ctxeng.engine.errors import (
    InvalidInput,
    _path,
    json_nesting,
    load_json_text,
    load_yaml_text,
    loads_bounded,
    validate,
)
from ctxeng.engine.models import AssemblyRequest

from .builders import item, request


def refused(raw, **kw) -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        loads_bounded(raw, **kw)
    return exc.value.errors


def test_a_field_path_reads_as_it_would_be_typed():
    assert _path(("candidates", 3, "item_id")) == "candidates[3].item_id"
    assert _path((0, "a", 1, 2)) == "[0].a[1][2]"
    assert _path(()) == ""


def test_a_body_that_is_not_an_object_is_refused_naming_its_type():
    with pytest.raises(InvalidInput) as exc:
        validate(AssemblyRequest, [1], what="request")
    assert exc.value.errors == ["body: expected a JSON object, got list"]
    assert str(exc.value) == "invalid request: body: expected a JSON object, got list"


def test_a_missing_and_an_unknown_field_are_named_by_path():
    cand = item("a")
    del cand["item_id"]
    cand["colour"] = "red"
    with pytest.raises(InvalidInput) as exc:
        validate(AssemblyRequest, request([cand]), what="request")
    assert "candidates[0].item_id: field required" in exc.value.errors
    assert "candidates[0].colour: unknown field" in exc.value.errors


def test_json_nested_up_to_the_limit_is_read_and_one_level_more_is_refused():
    assert loads_bounded("[" * 64 + "]" * 64) is not None
    assert refused("[" * 65 + "]" * 65) == ["body: nested 65 levels deep, more than the limit 64"]
    # Brackets inside strings, escaped quotes included, are not nesting.
    inside = '["' + '\\"' + "[" * 100 + '"]'
    assert loads_bounded(inside) == ['"' + "[" * 100]


def test_the_nesting_measure_counts_the_deepest_bracket_not_every_bracket():
    assert json_nesting(b"[" * 70 + b"]" * 70) == 70
    assert json_nesting(b"[[]]" * 40) == 2  # 80 brackets opened, never more than 2 deep
    assert json_nesting(b'["[[[' + b"[" * 70 + b'"]') == 1
    assert json_nesting(b"[[1],[2]]") <= 64


@pytest.mark.parametrize(
    "raw, message",
    [
        ('{"a": {"b": [1, 9007199254740992]}}', "a.b[1]: 9007199254740992 is outside ±9007199254740991 (integers must be exact in JSON)"),
        ('{"a": -9007199254740992}', "a: -9007199254740992 is outside ±9007199254740991 (integers must be exact in JSON)"),
        ('{"x": NaN}', "x: NaN is not a JSON number (numbers must be finite)"),
        ('[Infinity]', "[0]: Infinity is not a JSON number (numbers must be finite)"),
        ('{"f": 1e400}', "f: 1e400 overflows a floating-point number (numbers must be finite)"),
        ('{"n": ' + "1" * 30 + "}", "n: 111111111111... (30 characters) is outside ±9007199254740991 (integers must be exact in JSON)"),
        ('{"s": "a\\u0000b"}', "s: contains a NUL character (\\u0000)"),
        ('{"k\\u0000": 1}', "k\x00: contains a NUL character (\\u0000)"),
        ('"\\u0000"', "body: contains a NUL character (\\u0000)"),
    ],
)
def test_a_value_json_cannot_carry_exactly_is_refused_by_path(raw, message):
    assert refused(raw) == [message]


def test_the_largest_exact_integers_are_read():
    assert loads_bounded('{"a": [9007199254740991, -9007199254740991, 1.5]}') == {"a": [9007199254740991, -9007199254740991, 1.5]}


def test_malformed_json_is_refused_as_such():
    (msg,) = refused('{"a": ', what="policy")
    assert msg.startswith("body: malformed JSON (")


@pytest.mark.parametrize("text", ['{"a": ', b"[" * 65 + b"]" * 65])
def test_a_json_text_it_cannot_read_is_refused_naming_what_was_read(text):
    with pytest.raises(InvalidInput) as exc:
        load_json_text(text, what="artifact")
    assert exc.value.what == "artifact"
    assert str(exc.value).startswith("invalid artifact: body: ")


def test_yaml_reads_only_true_and_false_as_booleans():
    assert load_yaml_text("on: yes\nb: no\nc: true\nd: False", what="policy") == {"on": "yes", "b": "no", "c": True, "d": False}


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: &x 1\nb: *x", "body: line 1: YAML anchors are not accepted (&x); write the value out"),
        ("a: 1\nb: *x", "body: line 2: YAML aliases are not accepted (*x); write the value out"),
        ("a: 1\nb: 2\na: 3", "body: line 3: duplicate key 'a'; first at line 1"),
        ("[" * 65 + "]" * 65, "body: line 1: nested deeper than 64 levels"),
    ],
)
def test_yaml_anchors_duplicate_keys_and_deep_nesting_are_refused_naming_the_line(text, message):
    with pytest.raises(InvalidInput) as exc:
        load_yaml_text(text, what="policy")
    assert exc.value.errors == [message]


def test_yaml_nested_up_to_the_limit_is_read():
    assert load_yaml_text("[" * 64 + "]" * 64, what="policy") is not None


def test_malformed_yaml_is_refused_as_such():
    with pytest.raises(InvalidInput) as exc:
        load_yaml_text("a: [1, 2", what="policy")
    assert exc.value.errors[0].startswith("body: malformed YAML (")
