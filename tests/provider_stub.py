"""A local stand-in for the OpenAI and Anthropic HTTP APIs, for the SDK examples' tests.

The official SDKs are pointed at it with their `base_url` (`OPENAI_BASE_URL`,
`ANTHROPIC_BASE_URL`). It checks a request the way the provider does before any model runs, and
answers a payload the provider would refuse with the provider's own 400 error body (the SDK
raises `BadRequestError`); a good payload gets a realistic response with usage.

What it checks (the rules the providers document and enforce):

- OpenAI `POST /v1/chat/completions`: known top-level keys only; `model` and a non-empty
  `messages`; roles `system|developer|user|assistant|tool`; content a string or a list of typed
  parts; an assistant `tool_calls` entry has `id`, `type: function`, a `function.name` of
  `[a-zA-Z0-9_-]{1,64}` and `arguments` that are a JSON object text; every tool call is answered
  by exactly one `tool` message right after its assistant message, and no `tool` message answers
  a call that was not made; `tools[]` are functions with an object schema.
- Anthropic `POST /v1/messages`: a key (`x-api-key` or a bearer `Authorization`) and the
  `anthropic-version` header; known top-level keys
  only; `model`, integer `max_tokens >= 1` and `messages` required; `system` is top level (no
  `system` role in messages); messages start with `user` and alternate; text blocks are not
  empty; every `tool_use` of an assistant turn is answered by a `tool_result` at the start of the
  next user turn, and no `tool_result` answers an unknown id; `tools[]` carry an object
  `input_schema`; at most 4 blocks carry `cache_control`, each `{type: ephemeral[, ttl]}`.
- OpenAI `POST /v1/responses`: known top-level keys only; `model`; `input` a string or a
  non-empty list of items: messages (`user|assistant|system|developer`; user-side parts
  `input_text|input_image|input_file`, assistant parts `output_text|refusal`), `function_call`
  (a `call_id`, a name of the tool alphabet, arguments that are a JSON object text) and
  `function_call_output` (answering an earlier `function_call` by `call_id`, once); every
  `function_call` has its output; `instructions` a string; `max_output_tokens >= 16`; `tools[]`
  are `{type: function, name, parameters}` with an object schema (with `strict: true` the schema
  must be strict: `additionalProperties: false`, every property required).

Usage is counted with cl100k over the message texts plus a per-message overhead (OpenAI's
documented counting recipe), so reported figures sit near the engine's estimate, as a
provider's do. OpenAI reports a cached part for any prompt of 1024 tokens or more (its caching is
automatic); Anthropic only for the system text up to a `cache_control` breakpoint, of at least
1024 tokens, as read from a warm cache (each answer is a pure function of its body, so a test can
recompute it). `requests` keeps every accepted body for the test to look at.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ctxeng.engine.tokens import default_tokenizer

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
OPENAI_KEYS = {
    "model", "messages", "tools", "tool_choice", "temperature", "top_p", "max_tokens", "max_completion_tokens",
    "n", "stop", "stream", "stream_options", "seed", "user", "metadata", "response_format", "parallel_tool_calls",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "store", "reasoning_effort",
    "service_tier", "prompt_cache_key", "safety_identifier", "modalities", "prediction", "audio", "verbosity",
}
OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool"}
ANTHROPIC_KEYS = {
    "model", "max_tokens", "messages", "system", "tools", "tool_choice", "temperature", "top_p", "top_k",
    "stop_sequences", "stream", "metadata", "thinking", "service_tier",
}
ANTHROPIC_BLOCKS = {"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking"}
ANTHROPIC_MAX_CACHE_BREAKPOINTS = 4
RESPONSES_KEYS = {
    "model", "input", "instructions", "tools", "tool_choice", "max_output_tokens", "temperature", "top_p",
    "parallel_tool_calls", "previous_response_id", "store", "stream", "stream_options", "metadata", "reasoning",
    "text", "truncation", "user", "include", "prompt_cache_key", "prompt_cache_retention", "safety_identifier",
    "service_tier", "background", "max_tool_calls", "prompt", "top_logprobs", "conversation",
}
RESPONSES_ROLES = {"user", "assistant", "system", "developer"}
RESPONSES_INPUT_PARTS = {"input_text", "input_image", "input_file"}
RESPONSES_OUTPUT_PARTS = {"output_text", "refusal"}
REPLY = "Noted: drafting from the admitted evidence."


def count_tokens(text: str) -> int:
    return default_tokenizer().count(text)


class Rejected(Exception):
    """The provider's 400: the request shape is wrong."""


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") if isinstance(part, dict) else "" for part in content)


