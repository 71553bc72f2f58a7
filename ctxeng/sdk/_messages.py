"""Message formats: what an agent holds, turned into candidates, and the payload turned back.

Three shapes come in: OpenAI chat messages (dicts), Anthropic messages (dicts with content blocks,
the system text beside them) and LangChain `BaseMessage`s. All three are first read into one
neutral shape, OpenAI chat dicts, which is what the candidates are built from; the assembled
payload goes back the same way: to neutral OpenAI dicts, then to the caller's shape, with the
caller's own tool-call ids put back where the engine had to rewrite them. A Responses API payload
(`openai_responses`: `instructions` and `input` items) reads back as the same OpenAI chat dicts the
chat adapter would have sent: `function_call` items join the assistant message before them (one
turn's text and calls), each `function_call_output` is a `tool` message.

Defaults per message (DESIGN "The agent side"; docs/sdk.md has the table):

| message | kind | source_type | trust | intended_role | turn |
| system / developer | instruction | system_policy | control_authority | control | - |
| user | user_message | user_request | task_authority | task_intent | its index, user |
| assistant text | assistant_message | model_output | derived_context | derived_context | its index, assistant |
| assistant tool call | a request tool call (`tool_calls[].turn` = its index) | | | | |
| tool result | tool_result | tool_output (or `Session(tool_sources=)`'s) | the policy's default | untrusted_data, or the role the policy's trust for its source type allows (state) | its call's |
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from .errors import SDKError

FORMATS = ("openai", "anthropic", "langchain")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,80}$")


def detect_format(messages: Any, *, system: Any = None) -> str:
    """`openai`, `anthropic` or `langchain`, from the messages' own shape. A history that is both
    (plain user/assistant strings) reads as OpenAI unless a `system=` was given beside it."""
    if isinstance(messages, dict) and "messages" in messages:
        return "anthropic"
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise SDKError("messages: expected a list of messages")
    for m in messages:
        if not isinstance(m, dict):
            if type(m).__module__.startswith("langchain"):
                return "langchain"
            raise SDKError(f"messages: {type(m).__name__} is not a message (dict or LangChain BaseMessage)")
    for m in messages:
        if m.get("role") in ("system", "developer", "tool") or "tool_calls" in m:
            return "openai"
        content = m.get("content")
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in content):
            return "anthropic"
    return "anthropic" if system is not None else "openai"


def to_neutral(messages: Any, fmt: str, *, system: Any = None) -> list[dict[str, Any]]:
    """The history as OpenAI chat dicts, read only: the caller's messages are never changed (an
    OpenAI history is not copied, which cost more than the rest of reading it at every step)."""
    if fmt == "langchain":
        from .langchain import to_openai_messages

        return to_openai_messages(list(messages))
    if fmt == "anthropic":
        if isinstance(messages, dict):
            system = messages.get("system", system)
            messages = messages["messages"]
        return anthropic_to_openai(messages, system)
    if fmt == "openai":
        return list(messages)
    raise SDKError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")


def _text(content: Any, where: str) -> str:
    """The text of a message's content: a string, or text parts joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and (part.get("type") in ("text", "input_text", "output_text")
                                             or ("type" not in part and isinstance(part.get("text"), str))):
                texts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise SDKError(f"{where}[{j}]: only text content is assembled, not {kind!r}")
        return "\n".join(texts)
    raise SDKError(f"{where}: expected a string or a list of text parts")


def anthropic_to_openai(messages: list[dict[str, Any]], system: Any = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": _text(system, "system")})
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        where = f"messages[{i}]"
        if role not in ("user", "assistant"):
            raise SDKError(f"{where}.role: Anthropic messages are 'user' or 'assistant', not {role!r}")
        if content is None:  # Anthropic has no turn without content, not even one that only calls tools
            raise SDKError(_no_content(m, role, where))
        if not isinstance(content, list):
            out.append({"role": role, "content": _text(content, f"{where}.content")})
            continue
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_result":
                out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": _text(block.get("content"), f"{where}.content[{j}].content"),
                            **({"status": "error"} if block.get("is_error") else {})})
            elif kind == "tool_use":
                calls.append({"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input") or {})}})
            elif isinstance(block, str) or kind == "text":
                texts.append(_text([block], f"{where}.content"))
            else:  # named at its own index, not as the first of a list of one
                raise SDKError(f"{where}.content[{j}]: only text content is assembled, not {kind or type(block).__name__!r}")
        if texts or calls:
            msg: dict[str, Any] = {"role": role, "content": "\n".join(texts) if texts else None}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
    return out


