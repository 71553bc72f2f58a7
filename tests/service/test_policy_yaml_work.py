"""Policy YAML is bounded before it is parsed (issue 30, findings 5 and 6).

The attacks: a 2.3 MB YAML of 200,000 top-level keys held a web worker ~31 s (gunicorn killed
it; two such requests took the web tier down), a single 15 MB scalar 19.7 s before its 400, and
a 5,000-digit `revision` ended in a 500 (Python's int() refuses more than 4,300 digits). Every
bound here is refused before the loader that builds the policy runs: the tests prove it by
counting the loader's constructions, never by timing.
"""

from __future__ import annotations

import pytest
import yaml
import yaml.composer

from ctxeng.engine import InvalidInput, parse_policy
from ctxeng.engine import errors as engine_errors
from ctxeng.engine.limits import MAX_JSON_DEPTH, MAX_POLICY_BYTES, MAX_YAML_NODES, MAX_YAML_SCALAR

VALIDATE = "/api/v1/policies/validate/"


def many_keys(count: int) -> str:
    return "".join(f"key{i}: {i}\n" for i in range(count))


@pytest.fixture
def loader_runs(monkeypatch) -> list[int]:
    """How many documents PyYAML's pure-Python composer built (the policy loader's, or a field's
    line being looked up): the work the bounds must come before."""
    runs: list[int] = []
    original = yaml.composer.Composer.compose_document

    def counted(self):
        runs.append(1)
        return original(self)

    monkeypatch.setattr(yaml.composer.Composer, "compose_document", counted)
    return runs


def test_a_five_thousand_digit_revision_is_a_400_naming_the_field(editor_api, example_policy_text):
    text = example_policy_text.replace("revision: 3", "revision: " + "9" * 5000, 1)
    assert text != example_policy_text
    response = editor_api.post(VALIDATE, text, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        "policy.revision: 999999999999... (5000 characters) is outside ±9007199254740991 "
        "(integers must be exact in JSON)"
    ]


@pytest.mark.parametrize("written", ["0x" + "f" * 5000, "-" + "1" * 4400, "1_" * 3000 + "1", "9007199254740992"])
def test_an_integer_beyond_the_json_bound_is_refused_in_any_yaml_form(written):
    with pytest.raises(InvalidInput) as refused:
        parse_policy(f"policy:\n  id: p\n  revision: 1\nx-note: [{written}]\n")
    assert refused.value.errors[0].startswith("x-note[0]: ") and "is outside ±9007199254740991" in refused.value.errors[0]


def test_integers_within_the_bound_still_read_as_yaml_integers():
    assert engine_errors.load_yaml_text("a: 9007199254740991\nb: -0x1F\nc: 1_000\n", what="policy") == {
        "a": 9007199254740991, "b": -31, "c": 1000}


def test_two_hundred_thousand_keys_are_a_413_before_the_loader_runs(editor_api, loader_runs):
    text = many_keys(200_000)
    assert len(text.encode()) > 2_000_000  # the attack's size
    response = editor_api.post(VALIDATE, text, format="json")
    assert response.status_code == 413
    assert response.json()["errors"] == [
        f"body: {len(text.encode())} bytes of YAML, more than the limit {MAX_POLICY_BYTES}"]
    assert loader_runs == []


def test_a_fifteen_megabyte_scalar_is_a_413_before_the_loader_runs(editor_api, loader_runs):
    text = "policy: " + "x" * 15_000_000
    response = editor_api.post(VALIDATE, text, format="json")
    assert response.status_code == 413 and "bytes of YAML, more than the limit" in response.json()["errors"][0]
    assert loader_runs == []


def test_keys_within_the_byte_limit_but_beyond_the_node_limit_are_a_400_naming_the_bound(editor_api, loader_runs):
    keys = MAX_YAML_NODES // 2 + 1  # each key is two nodes (key and value), plus the mapping
    text = many_keys(keys)
    assert len(text.encode()) < MAX_POLICY_BYTES
    response = editor_api.post(VALIDATE, text, format="json")
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error.startswith("body: line ") and error.endswith(f": more than {MAX_YAML_NODES} YAML nodes")
    assert loader_runs == []


def test_a_long_scalar_within_the_byte_limit_is_a_400_naming_its_line(editor_api, loader_runs):
    text = "policy:\n  id: p\nnotes: " + "x" * (MAX_YAML_SCALAR + 1) + "\n"
    response = editor_api.post(VALIDATE, text, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [
        f"body: line 3: a scalar of {MAX_YAML_SCALAR + 1} characters, more than the limit {MAX_YAML_SCALAR}"]
    assert loader_runs == []


def test_deep_flow_nesting_is_refused_by_the_prescan(loader_runs):
    with pytest.raises(InvalidInput) as refused:
        parse_policy("a: " + "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    assert refused.value.errors == [f"body: line 1: nested deeper than {MAX_JSON_DEPTH} levels"]
    assert loader_runs == []


def test_a_policy_at_the_bounds_passes_the_prescan_and_is_loaded(example_policy_text, loader_runs):
    """The bounds refuse only what exceeds them: the worked example, with a note of exactly
    MAX_YAML_SCALAR characters, is loaded (once) and valid."""
    text = example_policy_text.rstrip("\n") + "\nx-note: " + "y" * MAX_YAML_SCALAR + "\n"
    with pytest.raises(InvalidInput) as refused:  # x-note is not a policy field: the loader ran
        parse_policy(text)
    assert refused.value.errors == ["x-note: unknown field"]
    assert loader_runs == [1]


def test_the_cli_refuses_an_oversized_policy_with_exit_2(tmp_path, capsys, loader_runs):
    from ctxeng.cli import main

    policy = tmp_path / "policy.yaml"
    policy.write_text(many_keys(200_000))
    assert main(["validate-policy", str(policy)]) == 2
    assert "bytes of YAML, more than the limit 1048576" in capsys.readouterr().err
    assert loader_runs == []


def test_import_policy_refuses_an_oversized_policy(tmp_path, db, loader_runs):
    from django.core.management import CommandError, call_command

    policy = tmp_path / "policy.yaml"
    policy.write_text(many_keys(200_000))
    with pytest.raises((CommandError, SystemExit)) as refused:
        call_command("import_policy", str(policy), "--tenant", "tenant-x")
    assert "bytes of YAML, more than the limit" in str(refused.value)
    assert loader_runs == []


def test_a_json_policy_body_of_two_hundred_thousand_keys_is_a_400_naming_the_bound(editor_api):
    """The same attack as a JSON object: pydantic spent ~10 s listing 200,000 unknown keys."""
    body = {f"key{i}": i for i in range(200_000)}
    response = editor_api.post(VALIDATE, body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == [f"body: more than {MAX_YAML_NODES} nodes (keys, values, lists, objects)"]


def test_the_worked_example_as_json_is_within_the_node_bound(editor_api, example_policy_body):
    assert editor_api.post(VALIDATE, example_policy_body, format="json").status_code == 200