def _check_parts(where: str, content: Any, *, allow_none: bool = False) -> None:
    if content is None and allow_none:
        return
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        raise Rejected(f"{where}.content: expected a string or a non-empty array of content parts")
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in {"text", "image_url", "input_audio", "file", "refusal"}:
            raise Rejected(f"{where}.content[{j}]: invalid content part")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise Rejected(f"{where}.content[{j}].text: expected a string")


def check_openai_chat(body: dict[str, Any]) -> None:
    unknown = set(body) - OPENAI_KEYS
    if unknown:
        raise Rejected(f"Unrecognized request argument supplied: {', '.join(sorted(unknown))}")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Rejected("model: required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Rejected("messages: expected a non-empty array")
    pending: set[str] = set()  # tool calls of the last assistant turn not yet answered
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in OPENAI_ROLES:
            raise Rejected(f"{where}.role: must be one of {sorted(OPENAI_ROLES)}")
        if role != "tool" and pending:
            raise Rejected("An assistant message with 'tool_calls' must be followed by tool messages responding "
                           f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                           f"{', '.join(sorted(pending))}")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                raise Rejected(f"{where}: messages with role 'tool' must be a response to a preceeding message "
                               f"with 'tool_calls' (tool_call_id {call_id!r})")
            pending.discard(call_id)
            _check_parts(where, message.get("content"))
        elif role == "assistant":
            calls = message.get("tool_calls")
            _check_parts(where, message.get("content"), allow_none=bool(calls))
            for j, call in enumerate(calls or []):
                function = call.get("function") or {}
                if call.get("type") != "function" or not call.get("id"):
                    raise Rejected(f"{where}.tool_calls[{j}]: expected an id and type 'function'")
                if not TOOL_NAME.match(function.get("name") or ""):
                    raise Rejected(f"{where}.tool_calls[{j}].function.name: must match {TOOL_NAME.pattern}")
                try:
                    arguments = json.loads(function.get("arguments"))
                except (TypeError, ValueError):
                    raise Rejected(f"{where}.tool_calls[{j}].function.arguments: not valid JSON") from None
                if not isinstance(arguments, dict):
                    raise Rejected(f"{where}.tool_calls[{j}].function.arguments: expected a JSON object")
                if call["id"] in pending:
                    raise Rejected(f"{where}.tool_calls[{j}].id: duplicate {call['id']!r}")
                pending.add(call["id"])
        else:
            _check_parts(where, message.get("content"))
    if pending:
        raise Rejected(f"tool_call_ids without response messages: {', '.join(sorted(pending))}")
    for j, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") or {}
        if tool.get("type") != "function" or not TOOL_NAME.match(function.get("name") or ""):
            raise Rejected(f"tools[{j}]: expected type 'function' and a name matching {TOOL_NAME.pattern}")
        if "parameters" in function and (function["parameters"] or {}).get("type", "object") != "object":
            raise Rejected(f"tools[{j}].function.parameters: must be a JSON Schema object")


def _check_block(where: str, block: Any) -> None:
    if not isinstance(block, dict) or block.get("type") not in ANTHROPIC_BLOCKS:
        raise Rejected(f"{where}.type: expected one of {sorted(ANTHROPIC_BLOCKS)}")
    if block["type"] == "text" and (not isinstance(block.get("text"), str) or not block["text"]):
        raise Rejected(f"{where}: text content blocks must be non-empty")


def check_anthropic_messages(body: dict[str, Any], headers: Any) -> None:
    if not (headers.get("x-api-key") or headers.get("authorization")) or not headers.get("anthropic-version"):
        raise Rejected("an API key (x-api-key or Authorization) and the anthropic-version header are required")
    unknown = set(body) - ANTHROPIC_KEYS
    if unknown:
        raise Rejected(f"{sorted(unknown)[0]}: Extra inputs are not permitted")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Rejected("model: Field required")
    if not isinstance(body.get("max_tokens"), int) or isinstance(body["max_tokens"], bool) or body["max_tokens"] < 1:
        raise Rejected("max_tokens: Field required (an integer >= 1)")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        for j, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise Rejected(f"system[{j}]: expected a text block")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Rejected("messages: Field required (a non-empty array)")
    pending: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise Rejected(f"{where}.role: Input should be 'user' or 'assistant' (system is a top-level parameter)")
        expected = "user" if i % 2 == 0 else "assistant"
        if role != expected:
            raise Rejected(f"{where}: roles must alternate between 'user' and 'assistant', starting with 'user'")
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            raise Rejected(f"{where}.content: expected a string or a non-empty array of blocks")
        for j, block in enumerate(blocks):
            _check_block(f"{where}.content.{j}", block)
        results = [b for b in blocks if b["type"] == "tool_result"]
        if role == "user":
            if pending:
                leading = blocks[: len(pending)]
                answered = {b.get("tool_use_id") for b in leading if b["type"] == "tool_result"}
                if answered != pending:
                    raise Rejected(f"{where}: `tool_use` ids were found without `tool_result` blocks immediately "
                                   f"after: {', '.join(sorted(pending - answered))}. Each `tool_use` block must have "
                                   "a corresponding `tool_result` block in the next message, first in its content")
            for block in results:
                if block.get("tool_use_id") not in pending:
                    raise Rejected(f"{where}: unexpected `tool_use_id` {block.get('tool_use_id')!r} in `tool_result` "
                                   "blocks: each `tool_result` must have a corresponding `tool_use` in the previous message")
                if "is_error" in block and not isinstance(block["is_error"], bool):
                    raise Rejected(f"{where}: tool_result.is_error must be a boolean")
                _check_block(f"{where}.tool_result", {"type": "text", "text": _text_of(block.get("content")) or "-"})
            pending = set()
        else:
            if results:
                raise Rejected(f"{where}: tool_result blocks belong in a user message")
            for block in blocks:
                if block["type"] == "tool_use":
                    if not TOOL_NAME.match(block.get("name") or "") or not isinstance(block.get("input"), dict):
                        raise Rejected(f"{where}: tool_use needs a name matching {TOOL_NAME.pattern} and an object input")
                    pending.add(block.get("id"))
    if pending:
        raise Rejected("the last assistant turn has tool_use blocks without tool_result blocks")
    for j, tool in enumerate(body.get("tools") or []):
        schema = tool.get("input_schema")
        if not TOOL_NAME.match(tool.get("name") or "") or not isinstance(schema, dict) or schema.get("type") != "object":
            raise Rejected(f"tools.{j}: a name matching {TOOL_NAME.pattern} and an input_schema of type object")
    _check_cache_control(body)


def _cache_controls(body: dict[str, Any]) -> list[Any]:
    """Every `cache_control` of the request: on system blocks, message content blocks and tools."""
    blocks = [b for b in body.get("system") or [] if isinstance(body.get("system"), list)]
    for message in body.get("messages") or []:
        if isinstance(message.get("content"), list):
            blocks += message["content"]
    blocks += body.get("tools") or []
    return [b["cache_control"] for b in blocks if isinstance(b, dict) and "cache_control" in b]


def _check_cache_control(body: dict[str, Any]) -> None:
    controls = _cache_controls(body)
    if len(controls) > ANTHROPIC_MAX_CACHE_BREAKPOINTS:
        raise Rejected(f"A maximum of {ANTHROPIC_MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {len(controls)}.")
    for control in controls:
        if not isinstance(control, dict) or control.get("type") != "ephemeral" or set(control) - {"type", "ttl"} \
                or control.get("ttl", "5m") not in ("5m", "1h"):
            raise Rejected(f"cache_control: expected {{'type': 'ephemeral'[, 'ttl': '5m' | '1h']}}, got {control!r}")


def _check_responses_parts(where: str, role: str, content: Any) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        raise Rejected(f"{where}.content: expected a string or a non-empty array of content parts")
    allowed = RESPONSES_OUTPUT_PARTS if role == "assistant" else RESPONSES_INPUT_PARTS
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            raise Rejected(f"Invalid value: {kind!r}. Supported values are: {', '.join(sorted(allowed))}. ({where}.content[{j}])")
        if kind in ("input_text", "output_text") and not isinstance(part.get("text"), str):
            raise Rejected(f"{where}.content[{j}].text: expected a string")


def _check_strict_schema(where: str, schema: dict[str, Any]) -> None:
    properties = schema.get("properties") or {}
    if schema.get("additionalProperties") is not False or set(schema.get("required") or []) != set(properties):
        raise Rejected(f"Invalid schema for function {where}: with strict mode, 'additionalProperties' must be false "
                       "and every property must be required")


def check_openai_responses(body: dict[str, Any]) -> None:
    unknown = set(body) - RESPONSES_KEYS
    if unknown:
        raise Rejected(f"Unknown parameter: '{sorted(unknown)[0]}'.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Rejected("Missing required parameter: 'model'.")
    if body.get("instructions") is not None and not isinstance(body["instructions"], str):
        raise Rejected("Invalid type for 'instructions': expected a string.")
    limit = body.get("max_output_tokens")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 16):
        raise Rejected("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16.")
    if body.get("prompt_cache_key") is not None and not isinstance(body["prompt_cache_key"], str):
        raise Rejected("Invalid type for 'prompt_cache_key': expected a string.")
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise Rejected("Invalid 'input': expected a string or a non-empty array of input items.")
    called: set[str] = set()
    answered: set[str] = set()
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            role = item.get("role")
            if role not in RESPONSES_ROLES:
                raise Rejected(f"Invalid value: {role!r}. Supported values are: {', '.join(sorted(RESPONSES_ROLES))}. ({where}.role)")
            _check_responses_parts(where, role, item.get("content"))
        elif kind == "function_call":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise Rejected(f"Missing required parameter: '{where}.call_id'.")
            if call_id in called:
                raise Rejected(f"Duplicate function call id {call_id!r} ({where}.call_id)")
            if not TOOL_NAME.match(item.get("name") or ""):
                raise Rejected(f"Invalid '{where}.name': must match {TOOL_NAME.pattern}")
            try:
                arguments = json.loads(item.get("arguments"))
            except (TypeError, ValueError):
                raise Rejected(f"Invalid '{where}.arguments': not valid JSON") from None
            if not isinstance(arguments, dict):
                raise Rejected(f"Invalid '{where}.arguments': expected a JSON object")
            called.add(call_id)
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in called:
                raise Rejected(f"No tool call found for function call output with call_id {call_id}.")
            if call_id in answered:
                raise Rejected(f"Duplicate function call output for call_id {call_id}.")
            output = item.get("output")
            if not isinstance(output, str):
                _check_responses_parts(where, "user", output)
            answered.add(call_id)
        else:
            raise Rejected(f"Invalid value: {kind!r}. ({where}.type)")
    if called - answered:
        raise Rejected(f"No tool output found for function call {sorted(called - answered)[0]}.")
    for j, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict) or tool.get("type") != "function" or "function" in tool:
            raise Rejected(f"tools[{j}]: expected {{type: 'function', name, parameters}} (no nested 'function' in the Responses API)")
        if not TOOL_NAME.match(tool.get("name") or ""):
            raise Rejected(f"Invalid 'tools[{j}].name': must match {TOOL_NAME.pattern}")
        schema = tool.get("parameters")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise Rejected(f"Invalid schema for function '{tool.get('name')}': schema must be a JSON Schema of 'type: \"object\"'")
        if "strict" in tool and not isinstance(tool["strict"], bool):
            raise Rejected(f"Invalid type for 'tools[{j}].strict': expected a boolean.")
        if tool.get("strict") is True:
            _check_strict_schema(repr(tool["name"]), schema)


