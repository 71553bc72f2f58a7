"""Benchmark 2 — against what users do today: langchain-core's `trim_messages`.

The same 2,000 candidates as benchmark 1, as langchain messages (a system message, then one human
or tool message per candidate, tool results after an AI message carrying their calls), trimmed
with `strategy="last"` and a per-message tiktoken counter (`len(enc.encode_ordinary(content))`,
what the langchain docs show). `trim_messages` counts the whole list once and then binary-searches
the cut, re-counting a prefix each probe, and it keeps nothing between calls. ctxeng counts each
content once and keeps the counts by content digest.

Two rows per budget, 8k / 128k / 400k tokens (the policy's context limit):
- first call: ctxeng with an empty count cache against trim_messages;
- next step (the target): each is called again on the agent's next step (3% of contents new);
  ctxeng's counts from the previous step are cached, trim_messages re-tokenizes everything.
ctxeng's time includes request validation, every stage, rendering and the sealed manifest.
"""

from __future__ import annotations

from . import workload
from .engine_floor import _encoding, _fresh_tokenizer
from .timing import Row, at_least, interleaved, median, ms

BUDGETS = ((8_000, 2.0), (128_000, 4.0), (400_000, 8.0))


def to_messages(request: dict):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    by_call = {c["call_id"]: c for c in request["tool_calls"]}
    messages = []
    tool_results = []
    for item in request["candidates"]:
        if item["intended_role"] == "control" and not messages:
            messages.append(SystemMessage(item["content"]))
        elif item.get("call_id") in by_call:
            tool_results.append(ToolMessage(item["content"], tool_call_id=item["call_id"]))
        else:
            messages.append(HumanMessage(item["content"]))
    calls = [{"id": c["call_id"], "name": c["tool_name"], "args": c["arguments"]} for c in request["tool_calls"]]
    messages.append(AIMessage("", tool_calls=calls))
    messages.extend(tool_results)
    return messages


def run(*, rounds: int = 4, quick: bool = False) -> list[Row]:
    from langchain_core.messages import BaseMessage


    if quick:
        rounds = 2
    enc = _encoding()

    def count_message(message: BaseMessage) -> int:
        return len(enc.encode_ordinary(message.content if isinstance(message.content, str) else str(message.content)))

    def count(messages: list[BaseMessage]) -> int:  # what trim_messages builds from a per-message counter
        return sum(count_message(m) for m in messages)

    rows: list[Row] = []
    base = workload.make_request()
    base_step2 = workload.next_step(base)
    for budget, target in BUDGETS:
        request = {**base, "model": {**base["model"], "context_limit": budget}}
        step2 = {**base_step2, "model": request["model"]}
        rows.extend(_one_budget(budget, target, request, step2, rounds, count))
    return rows


def _one_budget(budget, target, request, step2, rounds, count) -> list[Row]:
    from langchain_core.messages import trim_messages

    from ctxeng.engine import assemble, parse_policy, parse_request

    rows: list[Row] = []
    policy = parse_policy(workload.make_policy(budget))
    msgs1, msgs2 = to_messages(request), to_messages(step2)
    kept = len(trim_messages(msgs1, max_tokens=budget, token_counter=count, strategy="last", include_system=True))
    status = assemble(parse_request(request), policy, tokenizer=_fresh_tokenizer()).status
    warm = {}

    def setup(name: str) -> None:
        if name == "ctxeng_next":
            warm["tok"] = _fresh_tokenizer()
            assemble(parse_request(request), policy, tokenizer=warm["tok"])

    times = interleaved(
        {
            "trim_messages": lambda: trim_messages(msgs2, max_tokens=budget, token_counter=count, strategy="last", include_system=True),
            "ctxeng_first": lambda: assemble(parse_request(step2), policy, tokenizer=_fresh_tokenizer()),
            "ctxeng_next": lambda: assemble(parse_request(step2), policy, tokenizer=warm["tok"]),
        },
        rounds,
        setup=setup,
    )
    t, first, nxt = median(times["trim_messages"]), median(times["ctxeng_first"]), median(times["ctxeng_next"])
    label = f"{budget // 1000}k"
    rows.append(at_least(
        "2 trim_messages", f"{label}: next step, ctxeng vs trim_messages", f"ctxeng {ms(nxt)}, trim_messages {ms(t)}",
        t / nxt, target, times=times, trim_kept_messages=kept, ctxeng_status=status,
    ))
    rows.append(Row(
        "2 trim_messages", f"{label}: first call (empty count cache)", f"ctxeng {ms(first)}, trim_messages {ms(t)}",
        round(t / first, 3), "(reported)", None, "speed-up; both tokenize everything once at least",
    ))
    return rows
