"""docs/examples/{openai,anthropic}_sdk.py run with the real SDKs against a stub of each API.

The examples run as a user runs them (a subprocess, the SDK configured from its environment):
ctxeng's live server assembles, the SDK sends `Assembly.*_kwargs()` unchanged to the stub
(tests/provider_stub.py), which refuses a request the provider would refuse, and the usage in
the SDK's response object comes back to the `usage/` endpoint and the served manifest.
The oracle for the usage is the stub's own response body, never the manifest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxeng import client as ctxclient
from tests.provider_stub import ProviderStub, check_anthropic_messages, check_openai_chat

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"


@pytest.fixture
def stub():
    with ProviderStub() as server:
        yield server


@pytest.fixture
def agent_token(live_server, inline_jobs, published_policy, agent_user) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.get(user=agent_user).key


def _run_example(name: str, live_server, token: str, stub: ProviderStub) -> dict:
    env = {
        **os.environ,
        "CTXENG_URL": live_server.url,
        "CTXENG_TOKEN": token,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": stub.openai_base_url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "ANTHROPIC_BASE_URL": stub.anthropic_base_url,
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _served_manifest(live_server, token: str, job_id: str) -> dict:
    return ctxclient.Client(live_server.url, token).manifest(job_id)


@pytest.mark.slow
def test_the_openai_example_calls_the_sdk_with_the_payload_and_reports_its_usage(live_server, agent_token, stub):
    printed = _run_example("openai_sdk.py", live_server, agent_token, stub)

    [(provider, body)] = stub.requests
    assert provider == "openai" and body["model"] == "gpt-4o"
    roles = [m["role"] for m in body["messages"]]
    assert roles[:3] == ["system", "user", "assistant"] and set(roles[3:]) == {"tool"}
    assert printed["reply"] == "Noted: drafting from the admitted evidence."
    sent = stub.openai_response(body)["usage"]  # the stub's answer is a pure function of the body
    assert printed["usage"]["input_tokens"] == sent["prompt_tokens"]
    assert printed["usage"]["cached_tokens"] == sent["prompt_tokens_details"]["cached_tokens"]
    assert printed["usage"]["output_tokens"] == sent["completion_tokens"]
    manifest = _served_manifest(live_server, agent_token, printed["usage"]["id"])
    assert manifest["budget"]["actual_input_tokens"] == sent["prompt_tokens"]


@pytest.mark.slow
def test_the_anthropic_example_calls_the_sdk_with_the_payload_and_reports_its_usage(live_server, agent_token, stub):
    printed = _run_example("anthropic_sdk.py", live_server, agent_token, stub)

    [(provider, body)] = stub.requests
    assert provider == "anthropic"
    assert body["max_tokens"] > 0 and isinstance(body["system"], str)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    sent = stub.anthropic_response(body)["usage"]
    prompt = sent["input_tokens"] + sent["cache_read_input_tokens"] + sent["cache_creation_input_tokens"]
    assert printed["usage"]["input_tokens"] == prompt
    assert printed["usage"]["cached_tokens"] == sent["cache_read_input_tokens"]
    assert printed["usage"]["output_tokens"] == sent["output_tokens"]
    manifest = _served_manifest(live_server, agent_token, printed["usage"]["id"])
    assert manifest["budget"]["actual_input_tokens"] == prompt


def test_a_manifest_without_reported_usage_has_no_actual_count(live_server, agent_token, example_request):
    assembly = ctxclient.Client(live_server.url, agent_token).assemble(example_request, timeout=30)
    assert assembly.manifest["budget"]["actual_input_tokens"] is None


def test_kwargs_of_the_other_adapter_are_refused_by_name(live_server, agent_token, example_request):
    assembly = ctxclient.Client(live_server.url, agent_token).assemble(example_request, timeout=30)
    with pytest.raises(ctxclient.ClientError, match="serialized by openai_chat, not anthropic_messages"):
        assembly.anthropic_kwargs()


def test_a_blocked_assembly_has_no_kwargs(live_server, agent_token, example_blocked_request):
    assembly = ctxclient.Client(live_server.url, agent_token).assemble(example_blocked_request, timeout=30)
    with pytest.raises(ctxclient.Conflict):
        assembly.openai_kwargs()


def test_kwargs_are_a_copy_with_overrides_on_top(live_server, agent_token, example_request):
    assembly = ctxclient.Client(live_server.url, agent_token).assemble(example_request, timeout=30)
    kwargs = assembly.openai_kwargs(temperature=0)
    kwargs["messages"].clear()
    assert kwargs["temperature"] == 0 and assembly.input["messages"] and "temperature" not in assembly.input


# ---------------------------------------------------------------- the stub refuses what the API refuses


def _openai_ok() -> dict:
    return {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call-a", "type": "function", "function": {"name": "read_source", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call-a", "content": "result"},
    ]}


def _anthropic_ok() -> dict:
    return {"model": "claude", "max_tokens": 100, "system": "policy", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call-a", "name": "read_source", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call-a", "content": "result"}]},
    ]}


HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def test_the_stub_accepts_well_formed_requests():
    check_openai_chat(_openai_ok())
    check_anthropic_messages(_anthropic_ok(), HEADERS)


@pytest.mark.parametrize("breakage", ["drop_result", "orphan_result", "bad_arguments", "unknown_key", "bad_role"])
def test_the_openai_sdk_raises_on_a_request_the_api_would_refuse(stub, breakage):
    openai = pytest.importorskip("openai")
    body = _openai_ok()
    if breakage == "drop_result":
        body["messages"].pop()
    elif breakage == "orphan_result":
        body["messages"][3]["tool_call_id"] = "call-z"
    elif breakage == "bad_arguments":
        body["messages"][2]["tool_calls"][0]["function"]["arguments"] = "not json"
    elif breakage == "unknown_key":
        body["extra_body"] = {"system": "x"}
    elif breakage == "bad_role":
        body["messages"][1]["role"] = "human"
    sdk = openai.OpenAI(api_key="k", base_url=stub.openai_base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(**body)


@pytest.mark.parametrize("breakage", ["no_max_tokens", "system_role", "starts_with_assistant", "result_not_next",
                                      "empty_text", "orphan_result"])
def test_the_anthropic_sdk_raises_on_a_request_the_api_would_refuse(stub, breakage):
    anthropic = pytest.importorskip("anthropic")
    body = _anthropic_ok()
    if breakage == "no_max_tokens":
        body["extra_body"] = {"max_tokens": None}
    elif breakage == "system_role":
        body["messages"].insert(0, {"role": "system", "content": "policy"})
    elif breakage == "starts_with_assistant":
        body["messages"] = body["messages"][1:]
    elif breakage == "result_not_next":
        body["messages"][2]["content"].insert(0, {"type": "text", "text": "first"})
    elif breakage == "empty_text":
        body["messages"][0]["content"][0]["text"] = ""
    elif breakage == "orphan_result":
        body["messages"][2]["content"][0]["tool_use_id"] = "call-z"
    sdk = anthropic.Anthropic(api_key="k", base_url=stub.anthropic_base_url, max_retries=0)
    with pytest.raises(anthropic.BadRequestError):
        sdk.messages.create(**body)


def test_usage_is_read_from_either_sdk_shape_and_from_dicts():
    assert ctxclient.usage_from_response(
        {"usage": {"prompt_tokens": 2000, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 1024}}}
    ) == {"input_tokens": 2000, "cached_tokens": 1024, "output_tokens": 7}
    assert ctxclient.usage_from_response(
        {"usage": {"input_tokens": 900, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 100,
                   "output_tokens": 9}}
    ) == {"input_tokens": 2000, "cached_tokens": 1000, "output_tokens": 9}
    with pytest.raises(ValueError, match="no usage"):
        ctxclient.usage_from_response({"id": "x"})


def test_the_client_module_imports_no_sdk():
    done = subprocess.run([sys.executable, "-c", "import sys, ctxeng.client; "
                           "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic')))"],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


# ---------------------------------------------------------------- the Responses API and provider cache markers


def test_responses_kwargs_are_taken_unchanged_by_the_openai_sdk(live_server, agent_token, example_request, stub):
    openai = pytest.importorskip("openai")
    from ctxeng.engine.hashing import sha256_json

    assembly = ctxclient.Client(live_server.url, agent_token).assemble({**example_request, "adapter": "openai_responses"}, timeout=30)
    assert assembly.adapter == "openai_responses"
    sdk = openai.OpenAI(api_key="k", base_url=stub.openai_base_url, max_retries=0)
    response = sdk.responses.create(**assembly.responses_kwargs())
    [(route, body)] = stub.requests
    assert route == "openai_responses" and body == assembly.input
    assert sha256_json(body) == assembly.manifest["assembly"]["serialized_model_input_hash"]
    sent = stub.responses_response(body)["usage"]
    assert ctxclient.usage_from_response(response) == {
        "input_tokens": sent["input_tokens"], "cached_tokens": sent["input_tokens_details"]["cached_tokens"],
        "output_tokens": sent["output_tokens"]}
    with pytest.raises(ctxclient.ClientError, match="serialized by openai_responses, not openai_chat"):
        assembly.openai_kwargs()


def test_anthropic_kwargs_with_a_cache_breakpoint_are_taken_by_the_anthropic_sdk(stub):
    anthropic = pytest.importorskip("anthropic")
    from ctxeng.engine.tokens import default_tokenizer
    from tests.engine.builders import run
    from tests.engine.test_cache_markers import SONNET, _request, _system_of

    system = _system_of(1100)
    result = run(_request(system, SONNET))
    assembly = ctxclient.Assembly(id="local", status="ready", job={}, manifest=result.manifest_dict(), input=result.serialized_input)
    sdk = anthropic.Anthropic(api_key="k", base_url=stub.anthropic_base_url, max_retries=0)
    response = sdk.messages.create(**assembly.anthropic_kwargs())
    [(_, body)] = stub.requests
    assert body == result.serialized_input and body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert ctxclient.usage_from_response(response)["cached_tokens"] == default_tokenizer().count(system)
    assert assembly.manifest["cache"]["provider_marker"]["at"] == "system[0]"


@pytest.mark.parametrize("breakage", ["output_without_call", "call_without_output", "chat_shaped_tool", "unknown_key"])
def test_the_openai_sdk_raises_on_a_responses_request_the_api_would_refuse(stub, breakage):
    openai = pytest.importorskip("openai")
    body = {"model": "gpt-4o", "instructions": "policy", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "task"}]},
        {"type": "function_call", "call_id": "call-a", "name": "read_source", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call-a", "output": "result"},
    ], "tools": [{"type": "function", "name": "read_source", "description": "", "parameters": {"type": "object", "properties": {}},
                  "strict": False}]}
    sdk = openai.OpenAI(api_key="k", base_url=stub.openai_base_url, max_retries=0)
    sdk.responses.create(**body)  # the unbroken request is accepted
    if breakage == "output_without_call":
        body["input"].pop(1)
    elif breakage == "call_without_output":
        body["input"].pop(2)
    elif breakage == "chat_shaped_tool":
        body["tools"] = [{"type": "function", "function": {"name": "read_source", "parameters": {"type": "object"}}}]
    elif breakage == "unknown_key":
        body["extra_body"] = {"messages": []}
    with pytest.raises(openai.BadRequestError):
        sdk.responses.create(**body)


def test_usage_is_read_from_the_responses_shape():
    assert ctxclient.usage_from_response(
        {"usage": {"input_tokens": 2000, "input_tokens_details": {"cached_tokens": 1024}, "output_tokens": 7,
                   "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 2007}}
    ) == {"input_tokens": 2000, "cached_tokens": 1024, "output_tokens": 7}