def _prompt_tokens(system: str, messages: list[dict[str, Any]]) -> int:
    """OpenAI's recipe: 3 tokens of framing per message, its texts, 3 to prime the reply."""
    total = 3 + (3 + count_tokens(system) if system else 0)
    for message in messages:
        total += 3
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                total += count_tokens(_text_of(block.get("content")) if block.get("type") == "tool_result"
                                      else block.get("text") or json.dumps(block.get("input") or ""))
        else:
            total += count_tokens(_text_of(content))
        for call in message.get("tool_calls") or []:
            total += count_tokens(call["function"]["name"]) + count_tokens(call["function"]["arguments"])
    return total


def _responses_prompt_tokens(body: dict[str, Any]) -> int:
    """The same recipe over the instructions and the input items' texts and calls."""
    items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
    total = 3 + (3 + count_tokens(body["instructions"]) if body.get("instructions") else 0)
    for item in items:
        total += 3
        if item.get("type") == "function_call":
            total += count_tokens(item["name"]) + count_tokens(item["arguments"])
        elif item.get("type") == "function_call_output":
            total += count_tokens(_text_of(item.get("output")))
        else:
            total += count_tokens(_text_of(item.get("content")))
    return total


def _anthropic_cached(body: dict[str, Any]) -> int:
    """Anthropic reads from its cache only what a breakpoint marks: the system blocks up to the
    last one carrying cache_control, when that is at least 1024 tokens (a warm cache assumed)."""
    system = body.get("system")
    if not isinstance(system, list):
        return 0
    marked = [i for i, b in enumerate(system) if "cache_control" in b]
    if not marked:
        return 0
    prefix = sum(count_tokens(b.get("text", "")) for b in system[: marked[-1] + 1])
    return prefix if prefix >= 1024 else 0


