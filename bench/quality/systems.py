"""The four systems, each fed the same events as plain messages, configured as its docs say.

All four see the same events, in order, as the same messages (a system message, user turns, the
agent's replies with their tool calls, each tool result as its call's tool message; the research
run's runtime state as a user message `[runtime state: <part>]`), at the same model (`gpt-4o`,
OpenAI chat) and context limit, and leave the same room for the answer: the starter policy's
`response_reserve` (12.5% of the window, held to 1024-16384 tokens for coding-agent and
research-agent, 1024-8192 for chat-agent), so each baseline trims to `context_limit - reserve`.
Every count is o200k_base, gpt-4o's own encoding (`measure.message_tokens`, OpenAI's recipe), the
counter every baseline is given. No system gets anything split, deduplicated, dated or scoped by
the harness.

What each system is told, once:

- `ctxeng`: `sdk.Session(<starter>, model=..., tools=DECLARATIONS[scenario],
  tool_sources={"run_tests": "test_log"})`: which tools read or write which object (`sdk.reads`,
  `sdk.writes`) and whose data a tool's result is (`sdk.about`, the scope of the account argument:
  `<tenant>/<account>`, the SDK's default), as a user would declare them for their agent's tools.
  Everything else is what the SDK infers from the messages. The starter: chat-agent for support,
  coding-agent for coding and research (an agent reading repositories and running their tests; the
  research-agent starter requires its goal, manifest, constraints and stage as typed resident
  items, which a plain-message history does not have: every step would be blocked).
- `ctxeng_research_agent` (the research run only): the research-agent starter itself, the run's
  runtime state given as the state parts it requires (`sdk.goal`, `sdk.hard_constraints`,
  `sdk.current_stage`, and the manifest and open items as candidate dicts of those kinds, so their
  text, markers included, is the run's), the newest of each part at every step, not as a message.
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
import json
import time
from typing import Any

from . import measure

RESERVE_MAX = {"coding-agent": 16384, "research-agent": 16384, "chat-agent": 8192}
SYSTEMS = ("ctxeng", "trim_messages", "context_editing", "naive")
# Systems run for one scenario only: the research run under its own starter (the builders give it
# the state parts a plain-message history does not have).
EXTRA_SYSTEMS = {"research": ("ctxeng_research_agent",)}
ALL_SYSTEMS = SYSTEMS + tuple(name for extra in EXTRA_SYSTEMS.values() for name in extra)
AGENT_STARTER = {"ctxeng_research_agent": "research-agent"}
STARTER = {"coding": "coding-agent", "research": "coding-agent", "support": "chat-agent"}
PRINCIPALS = {
    "coding": {"id": "coding-agent", "tenant": "acme", "project": "api"},
    "research": {"id": "research-agent/v2", "tenant": "tenant-x", "project": "project-y"},
    "support": {"id": "support-agent", "tenant": "acme-support", "project": "customer-4411"},
}


def declarations(name: str) -> dict[str, Any]:
    """The tool declarations of each scenario's agent (`Session(tools=...)`)."""
    from ctxeng import sdk

    return {
        "coding": {"read_file": sdk.reads("path"), "edit_file": sdk.writes("path"), "read_plan": sdk.reads("path"),
                   "write_plan": sdk.writes("path", replaces=True),
                   "fetch_url": sdk.reads("url")},
        "research": {"read_source": sdk.reads("path"), "read_file": sdk.reads("path"), "read_plan": sdk.reads("artifact_id"),
                     "fetch_url": sdk.reads("url")},
        "support": {"get_order": sdk.reads("order_id"), "crm_notes": sdk.about("account"),
                    "get_subscription": sdk.about("account"), "crm_get": sdk.about("account")},
    }[name]