def openai_to_anthropic(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """(system text, Anthropic messages) of OpenAI chat dicts, joining same-role neighbours."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def append(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text(m.get("content"), "content"))
        elif role == "tool":
            append("user", [{"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": _text(m.get("content"), "content")}])
        else:
            text = _text(m.get("content"), "content")
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            for call in m.get("tool_calls") or []:
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": json.loads(call["function"]["arguments"] or "{}")})
            append(role, blocks)
    return ("\n\n".join(system) if system else None), out


# --------------------------------------------------------------------------- candidates


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()


def content_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


class Digests:
    """The digests of texts read at earlier steps of a session, the newest `size`: an agent sends
    its whole history at every step, and a message seen before is not hashed again (a text's
    digest is a pure function of it, so the cache changes no id and no hash)."""

    def __init__(self, size: int = 50_000) -> None:
        self._known: OrderedDict[tuple[str, ...], str] = OrderedDict()
        self._size = size

    def _get(self, key: tuple[str, ...], make: Callable[[], str]) -> str:
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = make()
            if len(self._known) > self._size:
                self._known.popitem(last=False)
        return found

    def content_hash(self, text: str) -> str:
        return self._get(("content", text), lambda: content_hash(text))

    def digest(self, *parts: str) -> str:
        return self._get(("digest", *parts), lambda: _digest(*parts))


class MessageItems:
    """The candidates and tool calls of one history, with ids that stay the same across steps.

    A message's item id is its own `id` when it has a usable one (LangChain messages do), else its
    role and a digest of its text, with `-2`, `-3` … for the second and later message with the
    same key in the history: an agent appends to its history, so each message keeps its id from
    step to step and the run timeline follows it."""

    def __init__(self, tool_sources: dict[str, str] | None = None, role_of: Callable[[str], str] | None = None,
                 tools: dict[str, Any] | None = None, subject_scope: Callable[[Any], str] | None = None,
                 digests: Digests | None = None, warned: set[tuple[str, str]] | None = None) -> None:
        self.tool_sources = tool_sources or {}
        # (tool, argument) pairs already warned about: a declared argument a call did not give
        self.warned = warned if warned is not None else set()
        self.digests = digests or Digests()
        # Session(tools=...): which object each declared tool reads or writes (ctxeng.sdk._tools),
        # and the revision of each object as this history has it (successful declared writes so far).
        self.tools = tools or {}
        self.subject_scope = subject_scope
        # The number of successful declared writes of each object in this history (`session.revisions`).
        self.revisions: dict[tuple[str, str], int] = {}
        # What each declared call read or wrote (ctxeng.sdk._tools), judged once per history, in order,
        # with the state the session's declarations keep while they read it (SWE-agent's open file).
        self._effects: dict[int, list[Any]] = {}
        # The role a tool result of a source type takes: the session asks its policy (a policy whose
        # default_by_source makes a tool's output trusted_state places it as state); data otherwise.
        self.role_of = role_of or (lambda source_type: "untrusted_data")
        self.candidates: list[dict[str, Any]] = []
        self.tool_calls: list[dict[str, Any]] = []
        self._seen: dict[str, int] = {}
        self._reused: dict[str, int] = {}  # a call id the history reuses -> how many calls used it so far

    def _item_id(self, message: dict[str, Any], role: str, text: str) -> str:
        own = message.get("id")
        base = f"msg-{own}" if isinstance(own, str) and _SAFE_ID.match(own) else f"{role}-{self.digests.digest(role, text)[:16]}"
        n = self._seen.get(base, 0) + 1
        self._seen[base] = n
        return base if n == 1 else f"{base}-{n}"

    def read(self, messages: list[dict[str, Any]], *, relevance_from: int = 0) -> None:
        calls_by_id: dict[str, dict[str, Any]] = {}
        total = max(len(messages), 1)
        first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
        current = self._newest_test_logs(messages)
        editing = self._declared_effects(messages) if self.tools else set()
        for i, m in enumerate(messages):
            where = f"messages[{i}]"
            role = m.get("role")
            if m.get("content") is None:
                _check_content(m, role, where)
            # Newer turns rank higher, so a budget that must drop history drops the oldest first;
            # the first user message (the task as the user stated it) ranks with the newest, and so
            # does the newest test log of each tool (the suite's current failures, until it runs
            # again). The newest reading of each object a declared tool writes (the file about to be
            # edited) ranks above every other result, still newest first.
            recency = 1.0 if i == first_user or i in current else round(0.5 + 0.4 * (i + 1) / total, 6)
            if i in editing:
                recency = round(0.9 + 0.1 * (i + 1) / total, 6)
            if role == "user" and i != first_user:
                # The user's turns are the task as it changes (new items, approvals, corrections):
                # each ranks above every turn of the agent's and every older result, still newest
                # first, so the agent's own narration and older output go before what the user asked.
                recency = round(0.9 + 0.1 * (i + 1) / total, 6)
            if role in ("system", "developer"):
                text = _text(m.get("content"), f"{where}.content")
                self._add(m, "system", text, kind="instruction", source_type="system_policy", trust="control_authority",
                          intended_role="control", ref_key="object_id")
            elif role == "user":
                text = _text(m.get("content"), f"{where}.content")
                self._add(m, "user", text, kind="user_message", source_type="user_request", trust="task_authority",
                          intended_role="task_intent", ref_key="object_id", turn={"index": i, "speaker": "user"}, relevance=recency)
            elif role == "assistant":
                text = _text(m.get("content"), f"{where}.content")
                if text.strip():
                    self._add(m, "assistant", text, kind="assistant_message", source_type="model_output", trust="derived_context",
                              intended_role="derived_context", ref_key="message_id", turn={"index": i, "speaker": "assistant"}, relevance=recency)
                for j, call in enumerate(_tool_calls(m)):
                    self._call(call, i, f"{where}.tool_calls[{j}]", calls_by_id)
            elif role == "tool":
                self._result(m, where, calls_by_id, recency, i)
            else:
                raise SDKError(f"{where}.role: {role!r} is not system, developer, user, assistant or tool")

    def _newest_test_logs(self, messages: list[dict[str, Any]]) -> set[int]:
        """Indexes of the newest result of each tool whose results are test logs (`tool_sources`)."""
        names: dict[Any, Any] = {}
        newest: dict[Any, int] = {}
        for i, m in enumerate(messages):
            if m.get("role") == "assistant":
                for call in m.get("tool_calls") or []:
                    if isinstance(call, dict):
                        names[call.get("id")] = (call.get("function") or {}).get("name")
            elif m.get("role") == "tool":
                name = names.get(m.get("tool_call_id"))
                if self.tool_sources.get(name) == "test_log":
                    newest[name] = i
        return set(newest.values())

    def _declared_effects(self, messages: list[dict[str, Any]]) -> set[int]:
        """What each declared tool's call read or wrote, in history order (declarations may keep
        state from call to call), keyed by its result's index; returns the indexes of the newest
        reading of each object a declared tool can change (`Session(tools=)`: what the agent works
        on, ranked above other results)."""
        from ._tools import Call

        state: dict[str, Any] = {}
        calls: dict[Any, list[tuple[Any, dict[str, Any]]]] = {}
        newest: dict[Any, int] = {}
        writable = any(d.writes_objects for d in self.tools.values())
        for i, m in enumerate(messages):
            if m.get("role") == "assistant":
                for call in _tool_calls(m):
                    if isinstance(call, dict):
                        function = call.get("function") or {}
                        args = _arguments(function.get("arguments"))
                        calls.setdefault(call.get("id"), []).append((function.get("name"), args if isinstance(args, dict) else {}))
            elif m.get("role") == "tool":
                pending = calls.get(_result_call_id(m))
                if not pending:
                    continue  # read() names the unpaired result
                name, args = pending.pop(0)
                declared = self.tools.get(name)
                if declared is None:
                    continue
                status = m.get("status") if m.get("status") in _STATUSES else "success"
                try:
                    text = _text(m.get("content"), "content")
                except SDKError:
                    continue  # read() names the bad content
                found = declared.effects(Call(name, args, text, status, state))
                self._effects[i] = found
                self._warn_missing(name, declared, args)
                if writable and status in ("success", "partial"):
                    for e in found:
                        if e.access == "read":
                            newest[e.key] = i
        return set(newest.values())

    def _warn_missing(self, name: Any, declared: Any, args: dict[str, Any]) -> None:
        """A declared argument a call does not give names no object: the call claims nothing. Said once
        per tool and argument, since it usually means the declaration names the wrong argument."""
        for arg in getattr(declared, "names", ()):
            if arg not in args and (str(name), arg) not in self.warned:
                self.warned.add((str(name), arg))
                warnings.warn(f"tools.{name}: a call gave no argument {arg!r}, which its declaration names (it gave: "
                              f"{', '.join(args) or 'none'}); the call reads or writes nothing", stacklevel=4)

    def _add(self, message: dict[str, Any], role: str, text: str, *, ref_key: str, **fields: Any) -> dict[str, Any]:
        item_id = self._item_id(message, role, text)
        cand = {"item_id": item_id, "content": text, "content_hash": self.digests.content_hash(text), "source_ref": {ref_key: item_id},
                **fields}
        self.candidates.append(cand)
        return cand

    def _call(self, call: dict[str, Any], index: int, where: str, calls_by_id: dict[str, dict[str, Any]]) -> None:
        call_id = call.get("id")
        function = call.get("function") or {}
        if not isinstance(call_id, str) or not call_id:
            raise SDKError(f"{where}.id: a tool call needs its id (it pairs the call with its result)")
        caller_id = None
        earlier = calls_by_id.get(call_id)
        if earlier is not None:
            if earlier["turn"] == index or not earlier.get("result_item_id"):
                # Two calls with one id in one turn, or before the first is answered: no result could say which it answers.
                raise SDKError(f"{where}.id: call id {call_id!r} is used twice before a result answers the first")
            # Real agents reuse ids across turns (SWE-agent): the call is paired by position (the
            # results after it answer it) and named apart in the request; the payload carries a
            # distinct id and step.messages the caller's (the manifest's tool pair records both).
            self._reused[call_id] = self._reused.get(call_id, 1) + 1
            caller_id, call_id = call_id, f"{call_id}#{self._reused[call_id]}"
        raw = function.get("arguments")
        try:
            # Arguments given as a dict are copied: the request must not share the caller's object.
            arguments = json.loads(raw) if isinstance(raw, str) and raw.strip() else copy.deepcopy(raw or {})
        except ValueError:
            raise SDKError(f"{where}.function.arguments: not JSON: {raw[:60]!r}") from None
        if not isinstance(arguments, dict):
            raise SDKError(f"{where}.function.arguments: must be a JSON object")
        entry = {"call_id": call_id, "tool_name": function.get("name"), "arguments": arguments, "status": "unknown", "turn": index}
        if caller_id is not None:
            entry["caller_call_id"] = caller_id
        calls_by_id[caller_id or call_id] = entry
        self.tool_calls.append(entry)

    def _result(self, message: dict[str, Any], where: str, calls_by_id: dict[str, dict[str, Any]], recency: float,
                index: int) -> None:
        call_id = _result_call_id(message)
        call = calls_by_id.get(call_id) if isinstance(call_id, str) else None
        if call is None:
            field = "tool_call_id" if "tool_call_id" in message or "tool_call_ids" not in message else "tool_call_ids"
            raise SDKError(f"{where}.{field}: no earlier assistant tool call has id {call_id!r}")
        if call.get("result_item_id"):
            raise SDKError(f"{where}.tool_call_id: call {call_id!r} already has a result")
        call_id = call["call_id"]  # the request's own id (a reused id named apart)
        text = _text(message.get("content"), f"{where}.content")
        item_id = f"result-{self.digests.digest(call_id)[:16]}"
        source_type = self.tool_sources.get(call["tool_name"], "tool_output")
        ref = {"call_id": call_id, "tool_name": call["tool_name"]}
        if source_type == "test_log":  # the whole log's identity, which its reduction keeps (failures + artifact ref)
            ref["artifact_id"] = f"log-{item_id.removeprefix('result-')}"
        elif source_type == "runtime_state":  # state is located by an object id (the call that read it)
            ref["object_id"] = item_id
        status = message.get("status") if message.get("status") in _STATUSES else "success"
        cand = {
            "item_id": item_id,
            "kind": "tool_result",
            "source_type": source_type,
            "intended_role": self.role_of(source_type),
            "content": text,
            "content_hash": self.digests.content_hash(text),
            "source_ref": ref,
            "call_id": call_id,
            "relevance": recency,
        }
        declared = self.tools.get(call["tool_name"])
        if declared is not None:
            self._declared(cand, declared, call, text, status, index)
        self.candidates.append(cand)
        call["result_item_id"] = item_id
        call["status"] = status

    def _declared(self, cand: dict[str, Any], declared: Any, call: dict[str, Any], text: str, status: str, index: int) -> None:
        """A declared tool's result: the objects it read (with their parts) or wrote, and the subject's
        scope (`about`). A failed call reads and writes nothing (its result is only an error)."""
        from ._tools import Call

        found = self._effects.get(index, [])
        if status not in ("success", "partial"):
            found = []
        elif status == "partial":
            found = [e for e in found if e.access == "read"]
        for e in found:
            if e.access == "write":
                self.revisions[e.key[0]] = self.revisions.get(e.key[0], 0) + 1
        if len(found) == 1:
            cand["source_ref"].update(found[0].source_ref())
        elif found:
            cand["source_ref"]["objects"] = [e.source_ref() | {"access": e.access} for e in found]
        subject = declared.subject(Call(call["tool_name"], call["arguments"], text, status))
        if subject is not None:
            scope = declared.scope or self.subject_scope
            if scope is not None:
                cand["scope"] = scope(subject)


_STATUSES = ("success", "error", "canceled", "partial", "unknown")


def _check_content(message: dict[str, Any], role: Any, where: str) -> None:
    """A message without content is refused, naming what it has instead: a text under a key no
    provider reads (`text`, `message`) would otherwise be read as empty, and lost without a word.
    Only an assistant turn that made tool calls may carry no text; extra keys beside `content`
    (SWE-agent's `thought`, mini-swe-agent's `extra`) are never looked at."""
    if role == "assistant" and ("content" in message or _tool_calls(message)):
        return
    if role not in ("system", "developer", "user", "assistant", "tool"):
        return  # read() names the role
    raise SDKError(_no_content(message, role, where))


def _no_content(message: dict[str, Any], role: Any, where: str) -> str:
    if "content" in message:
        return f"{where}.content: is None; a {role} message needs its text"
    found = ", ".join(repr(k) for k in message if k != "role") or "no other key"
    return f"{where}: no 'content' (found {found})"


def _tool_calls(message: dict[str, Any]) -> list[Any]:
    calls = message.get("tool_calls")
    return calls if isinstance(calls, list) else []


def _result_call_id(message: dict[str, Any]) -> Any:
    """The call a tool message answers: `tool_call_id`, or SWE-agent's one-element `tool_call_ids`."""
    if "tool_call_id" in message or "tool_call_ids" not in message:
        return message.get("tool_call_id")
    ids = message.get("tool_call_ids")
    if isinstance(ids, str):  # SWE-agent trajectories may store the list as its repr
        ids = [p.strip(" '\"") for p in ids.strip("[]").split(",") if p.strip(" '\"")]
    return ids[0] if isinstance(ids, list) and len(ids) == 1 else None


