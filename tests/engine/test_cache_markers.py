"""Provider caches used on purpose: Anthropic's `cache_control` breakpoint on the stable prefix,
OpenAI's `prompt_cache_key` from the prefix identity (policy `cache.prompt_cache_key`), and the
manifest's `cache.provider_marker`.

Oracles: the request's own system text and its token count by the bundled encoding (counted here,
not read from the manifest), the minimums Anthropic documents (written out below by hand), and the
stub of each API (tests/provider_stub.py).
"""

from __future__ import annotations

import copy
import json

import pytest

from ctxeng import sdk
from ctxeng.engine import parse_policy
from ctxeng.engine.cache import anthropic_minimum
from ctxeng.engine.render import DATA_BOUNDARY_NOTICE
from ctxeng.engine.tokens import default_tokenizer
from tests.provider_stub import (
    ProviderStub,
    Rejected,
    check_anthropic_messages,
    check_openai_chat,
    check_openai_responses,
)

from .builders import base_items, item, policy, request, run

HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
SONNET = {"provider": "anthropic", "name": "claude-sonnet-4-5-20250929", "context_limit": 16000}
HAIKU = {"provider": "anthropic", "name": "claude-3-5-haiku-20241022", "context_limit": 16000}
RULE = "Rule: cite every claim with the revision of its source, and never approve your own draft. "


def _system_of(tokens: int) -> str:
    """A system prompt of at least `tokens` tokens by the bundled encoding (and not much more)."""
    count = default_tokenizer().count
    text = RULE
    while count(text) < tokens:
        text += RULE
    return text.strip()


def _request(system: str, model: dict, adapter: str = "anthropic_messages", extra: list | None = None) -> dict:
    cands = [item("system", "system_policy", system)] + base_items()[1:] + (extra or [])
    return request(cands, model=model, adapter=adapter)


def _opted_in() -> dict:
    pol = policy()
    pol["cache"] = {"stable_prefix_sources": ["system_policy"], "prompt_cache_key": True}
    return pol


def test_the_minimums_are_the_ones_anthropic_documents():
    assert anthropic_minimum("claude-sonnet-4-5-20250929") == 1024
    assert anthropic_minimum("claude-sonnet-4-20250514") == 1024
    assert anthropic_minimum("claude-opus-4-1-20250805") == 1024
    assert anthropic_minimum("claude-3-7-sonnet-20250219") == 1024
    assert anthropic_minimum("claude-opus-4-5-20251101") == 4096
    assert anthropic_minimum("claude-haiku-4-5-20251001") == 4096
    assert anthropic_minimum("claude-3-5-haiku-20241022") == 2048
    assert anthropic_minimum("claude-3-haiku-20240307") == 2048
    assert anthropic_minimum("claude-next") is None and anthropic_minimum("gpt-4o") is None


