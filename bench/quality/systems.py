"""The four systems, each fed a scenario's events the way its users feed it.

All four see the same events, in order, at the same model (`gpt-4o`, OpenAI chat) and context
limit, and leave the same room for the answer: the starter policy's `response_reserve` (12.5% of
the window, held to 1024-16384 tokens for coding-agent and research-agent, 1024-8192 for
chat-agent), so each baseline trims to `context_limit - reserve`. Every count is exact cl100k
(`measure.message_tokens`, OpenAI's recipe), the counter every baseline is given.

How an event reaches each system:

| event | baselines (plain messages) | ctxeng (SDK) |
| --- | --- | --- |
| system prompt | system message | system message (control) |
| user turn | human message | user message |
| the agent's reply and its tool calls | AI message with tool calls | assistant message with tool calls |
| tool result (grep, test log, status ...) | tool message, completion order | tool message; `run_tests` results are test logs (`Session(tool_sources={"run_tests": "test_log"})`) |
| tool result that is a file, page, memory, plan or CRM record | tool message with the whole text | tool message saying `delivered as context item <id>`, and the text as that builder's item (`sdk.code` at the repository's commit, `sdk.web` with `freshness="expired"` once its max age has passed, `sdk.file`, `sdk.memory(..., scope=<its project's scope>)`, `sdk.plan`, a CRM record as `sdk.file(..., scope=<its account's scope>)`) |
| runtime state (research: goal, manifest, constraints, stage, open items) | a user message `[runtime state: <part>]` | an item of that kind (`goal`, `required_repository_manifest`, `hard_constraints`: task intent; `current_stage`, `open_items_summary`: state), its newest value each step |

The SDK user holds the newest revision of what it was given (the latest read of each file, the
current plan) and passes every held item at every step with a recency relevance (0.5 for the
first seen to 1.0 for this step's), as the SDK gives its own turns.

- `trim_messages`: langchain-core `trim_messages(strategy="last", include_system=True,
  start_on="human", max_tokens=context_limit - reserve)` on the whole history.
- `context_editing`: LangChain v1 `ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=
  context_limit - reserve)])` (its defaults otherwise: keep the 3 newest tool results, clear the
  rest to `[cleared]`), driven through `wrap_model_call` with a `ModelRequest` holding a fake chat
  model; the payload is the request its handler receives.
- `naive`: the whole history, the oldest non-system messages dropped one at a time until it fits.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from . import measure

RESERVE_MAX = {"coding-agent": 16384, "research-agent": 16384, "chat-agent": 8192}
SYSTEMS = ("ctxeng", "trim_messages", "context_editing", "naive")
STATE_KINDS = {
    "goal": ("user_request", "task_intent"),
    "required_repository_manifest": ("user_request", "task_intent"),
    "hard_constraints": ("user_request", "task_intent"),
    "current_stage": ("runtime_state", "state"),
    "open_items_summary": ("runtime_state", "state"),
}
PRINCIPALS = {
    "coding": {"id": "coding-agent", "tenant": "acme", "project": "api"},
    "research": {"id": "research-agent/v2", "tenant": "tenant-x", "project": "project-y"},
    "support": {"id": "support-agent", "tenant": "acme-support", "project": "customer-4411"},
}
OTHER_SCOPES = {"other_project": "acme/billing", "other_tenant": "tenant-z/project-q/task-9"}


def reserve(starter: str, context_limit: int) -> int:
    return min(max(context_limit // 8, 1024), RESERVE_MAX[starter])


def _lc_counter():
    """A cl100k counter of LangChain messages with OpenAI's recipe, cached per message text."""
    import json

    cache: dict[tuple, int] = {}

    def one(m) -> int:
        calls = tuple((c["name"], json.dumps(c["args"])) for c in getattr(m, "tool_calls", None) or ())
        key = (m.id, m.content if isinstance(m.content, str) else str(m.content), calls)
        n = cache.get(key)
        if n is None:
            text = m.content if isinstance(m.content, str) else measure.content_text(m.content)
            n = cache[key] = 3 + measure.count(text) + sum(measure.count(a) + measure.count(b) for a, b in calls)
        return n

    def counter(messages) -> int:
        return 3 + sum(one(m) for m in messages)

    counter.one = one  # type: ignore[attr-defined]
    return counter