def _arguments(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
    except ValueError:
        return {}


_CLIENT_TOOL = re.compile(r"^(text_editor|bash)_[0-9]{8}$")
_STR = {"type": "string"}
_CLIENT_TOOL_SCHEMAS = {
    "text_editor": {"type": "object", "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"]}, "path": _STR,
        "view_range": {"type": "array", "items": {"type": "integer"}}, "file_text": _STR, "old_str": _STR, "new_str": _STR,
        "insert_line": {"type": "integer"}, "insert_text": _STR}, "required": ["command", "path"]},
    "bash": {"type": "object", "properties": {"command": _STR, "restart": {"type": "boolean"}}},
}


def tool_definitions(tools: Any) -> list[dict[str, Any]]:
    """`{name, description, parameters}` of OpenAI, Anthropic or plain tool dicts."""
    out = []
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict):
            raise SDKError(f"tools[{i}]: expected a tool dict (OpenAI, Anthropic or {{name, description, parameters}})")
        kind = tool.get("type")
        if isinstance(kind, str) and _CLIENT_TOOL.match(kind) and tool.get("name"):
            # Anthropic's client tools (the text editor, bash) run in the agent: their schema is Anthropic's.
            out.append({"name": tool["name"], "description": "", "type": kind,
                        "parameters": _CLIENT_TOOL_SCHEMAS[kind.rsplit("_", 1)[0]]})
            continue
        if kind not in (None, "function") and not (kind == "custom" and "input_schema" in tool):
            # A provider built-in ({"type": "web_search"}, Anthropic's {"type": "web_search_20250305",
            # "name": ...}) runs on the provider's side: it is not a function the engine can define.
            raise SDKError(f"tools[{i}].type: {kind!r} is a provider built-in tool, which ctxeng does not assemble; "
                           "pass function tools here and add the built-in to the provider call yourself")
        spec = tool.get("function") if kind == "function" and isinstance(tool.get("function"), dict) else tool
        if not spec.get("name"):
            raise SDKError(f"tools[{i}].name: field required")
        parameters = spec.get("parameters", spec.get("input_schema")) or {"type": "object", "properties": {}}
        out.append({"name": spec["name"], "description": spec.get("description") or "", "parameters": parameters})
    return out


