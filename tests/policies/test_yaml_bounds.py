"""Bounded policy parsing: YAML anchors and aliases are refused (never expanded), nesting is bounded,
the parsed body must fit the request limit, and validating a policy needs the policy_editor role.

The attack this pins: 113 KB of YAML with 2,000 nested aliases expanded into ~195 MB of JSON, through
`POST /api/v1/policies/validate/` with any token, and into a 10 MB stored draft through the editor.
"""

from __future__ import annotations

import json

import pytest
import yaml

from ctxeng.engine import InvalidInput, parse_policy

VALIDATE = "/api/v1/policies/validate/"


def laughs(levels: int = 12, width: int = 6) -> str:
    """A 'billion laughs' document: each level an anchored list of `width` aliases of the level below."""
    lines = ["l0: &l0 [" + ", ".join(["'ha'"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def example_with(example_policy_text: str, extra: str) -> str:
    return example_policy_text.rstrip("\n") + "\n" + extra


def test_the_attack_document_would_expand_by_orders_of_magnitude():
    """The oracle for the tests below: PyYAML's stock SafeLoader expands it (kept small here)."""
    text = laughs(levels=6, width=6)
    assert len(json.dumps(yaml.safe_load(text))) > 100 * len(text)


def test_the_engine_refuses_an_alias_and_names_its_line(example_policy_text):
    text = example_with(example_policy_text, "x-notes: &n [a]\ny-notes: *n\n")
    line = text.splitlines().index("x-notes: &n [a]") + 1
    with pytest.raises(InvalidInput) as refused:
        parse_policy(text)
    assert refused.value.errors == [f"body: line {line}: YAML anchors are not accepted (&n); write the value out"]


def test_the_engine_refuses_an_alias_to_an_anchor_it_never_saw():
    with pytest.raises(InvalidInput) as refused:
        parse_policy("policy:\n  id: p\nbudget: *b\n")
    assert refused.value.errors == ["body: line 3: YAML aliases are not accepted (*b); write the value out"]


def test_the_engine_refuses_a_merge_key():
    with pytest.raises(InvalidInput, match="line 2: YAML anchors are not accepted"):
        parse_policy("a: 1\nbase: &base {x: 1}\nother:\n  <<: *base\n")


def test_the_engine_refuses_yaml_nested_ten_thousand_deep_without_recursing():
    with pytest.raises(InvalidInput) as refused:
        parse_policy("a: " + "[" * 10_000 + "]" * 10_000)
    assert refused.value.errors == ["body: line 1: nested deeper than 64 levels"]


def test_the_cli_refuses_the_attack_document(tmp_path, capsys):
    from ctxeng.cli import main

    policy = tmp_path / "policy.yaml"
    policy.write_text(laughs())
    assert main(["validate-policy", str(policy)]) == 2
    assert "invalid: body: line 1: YAML anchors are not accepted (&l0)" in capsys.readouterr().err


def test_the_validate_endpoint_refuses_the_attack_document_with_a_400(editor_api):
    response = editor_api.post(VALIDATE, laughs(levels=2000 // 6, width=6), format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == ["body: line 1: YAML anchors are not accepted (&l0); write the value out"]


@pytest.mark.parametrize("who", ["agent_api", "reviewer_api", "anon_api"])
def test_validating_a_policy_needs_the_policy_editor_role(request, who, example_policy_body):
    client = request.getfixturevalue(who)
    assert client.post(VALIDATE, example_policy_body, format="json").status_code in (401, 403)
    if who != "anon_api":
        assert client.post(VALIDATE, example_policy_body, format="json").status_code == 403


def test_an_editor_still_validates_the_worked_example_as_yaml_text(editor_api, example_policy_text):
    response = editor_api.post(VALIDATE, example_policy_text, format="json")
    assert response.status_code == 200 and response.json()["valid"] is True


def test_a_body_larger_than_the_limit_once_parsed_is_refused(editor_api, example_policy_text, settings):
    """The YAML text fits the limit, the body it parses into (defaults filled in) does not."""
    posted = len(json.dumps(example_policy_text).encode())
    parsed = len(json.dumps(parse_policy(example_policy_text).model_dump(mode="json"), separators=(",", ":"),
                            ensure_ascii=False).encode())
    assert posted < parsed
    settings.CTXENG_MAX_REQUEST_BYTES = posted
    response = editor_api.post(VALIDATE, example_policy_text, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0].endswith(f"more than the limit of {posted} bytes (CTXENG_MAX_REQUEST_BYTES)")
    settings.CTXENG_MAX_REQUEST_BYTES = parsed
    assert editor_api.post(VALIDATE, example_policy_text, format="json").status_code == 200