def _cached(prompt: int) -> int:
    """Prompt caching applies from 1024 tokens, in steps of 128 (both providers' rule of thumb)."""
    return 0 if prompt < 1024 else (prompt // 2) // 128 * 128


class ProviderStub:
    """Serve both APIs on 127.0.0.1 in a thread; `openai_base_url`, `anthropic_base_url`.

    `script`: what the model answers to the first requests, in order: a list of tool calls
    `[(call_id, tool_name, arguments), ...]` for a turn that calls tools, or None for a text reply;
    past the script every answer is the text reply. An agent loop thus runs the same turns each time."""

    def __init__(self, script: list[list[tuple[str, str, dict[str, Any]]] | None] | None = None) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.script = list(script or [])
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    body = None
                try:
                    if not isinstance(body, dict):
                        raise Rejected("the body is not a JSON object")
                    if self.path.rstrip("/").endswith("/chat/completions"):
                        check_openai_chat(body)
                        stub.requests.append(("openai", body))
                        self._send(200, stub.openai_response(body))
                    elif self.path.rstrip("/").endswith("/v1/responses"):
                        check_openai_responses(body)
                        stub.requests.append(("openai_responses", body))
                        self._send(200, stub.responses_response(body))
                    elif self.path.rstrip("/").endswith("/v1/messages"):
                        check_anthropic_messages(body, self.headers)
                        stub.requests.append(("anthropic", body))
                        self._send(200, stub.anthropic_response(body))
                    else:
                        self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                except Rejected as exc:
                    if "/v1/messages" in self.path:
                        error = {"type": "error", "error": {"type": "invalid_request_error", "message": str(exc)}}
                    else:
                        error = {"error": {"message": str(exc), "type": "invalid_request_error", "param": None,
                                           "code": None}}
                    self._send(400, error)

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def __enter__(self) -> ProviderStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _scripted(self) -> list[tuple[str, str, dict[str, Any]]] | None:
        """The tool calls the model makes in answer to the request just recorded, if any."""
        n = len(self.requests) - 1
        return self.script[n] if 0 <= n < len(self.script) else None

    def openai_response(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = _prompt_tokens("", body["messages"])
        completion = count_tokens(REPLY)
        calls = self._scripted()
        message: dict[str, Any] = {"role": "assistant", "content": REPLY, "refusal": None}
        if calls:
            message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}} for cid, name, args in calls]}
        return {
            "id": f"chatcmpl-stub{len(self.requests)}",
            "object": "chat.completion",
            "created": 1764460800,
            "model": body["model"],
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": _cached(prompt), "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}},
            "system_fingerprint": "fp_stub",
        }

    def anthropic_response(self, body: dict[str, Any]) -> dict[str, Any]:
        system = body.get("system") if isinstance(body.get("system"), str) else _text_of(body.get("system"))
        prompt = _prompt_tokens(system or "", body["messages"])
        cache_read = min(_anthropic_cached(body), prompt)
        calls = self._scripted()
        content: list[dict[str, Any]] = [{"type": "text", "text": REPLY}]
        if calls:
            content = [{"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args in calls]
        return {
            "id": f"msg_stub{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": prompt - cache_read, "output_tokens": count_tokens(REPLY),
                      "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": 0},
        }

    def responses_response(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = _responses_prompt_tokens(body)
        completion = count_tokens(REPLY)
        calls = self._scripted()
        n = len(self.requests)
        output: list[dict[str, Any]] = [{"type": "message", "id": f"msg_stub{n}", "status": "completed", "role": "assistant",
                                         "content": [{"type": "output_text", "text": REPLY, "annotations": []}]}]
        if calls:
            output = [{"type": "function_call", "id": f"fc_stub{n}_{j}", "call_id": cid, "name": name,
                       "arguments": json.dumps(args), "status": "completed"} for j, (cid, name, args) in enumerate(calls)]
        return {
            "id": f"resp_stub{n}",
            "object": "response",
            "created_at": 1764460800,
            "status": "completed",
            "model": body["model"],
            "instructions": body.get("instructions"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "max_output_tokens": body.get("max_output_tokens"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "error": None,
            "incomplete_details": None,
            "metadata": {},
            "temperature": 1.0,
            "top_p": 1.0,
            "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": _cached(prompt)},
                      "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": prompt + completion},
        }