def test_a_long_stable_prefix_carries_one_breakpoint_on_its_own_system_block():
    system = _system_of(1100)
    r = run(_request(system, SONNET))
    payload = r.serialized_input
    check_anthropic_messages(payload, HEADERS)
    assert payload["system"] == [
        {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": DATA_BOUNDARY_NOTICE},
    ]
    assert json.dumps(payload).count("cache_control") == 1
    assert set(r.manifest.assembly.serialization_checks.values()) == {"passed"}
    marker = r.manifest.cache.provider_marker
    assert (marker.provider, marker.kind, marker.at, marker.key) == ("anthropic", "cache_control", "system[0]", None)
    assert marker.prefix_identity == r.manifest.cache.prefix_identity
    assert marker.tokens == default_tokenizer().count(system) and marker.minimum_tokens == 1024


def test_only_the_stable_prefix_is_marked_and_other_control_text_follows_it():
    pol = policy()
    pol["trust"]["default_by_source"]["operator_rule"] = "control_authority"
    rule = item("rule", "operator_rule", "Operator rule: answer in English.", kind="instruction",
                trust="control_authority", intended_role="control")
    system = _system_of(1100)
    r = run(_request(system, SONNET, extra=[rule]), pol)
    assert r.status == "ready", r.manifest.assembly.blocked_detail
    blocks = r.serialized_input["system"]
    assert [b.get("cache_control") for b in blocks] == [{"type": "ephemeral"}, None]
    assert blocks[0]["text"] == system
    assert blocks[1]["text"] == f"Operator rule: answer in English.\n\n{DATA_BOUNDARY_NOTICE}"
    assert set(r.manifest.assembly.serialization_checks.values()) == {"passed"}


def test_a_prefix_below_the_models_minimum_gets_no_breakpoint_and_the_plain_system_text():
    system = _system_of(1100)  # over Sonnet's 1024, under Haiku's 2048
    r = run(_request(system, HAIKU))
    assert r.serialized_input["system"] == f"{system}\n\n{DATA_BOUNDARY_NOTICE}"
    assert r.manifest.cache.provider_marker is None
    short = run(_request("Be brief.", SONNET))
    assert short.serialized_input["system"] == f"Be brief.\n\n{DATA_BOUNDARY_NOTICE}"
    assert short.manifest.cache.provider_marker is None


def test_a_model_the_table_does_not_know_gets_no_breakpoint():
    r = run(_request(_system_of(5000), {"provider": "anthropic", "name": "claude-next", "context_limit": 16000}))
    assert isinstance(r.serialized_input["system"], str) and r.manifest.cache.provider_marker is None


def test_a_marked_payload_is_the_unmarked_one_but_for_the_system_split():
    system = _system_of(1100)
    marked = run(_request(system, SONNET)).serialized_input
    plain = run(_request(system, HAIKU)).serialized_input
    marked_rest = {k: v for k, v in marked.items() if k not in ("system", "model")}
    plain_rest = {k: v for k, v in plain.items() if k not in ("system", "model")}
    assert marked_rest == plain_rest
    assert "\n\n".join(b["text"] for b in marked["system"]) == plain["system"]


def test_the_anthropic_stub_reads_only_a_marked_prefix_from_cache_and_refuses_a_fifth_breakpoint():
    stub = ProviderStub()
    system = _system_of(1100)
    marked = run(_request(system, SONNET)).serialized_input
    plain = run(_request(_system_of(1100), HAIKU)).serialized_input
    assert stub.anthropic_response(marked)["usage"]["cache_read_input_tokens"] == default_tokenizer().count(system)
    assert stub.anthropic_response(plain)["usage"]["cache_read_input_tokens"] == 0
    five = copy.deepcopy(marked)
    five["system"] = [{"type": "text", "text": f"part {n}", "cache_control": {"type": "ephemeral"}} for n in range(5)]
    with pytest.raises(Rejected, match="A maximum of 4 blocks with cache_control"):
        check_anthropic_messages(five, HEADERS)
    wrong = copy.deepcopy(marked)
    wrong["system"][0]["cache_control"] = {"type": "persistent"}
    with pytest.raises(Rejected, match="cache_control"):
        check_anthropic_messages(wrong, HEADERS)


# --------------------------------------------------------------------------- OpenAI: prompt_cache_key


def test_without_the_opt_in_no_prompt_cache_key_is_sent():
    for adapter in ("openai_chat", "openai_responses"):
        r = run(_request(_system_of(1100), {"provider": "openai", "name": "gpt-4o", "context_limit": 16000}, adapter))
        assert "prompt_cache_key" not in r.serialized_input
        assert r.manifest.cache.provider_marker is None


@pytest.mark.parametrize("adapter", ["openai_chat", "openai_responses"])
def test_with_the_opt_in_the_key_follows_the_prefix_identity(adapter):
    model = {"provider": "openai", "name": "gpt-4o", "context_limit": 16000}
    first = run(_request("Be brief.", model, adapter), _opted_in())
    later = run(_request("Be brief.", model, adapter, extra=[item("ev", content="new evidence")]), _opted_in())
    other = run(_request("Be thorough.", model, adapter), _opted_in())
    key = first.serialized_input["prompt_cache_key"]
    assert key.startswith("ctxeng-") and len(key) <= 64
    assert later.serialized_input["prompt_cache_key"] == key  # the tail changed, the prefix did not
    assert other.serialized_input["prompt_cache_key"] != key  # another system prompt, another key
    (check_openai_chat if adapter == "openai_chat" else check_openai_responses)(first.serialized_input)
    marker = first.manifest.cache.provider_marker
    assert (marker.provider, marker.kind, marker.at, marker.key) == ("openai", "prompt_cache_key", "prompt_cache_key", key)
    assert marker.prefix_identity == first.manifest.cache.prefix_identity
    assert marker.tokens == default_tokenizer().count("Be brief.")


def test_the_opt_in_does_not_touch_anthropic_payloads():
    r = run(_request("Be brief.", SONNET), _opted_in())
    assert "prompt_cache_key" not in r.serialized_input


def test_a_policy_without_the_clause_keeps_its_digest():
    from ctxeng.engine.policy import policy_digest

    written = policy()
    explicit = policy()
    explicit["cache"] = {"prompt_cache_key": False}
    assert policy_digest(parse_policy(written)) == policy_digest(parse_policy(explicit))
    assert "prompt_cache_key" not in parse_policy(written).model_dump(mode="json")["cache"]
    assert policy_digest(parse_policy(_opted_in())) != policy_digest(parse_policy(written))


def test_a_non_boolean_clause_is_refused_by_path():
    from ctxeng.engine import InvalidInput

    bad = policy()
    bad["cache"] = {"prompt_cache_key": "yes please"}
    with pytest.raises(InvalidInput) as exc:
        parse_policy(bad)
    assert any(e.startswith("cache.prompt_cache_key") for e in exc.value.errors), exc.value.errors


# --------------------------------------------------------------------------- across steps


@pytest.mark.parametrize("adapter", ["openai_chat", "openai_responses"])
def test_two_steps_of_a_session_share_every_earlier_message_byte_for_byte(adapter):
    """No nonce (issue 37): the next step's payload starts with this step's messages, byte for byte."""
    from ctxeng import starters

    body = starters.load("chat-agent").model_dump(mode="json")
    body["cache"]["prompt_cache_key"] = True
    session = sdk.Session(body, model="gpt-4o", adapter=adapter)
    messages = [{"role": "system", "content": "You are a careful research agent."},
                {"role": "user", "content": "Which file pairs tool calls?"}]
    first = session.step(messages).kwargs
    messages += [{"role": "assistant", "content": "structure.py pairs them."}, {"role": "user", "content": "And the adapters?"}]
    second = session.step(messages).kwargs
    if adapter == "openai_chat":
        head_1, head_2 = json.dumps(first["messages"][0]), json.dumps(second["messages"][0])
        tail_1, tail_2 = first["messages"][1:], second["messages"][1:2]
    else:
        head_1, head_2 = first["instructions"], second["instructions"]
        tail_1, tail_2 = first["input"], second["input"][:1]
    assert head_1 == head_2
    assert tail_1 == tail_2 and len(tail_1) == 1  # the user's first turn, unchanged
    assert first["prompt_cache_key"] == second["prompt_cache_key"]


def test_a_session_reads_a_marked_anthropic_system_back_as_its_plain_text():
    system = _system_of(1100)
    user = {"role": "user", "content": "Which file pairs tool calls?"}
    for fmt in ("openai", "anthropic"):
        session = sdk.Session("chat-agent", model="claude-sonnet-4-5")
        if fmt == "openai":
            step = session.step([{"role": "system", "content": system}, user])
        else:
            step = session.step([user], system=system, format="anthropic")
        assert step.kwargs["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert step.system == f"{system}\n\n{DATA_BOUNDARY_NOTICE}"
        if fmt == "openai":
            assert step.messages[0] == {"role": "system", "content": step.system}
        assert step.manifest["cache"]["provider_marker"]["prefix_identity"] == step.manifest["cache"]["prefix_identity"]
