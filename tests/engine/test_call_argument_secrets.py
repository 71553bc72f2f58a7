"""A credential in the agent's own tool-call arguments (issue 50; `security.secrets_in_call_arguments`).

The caller's assistant turns are not candidates, so no gate sees their calls' arguments: the clause
does. Under `redact` (chat-agent, research-agent: `secret_material: deny_or_redact`) only the
credential's span is replaced in the payload's copy of the arguments, which stays valid JSON with
the same keys for every adapter, and the pair's manifest entry names the field path and detector,
never the value; under `block` (coding-agent: `secret_material: deny`) the step is blocked naming
the call and field. Each expected payload is written out by hand."""

from __future__ import annotations

import json

import pytest

from ctxeng import sdk
from ctxeng.engine.hashing import sha256_json
from ctxeng.engine.models import SecurityPolicy
from ctxeng.sdk.errors import ContextBlocked

AWS_SECRET = "Xk8vQ2mZ" + "p7R1tY4wL9nB3cF6hJ0dS5aE2gU8iO1q"
API_KEY = "Zx81nBq0" + "PaLm3TyWv9KcRd"
BEARER = "eyJ0b2tlbiI6InRlc3QifQ" + "Zx81nBq0PaLm3TyWv9Kc"
REDACTED = "[ctxeng:redacted credential]"
MODELS = {"openai_chat": "gpt-4o", "anthropic_messages": "claude-sonnet-4-5", "openai_responses": "gpt-4o"}

# (arguments as the agent sent them, the same arguments as the payload must carry them, field path, detector)
CALLS = {
    "env in a command": (
        {"command": f"AWS_SECRET_ACCESS_KEY={AWS_SECRET} aws s3 ls", "timeout": 30},
        {"command": f"AWS_SECRET_ACCESS_KEY={REDACTED} aws s3 ls", "timeout": 30},
        "tool_calls[0].arguments.command", "Keyword Value",
    ),
    "a value under a credential key": (
        {"service": "billing", "api_key": API_KEY},
        {"service": "billing", "api_key": REDACTED},
        "tool_calls[0].arguments.api_key", "Keyword Value",
    ),
    "a header nested in an object": (
        {"url": "https://api.example.org/v1/items", "headers": {"Authorization": f"Bearer {BEARER}", "Accept": "application/json"}},
        {"url": "https://api.example.org/v1/items", "headers": {"Authorization": f"Bearer {REDACTED}", "Accept": "application/json"}},
        "tool_calls[0].arguments.headers.Authorization", "Authorization Header",
    ),
    "a list element": (
        {"argv": ["curl", "-s", f"https://admin:{API_KEY}@db.internal/", "-o", "out.json"]},
        # detect-secrets' basic-auth pattern spans `://user:password@`, as in content
        {"argv": ["curl", "-s", f"https{REDACTED}db.internal/", "-o", "out.json"]},
        "tool_calls[0].arguments.argv[2]", "Basic Auth Credentials",
    ),
}


def _history(arguments: dict) -> list[dict]:
    return [
        {"role": "system", "content": "You are a careful agent."},
        {"role": "user", "content": "List the buckets."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "run", "arguments": json.dumps(arguments)}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "bucket-a\nbucket-b"},
    ]


def _step(starter: str, arguments: dict, adapter: str = "openai_chat"):
    items = [sdk.repository_manifest({"acme/deploy": "c0ffee1"}), sdk.hard_constraints(["cite every claim"]),
             sdk.open_items({"o1": "list the buckets"})] if starter == "research-agent" else []
    return sdk.Session(starter, adapter=adapter, model=MODELS[adapter]).step(_history(arguments), items=items)