# --------------------------------------------------------------------------- the payload, back


def restore_call_ids(payload: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """A copy of the payload with each serialized call id replaced by the caller's own."""
    back = {p["serialized_call_id"]: p.get("caller_call_id") or p["call_id"] for p in manifest.get("tool_pairs", [])}
    out = copy.deepcopy(payload)
    for item in out.get("input", []):  # Responses: function_call and function_call_output items
        if item.get("type") in ("function_call", "function_call_output"):
            item["call_id"] = back.get(item["call_id"], item["call_id"])
    for m in out.get("messages", []):
        for call in m.get("tool_calls") or []:
            call["id"] = back.get(call["id"], call["id"])
        if m.get("role") == "tool":
            m["tool_call_id"] = back.get(m["tool_call_id"], m["tool_call_id"])
        if isinstance(m.get("content"), list):
            for block in m["content"]:
                if block.get("type") == "tool_use":
                    block["id"] = back.get(block["id"], block["id"])
                elif block.get("type") == "tool_result":
                    block["tool_use_id"] = back.get(block["tool_use_id"], block["tool_use_id"])
    return out


def payload_as_openai(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The payload's messages as OpenAI chat dicts, system first, for each adapter's payload."""
    if "input" in payload:
        return responses_to_openai(payload)
    if "system" in payload:
        return anthropic_to_openai(payload["messages"], payload_system(payload["system"]))
    return copy.deepcopy(payload["messages"])


def payload_system(system: Any) -> str:
    """Anthropic's `system` as text: a string, or the text blocks a cache breakpoint splits it
    into, joined by the engine's system separator (so it reads as the chat adapter's system text)."""
    return system if isinstance(system, str) else "\n\n".join(b.get("text", "") for b in system)


def responses_to_openai(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses payload's `instructions` and `input` items as OpenAI chat dicts."""
    out: list[dict[str, Any]] = []
    if payload.get("instructions"):
        out.append({"role": "system", "content": payload["instructions"]})
    for i, item in enumerate(payload["input"]):
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": _text(item.get("output"), f"input[{i}].output")})
        elif item.get("role") == "assistant":
            out.append({"role": "assistant", "content": _text(item.get("content"), f"input[{i}].content")})
        else:
            # One text is the caller's own string, as the chat adapter sends a one-text user turn.
            content = item.get("content")
            if isinstance(content, list) and len(content) == 1:
                content = content[0].get("text", "")
            parts = content if isinstance(content, str) else [{"type": "text", "text": p.get("text", "")} for p in content]
            out.append({"role": item.get("role"), "content": parts})
    return out


def in_format(payload: dict[str, Any], fmt: str) -> tuple[str | None, list[Any]]:
    """(system text, messages) of a payload (caller ids already restored) in the caller's format.
    OpenAI and LangChain messages carry the system message first; Anthropic's stand beside it."""
    if fmt == "anthropic":
        if "system" in payload:
            return payload_system(payload["system"]), copy.deepcopy(payload["messages"])
        return openai_to_anthropic(payload_as_openai(payload))
    messages = payload_as_openai(payload)
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
    if fmt == "langchain":
        from .langchain import from_openai_messages

        return system, from_openai_messages(messages)
    return system, messages
