"""Duplicate YAML keys are refused naming both lines (PyYAML would keep the last one silently), and
an empty policy says so, through the engine's loader and the REST validate endpoint alike."""

from __future__ import annotations

import pytest

from ctxeng.engine import InvalidInput, parse_policy
from policies.services import policy_parse


@pytest.mark.parametrize(("text", "message"), [
    ("a: 1\nb:\n  c: 2\n  c: 3\n", "body: line 4: duplicate key 'c'; first at line 3"),
    ("a: 1\na: 1\n", "body: line 2: duplicate key 'a'; first at line 1"),
    ("a: {c: 2, c: 3}\n", "body: line 1: duplicate key 'c'; first at line 1"),
])
def test_a_duplicate_key_names_its_line_and_the_first_one(text, message):
    with pytest.raises(InvalidInput) as refused:
        parse_policy(text)
    assert refused.value.errors == [message]


def test_equal_keys_in_different_mappings_are_not_duplicates():
    with pytest.raises(InvalidInput) as refused:
        parse_policy("x:\n  c: 1\ny:\n  c: 2\n")
    assert not any("duplicate" in e for e in refused.value.errors)


@pytest.mark.parametrize("text", ["", "\n\n", "# a comment only\n", b""])
def test_an_empty_policy_says_so(text):
    with pytest.raises(InvalidInput) as refused:
        policy_parse(text)
    assert refused.value.errors == ["body: the policy is empty"]


def test_the_validate_endpoint_names_both_lines(editor_api, example_policy_text):
    first = next(i for i, line in enumerate(example_policy_text.splitlines(), 1) if line.startswith("scope:"))
    text = example_policy_text + "scope: {}\n"
    response = editor_api.post("/api/v1/policies/validate/", text, format="json")  # YAML text as a JSON string
    last = len(text.splitlines())
    assert response.status_code == 400, response.content
    assert f"line {last}: duplicate key 'scope'; first at line {first}" in response.json()["errors"][0]