def _sent_arguments(payload: dict, adapter: str) -> dict:
    """The call's arguments as the provider receives them, parsed (each adapter's own shape)."""
    if adapter == "openai_chat":
        call = next(c for m in payload["messages"] for c in m.get("tool_calls") or [])
        return json.loads(call["function"]["arguments"])
    if adapter == "openai_responses":
        return json.loads(next(i for i in payload["input"] if i.get("type") == "function_call")["arguments"])
    block = next(b for m in payload["messages"] if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_use")
    return block["input"]


@pytest.mark.parametrize("adapter", sorted(MODELS))
@pytest.mark.parametrize("starter", ["chat-agent", "research-agent"])
@pytest.mark.parametrize("form", sorted(CALLS))
def test_under_redact_only_the_span_is_replaced_and_the_arguments_stay_json(starter, adapter, form):
    arguments, expected, path, detector = CALLS[form]
    step = _step(starter, arguments, adapter)
    assert step.ready, step.manifest["assembly"]["blocked_detail"]
    assert _sent_arguments(step.kwargs, adapter) == expected
    text = json.dumps(step.kwargs, ensure_ascii=False) + json.dumps(step.manifest, ensure_ascii=False)
    for secret in (AWS_SECRET, API_KEY, BEARER):
        assert secret not in text
    pair = next(p for p in step.manifest["tool_pairs"] if p["call_id"] == "c0")
    assert pair["argument_redactions"] == [{"path": path, "detector": detector}]
    assert pair["canonical_argument_hash"] == sha256_json({"tool_name": "run", "arguments": arguments})  # as received


@pytest.mark.parametrize("adapter", sorted(MODELS))
@pytest.mark.parametrize("form", sorted(CALLS))
def test_under_block_the_step_is_blocked_naming_the_call_and_field(adapter, form):
    arguments, _, path, _ = CALLS[form]
    step = _step("coding-agent", arguments, adapter)
    assembly = step.manifest["assembly"]
    assert assembly["status"] == "blocked"
    assert assembly["blocked_reason"] == "transform_blocked"
    detail = assembly["blocked_detail"][0]
    assert detail.startswith("secret_in_call_arguments: call 'c0' (run)") and path in detail
    assert step.payload is None
    with pytest.raises(ContextBlocked):
        step.kwargs  # noqa: B018 - reading it is the check
    assert AWS_SECRET not in json.dumps(step.manifest) and API_KEY not in json.dumps(step.manifest)


@pytest.mark.parametrize("starter", ["chat-agent", "research-agent", "coding-agent"])
def test_arguments_without_a_credential_are_sent_as_they_are(starter):
    arguments = {"path": "src/app.py", "token_limit": 4000, "command": "grep -rn password_hash src/", "sha": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
    step = _step(starter, arguments)
    assert step.ready
    assert _sent_arguments(step.kwargs, "openai_chat") == arguments
    assert next(p for p in step.manifest["tool_pairs"] if p["call_id"] == "c0")["argument_redactions"] == []


def test_the_starters_defaults_follow_their_secret_material():
    from ctxeng.starters import load as load_starter

    assert {name: (load_starter(name).security.secret_material, load_starter(name).security.secrets_in_call_arguments)
            for name in ("chat-agent", "research-agent", "coding-agent")} == {
        "chat-agent": ("deny_or_redact", "redact"), "research-agent": ("deny_or_redact", "redact"), "coding-agent": ("deny", "block")}
    assert SecurityPolicy().secrets_in_call_arguments == "redact"


def test_an_unknown_value_of_the_clause_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="secrets_in_call_arguments"):
        SecurityPolicy(secrets_in_call_arguments="pass")


# A superseded write whose short argument carries a credential: the elision (issue 47) runs first and
# keeps excerpts of the arguments in its record; the credential must reach neither payload nor manifest.
def _superseded_write_with_a_token(mode: str):
    from .builders import policy, request, run
    from .test_superseded_writes import ON, PLAN1, PLAN2, write

    pol = policy(transforms=ON)
    pol["security"] = {**pol.get("security", {}), "secrets_in_call_arguments": mode}
    first = write("w1", 1, PLAN1, api_key=API_KEY)
    return run(request(extra=[first[0], write("w2", 3, PLAN2)[0]], tool_calls=[first[1], write("w2", 3, PLAN2)[1]]), pol)


@pytest.mark.parametrize("mode", ["redact", "block"])
def test_an_elided_calls_credential_is_kept_out_of_the_elision_record_too(mode):
    r = _superseded_write_with_a_token(mode)
    manifest = r.manifest.model_dump_json()
    assert API_KEY not in manifest and API_KEY not in json.dumps(r.serialized_input)
    (record,) = [t for t in r.manifest.transforms if t.type == "elide_superseded"]
    assert REDACTED in record.before_excerpt  # the excerpt is kept, the credential in it is not
    assert r.manifest.assembly.status == ("ready" if mode == "redact" else "blocked")


def test_a_credential_inside_an_elided_long_string_is_kept_out_of_the_elision_record():
    from .builders import policy, request, run
    from .test_superseded_writes import ON, PLAN2, write

    env_file = f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}\n" + "# deploy settings for the staging cluster\n" * 8
    first, second = write("w1", 1, env_file, path=".env"), write("w2", 3, PLAN2, path=".env")
    r = run(request(extra=[first[0], second[0]], tool_calls=[first[1], second[1]]), policy(transforms=ON))
    assert r.manifest.assembly.status == "ready"
    (record,) = [t for t in r.manifest.transforms if t.type == "elide_superseded"]
    assert f"AWS_SECRET_ACCESS_KEY={REDACTED}" in record.before_excerpt
    assert AWS_SECRET[:8] not in r.manifest.model_dump_json() and AWS_SECRET[:8] not in json.dumps(r.serialized_input)


def test_a_policy_written_before_the_clause_keeps_its_digest_and_block_changes_it():
    from ctxeng.engine import parse_policy, policy_digest

    from .builders import policy

    before = policy()
    assert "secrets_in_call_arguments" not in before.get("security", {})
    stated = {**before, "security": {**before.get("security", {}), "secrets_in_call_arguments": "redact"}}
    blocking = {**before, "security": {**before.get("security", {}), "secrets_in_call_arguments": "block"}}
    assert policy_digest(parse_policy(stated)) == policy_digest(parse_policy(before))
    assert policy_digest(parse_policy(blocking)) != policy_digest(parse_policy(before))