def reserve(scenario_name: str, context_limit: int) -> int:
    return min(max(context_limit // 8, 1024), RESERVE_MAX[STARTER[scenario_name]])


def _lc_counter():
    """An o200k counter of LangChain messages with OpenAI's recipe, cached per message text."""
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
        self.usable = context_limit - reserve(scenario["scenario"], context_limit)
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
    """The scenario's agent using the SDK: its plain message history and its Session."""

    def __init__(self, scenario: dict[str, Any], context_limit: int, *, starter: str | None = None) -> None:
        from ctxeng import sdk

        self.name = scenario["scenario"]
        self.starter = starter or STARTER[self.name]
        # Under a starter that requires the state parts they are items (the newest of each), not messages.
        self.state_parts = self.starter == "research-agent"
        self.state: dict[str, Any] = {}
        self.session = sdk.Session(self.starter, model={"name": "gpt-4o", "provider": "openai", "context_limit": context_limit},
                                   principal=PRINCIPALS[self.name], run_id=f"quality-{self.name}-{context_limit}",
                                   tools=declarations(self.name), tool_sources={"run_tests": "test_log"})
        self.messages: list[dict[str, Any]] = []

    def add(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind in ("system", "user"):
            self.messages.append({"role": kind, "content": event["text"]})
        elif kind == "state" and self.state_parts:
            self.state[event["part"]] = state_part(event["part"], event["text"])
        elif kind == "state":
            self.messages.append({"role": "user", "content": f"[runtime state: {event['part']}]\n{event['text']}"})
        elif kind == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": event["text"] or None}
            if event["calls"]:
                message["tool_calls"] = [{"id": c["id"], "type": "function",
                                          "function": {"name": c["name"], "arguments": json.dumps(c["args"])}} for c in event["calls"]]
            self.messages.append(message)
        elif kind == "result":
            self.messages.append({"role": "tool", "tool_call_id": event["call_id"], "content": event["text"]})


def state_part(part: str, text: str) -> Any:
    """One runtime-state event as the state part the research-agent starter requires."""
    from ctxeng import sdk

    builders = {"goal": sdk.goal, "hard_constraints": sdk.hard_constraints, "current_stage": sdk.current_stage}
    if part in builders:
        return builders[part](text)
    # The manifest and the open items carry the run's own text (a marker each), which the builders
    # would re-format: the builder's candidate, its content the run's.
    built = sdk.repository_manifest({"repo": "0" * 40}) if part == "required_repository_manifest" else sdk.open_items({"x": "x"})
    fields = {k: v for k, v in built.fields.items() if k not in ("content", "content_hash", "open_item_ids")}
    return {**fields, "content": text}


def run_scenario(scenario: dict[str, Any], context_limit: int, *, systems=SYSTEMS, max_steps: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every step of `scenario` through each system: {system: [per-step score + ms]}."""
    baselines = Baselines(scenario, context_limit) if set(systems) - {"ctxeng", *AGENT_STARTER} else None
    agents = {name: CtxengAgent(scenario, context_limit, starter=AGENT_STARTER.get(name))
              for name in systems if name == "ctxeng" or name in AGENT_STARTER}
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    for step in scenario["steps"][:max_steps]:
        for event in step["events"]:
            if baselines is not None:
                baselines.add(event)
            for agent in agents.values():
                agent.add(event)
        history_tokens = baselines.counter(baselines.history) if baselines is not None else 0
        for name in systems:
            extra: dict[str, Any] = {}
            if name in agents:  # timed: the SDK step (request, engine, payload)
                agent = agents[name]
                started = time.perf_counter()
                sdk_step = agent.session.step(agent.messages, items=list(agent.state.values()))
                ms = (time.perf_counter() - started) * 1000
                messages = sdk_step.kwargs["messages"] if sdk_step.ready else None
                extra["usable_input"] = sdk_step.manifest["budget"]["usable_input"]
                if messages is None:
                    extra["blocked_reason"] = sdk_step.blocked_reason
            else:  # timed: the baseline's own call; not the conversion to OpenAI dicts the model client makes
                started = time.perf_counter()
                kept = getattr(baselines, name)()
                ms = (time.perf_counter() - started) * 1000
                messages = baselines.openai(kept)  # type: ignore[union-attr]
            row = measure.score(messages, step, context_limit=context_limit)
            row["history_tokens"] = history_tokens  # the whole history as plain messages: what fits or not
            out[name].append({"step": step["index"], "ms": round(ms, 2), **row, **extra})
    return out