class Baselines:
    """The history as LangChain messages, and the three baselines over it."""

    def __init__(self, scenario: dict[str, Any], context_limit: int) -> None:
        self.limit = context_limit
        self.usable = context_limit - reserve(scenario["starter"], context_limit)
        self.history: list[Any] = []
        self.counter = _lc_counter()
        self.n = 0

    def add(self, event: dict[str, Any]) -> None:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

        self.n += 1
        mid = f"m{self.n}"
        kind = event["type"]
        if kind == "system":
            self.history.append(SystemMessage(event["text"], id=mid))
        elif kind == "user":
            self.history.append(HumanMessage(event["text"], id=mid))
        elif kind == "state":
            self.history.append(HumanMessage(f"[runtime state: {event['part']}]\n{event['text']}", id=mid))
        elif kind == "assistant":
            calls = [{"id": c["id"], "name": c["name"], "args": c["args"], "type": "tool_call"} for c in event["calls"]]
            self.history.append(AIMessage(event["text"], tool_calls=calls, id=mid))
        elif kind == "result":
            self.history.append(ToolMessage(event["text"], tool_call_id=event["call_id"], name=event["name"], id=mid))

    @staticmethod
    def openai(messages: list[Any]) -> list[dict[str, Any]]:
        from langchain_core.messages import convert_to_openai_messages

        return convert_to_openai_messages(messages)

    def trim_messages(self) -> list[Any]:
        from langchain_core.messages import trim_messages

        return trim_messages(self.history, max_tokens=self.usable, token_counter=self.counter, strategy="last",
                             include_system=True, start_on="human")

    def context_editing(self) -> list[Any]:
        from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware
        from langchain.agents.middleware.types import ModelRequest, ModelResponse
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage, SystemMessage

        system = self.history[0] if isinstance(self.history[0], SystemMessage) else None
        rest = self.history[1:] if system is not None else list(self.history)
        system_tokens = self.counter.one(system) if system is not None else 0  # type: ignore[attr-defined]

        def count(messages) -> int:  # what the model would be sent: the system message too
            return self.counter(messages) + system_tokens

        middleware = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=self.usable)], token_counter=count)
        model = GenericFakeChatModel(messages=itertools.repeat(AIMessage("ok")))
        seen: dict[str, Any] = {}

        def handler(request):
            seen["messages"] = ([request.system_message] if request.system_message else []) + list(request.messages)
            return ModelResponse(result=[request.model.invoke(seen["messages"])])

        middleware.wrap_model_call(ModelRequest(model=model, messages=rest, system_message=system), handler)
        return seen["messages"]

    def naive(self) -> list[Any]:
        from langchain_core.messages import SystemMessage

        system = [self.history[0]] if isinstance(self.history[0], SystemMessage) else []
        rest = self.history[len(system):]
        total = self.counter(system + rest)
        start = 0
        while total > self.usable and start < len(rest):
            total -= self.counter.one(rest[start])  # type: ignore[attr-defined]
            start += 1
        return system + rest[start:]


class CtxengAgent:
    """The scenario's agent using the SDK: its message history, and the items it holds."""

    def __init__(self, scenario: dict[str, Any], context_limit: int) -> None:
        from ctxeng import sdk

        self.sdk = sdk
        self.name = scenario["scenario"]
        self.principal = PRINCIPALS[self.name]
        self.session = sdk.Session(scenario["starter"], model={"name": "gpt-4o", "provider": "openai", "context_limit": context_limit},
                                   principal=self.principal, run_id=f"quality-{self.name}-{context_limit}",
                                   tool_sources={"run_tests": "test_log"})
        self.messages: list[dict[str, Any]] = []
        self.held: dict[str, tuple[int, dict[str, Any], str, str]] = {}  # key -> (step seen, spec, text, item_id)
        self.state: dict[str, str] = {}
        self.step_index = 0

    def add(self, event: dict[str, Any], step_index: int) -> None:
        kind = event["type"]
        if kind in ("system", "user"):
            self.messages.append({"role": kind, "content": event["text"]})
        elif kind == "state":
            self.state[event["part"]] = event["text"]
        elif kind == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": event["text"] or None}
            if event["calls"]:
                import json

                message["tool_calls"] = [{"id": c["id"], "type": "function",
                                          "function": {"name": c["name"], "arguments": json.dumps(c["args"])}} for c in event["calls"]]
            self.messages.append(message)
        elif kind == "result":
            text = event["text"]
            if event.get("deliver"):
                ids = []
                lines = text.split("\n")
                for spec in event["deliver"]:
                    body = lines[spec["line"]] if spec["builder"] == "record" else text
                    key, item_id = self._key(spec)
                    self.held[key] = (step_index, spec, body, item_id)
                    ids.append(item_id)
                text = f"{event['name']}: delivered as context item {', '.join(ids)}"
            self.messages.append({"role": "tool", "tool_call_id": event["call_id"], "content": text})

    @staticmethod
    def _key(spec: dict[str, Any]) -> tuple[str, str]:
        b = spec["builder"]
        if b == "code":
            key = f"code:{spec['repo']}:{spec['path']}:{spec['lines']}"
        elif b == "web":
            key = f"web:{spec['url']}"
        elif b == "plan":
            key = f"plan:{spec['plan_id']}"  # the current revision replaces the one before
        elif b == "record":
            key = f"record:{spec['account']}"
        elif b == "memory":
            key = f"memory:{spec['memory_id']}"
        else:
            key = f"file:{spec['path']}"
        import hashlib

        return key, "held-" + hashlib.sha256(key.encode()).hexdigest()[:12]

    def items(self, step_index: int) -> list[Any]:
        sdk = self.sdk
        out: list[Any] = []
        for part, text in self.state.items():
            source_type, role = STATE_KINDS[part]
            out.append({"item_id": f"state-{part}", "kind": part, "source_type": source_type,
                        "source_ref": {"object_id": f"state-{part}"}, "content": text, "intended_role": role})
        for seen, spec, text, _ in self.held.values():
            relevance = round(0.5 + 0.5 * seen / step_index, 6)
            b = spec["builder"]
            if b == "code":
                out.append(sdk.code(spec["repo"], spec["commit"], spec["path"], spec["lines"], text, relevance=relevance))
            elif b == "web":
                expired = step_index >= seen + spec["max_age_steps"]
                out.append(sdk.web(spec["url"], text, fetched_at="2026-09-06T10:00:00Z", relevance=relevance,
                                   freshness="expired" if expired else "valid"))
            elif b == "plan":
                extra = {"kind": spec["kind"]} if spec.get("kind") else {}
                out.append(sdk.plan(text, spec["plan_id"], spec["revision"], relevance=relevance, **extra))
            elif b == "memory":
                out.append(sdk.memory(text, spec["memory_id"], scope=OTHER_SCOPES[spec["scope"]], relevance=relevance))
            elif b == "record":
                out.append(sdk.file(f"crm/{spec['account']}.json", text, scope=spec["scope"], relevance=relevance))
            else:
                out.append(sdk.file(spec["path"], text, relevance=relevance))
        return out


def run_scenario(scenario: dict[str, Any], context_limit: int, *, systems=SYSTEMS, max_steps: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every step of `scenario` through each system: {system: [per-step score + ms]}."""
    baselines = Baselines(scenario, context_limit) if set(systems) - {"ctxeng"} else None
    agent = CtxengAgent(scenario, context_limit) if "ctxeng" in systems else None
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    for step in scenario["steps"][:max_steps]:
        for event in step["events"]:
            if baselines is not None:
                baselines.add(event)
            if agent is not None:
                agent.add(event, step["index"])
        for name in systems:
            extra: dict[str, Any] = {}
            if name == "ctxeng":  # timed: the SDK step (request, engine, payload); not building the items
                items = agent.items(step["index"])  # type: ignore[union-attr]
                started = time.perf_counter()
                sdk_step = agent.session.step(agent.messages, items=items)  # type: ignore[union-attr]
                ms = (time.perf_counter() - started) * 1000
                messages = sdk_step.kwargs["messages"] if sdk_step.ready else None
                if messages is None:
                    extra["blocked_reason"] = sdk_step.blocked_reason
            else:  # timed: the baseline's own call; not the conversion to OpenAI dicts the model client makes
                started = time.perf_counter()
                kept = getattr(baselines, name)()
                ms = (time.perf_counter() - started) * 1000
                messages = baselines.openai(kept)  # type: ignore[union-attr]
            row = measure.score(messages, step, context_limit=context_limit)
            out[name].append({"step": step["index"], "ms": round(ms, 2), **row, **extra})
    return out
