"""Benchmark 8 — what the model sees, and the step an agent waits for (issue 37).

Four figures, each measured here, in this run:

- tokens vs raw: a 30-turn support chat (one order lookup per turn, the lookup's record as its
  result) through `Session("chat-agent")` in local mode: the payload's text tokens over the caller's
  own message texts (o200k, the texts both send; the call arguments included on both sides), at
  the last step, where everything fits. Target (issue 37): at most 1.10.
- cache-eligible share: over every step of two append-only runs (that support chat, and a
  60-step coding run: one user request, then tool calls and results), for each adapter, the
  tokens of the longest run of leading serialized messages byte-identical to the previous step's
  payload, over all input tokens sent. What a provider's automatic prefix cache could serve with
  no mechanism added (the first step counts as nothing cached).
- per step beside `trim_messages`: the SDK's local step (request building, the whole engine, the
  sealed manifest) on the 60-step coding run, each step on the history so far, against
  langchain-core's `trim_messages(strategy="last", include_system=True)` on the same messages with
  the same tokenizer (a per-message o200k counter), per step (median) and for the run. CPU time,
  interleaved rounds (bench.timing). Target: at most 2x trim_messages per step.
- `import ctxeng.sdk` CPU time in a fresh interpreter (median of 5; the interpreter's own start is
  not counted). Target: at most 150 ms.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from .timing import Row, at_most, cpu_now, median, ms

TOOLS = [{"type": "function", "function": {"name": "lookup_order", "description": "Look an order up by id",
          "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
MODELS = {"openai_chat": "gpt-4o", "anthropic_messages": "claude-sonnet-4-5", "openai_responses": "gpt-4o"}


def support_chat(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a support agent for Acme. Look orders up before answering; be brief."}]
    for n in range(turns):
        order = f"A-{1000 + n}"
        record = {"order_id": order, "status": "shipped", "placed": f"2026-11-{n % 28 + 1:02d}",
                  "items": [{"sku": f"SKU-{n:04d}-A", "name": "Wool socks, 3-pack", "qty": 2, "price": "14.90"},
                            {"sku": f"SKU-{n:04d}-B", "name": "Rain jacket", "qty": 1, "price": "89.00"}],
                  "shipping": {"carrier": "PostNord", "tracking": f"PN{n:06d}SE", "shipped_on": f"day {n + 1}",
                               "address": "Storgatan 12, 111 22 Stockholm"}}
        messages += [
            {"role": "user", "content": f"Hi, where is my order {order}? I ordered it {n + 2} days ago and need it by Friday."},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{n}", "type": "function", "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": order})}}]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": json.dumps(record)},
            {"role": "assistant", "content": f"Your order {order} shipped on day {n + 1} with PostNord; tracking PN{n:06d}SE. "
                                             "It should reach you before Friday."},
        ]
    return messages


def coding_run(calls: int) -> list[dict[str, Any]]:
    """One user request, then `calls` file reads, each a call and its result (~300 tokens)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Read before you edit; keep changes small."},
        {"role": "user", "content": "The retry logic in the HTTP client drops the last attempt's error. Find why and propose a fix."},
    ]
    for n in range(calls):
        path = f"src/http/module_{n:02d}.py"
        body = "\n".join(f"def handler_{n}_{i}(request, attempt):\n    return retry(request, attempt={i}, backoff={i * 0.5})"
                         for i in range(12))
        messages += [
            {"role": "assistant", "content": f"Reading {path}.", "tool_calls": [
                {"id": f"call_{n}", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": path})}}]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": body},
        ]
    return messages


def steps_of(history: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The history as the agent holds it before each model call: after each user turn or result."""
    return [history[:end] for end in range(2, len(history) + 1) if history[end - 1]["role"] in ("user", "tool")]


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k not in ("role", "type", "id", "tool_call_id", "call_id", "tool_use_id", "name")
                for s in _texts(v)]
    if isinstance(value, list):
        return [s for v in value for s in _texts(v)]
    return []


def _serialized(payload: dict[str, Any]) -> list[Any]:
    if "input" in payload:
        return [payload["instructions"], *payload["input"]]
    if "system" in payload:
        return [payload["system"], *payload["messages"]]
    return list(payload["messages"])


def _caller_tokens(enc, messages: list[dict[str, Any]]) -> int:
    return sum(enc.count(t) for m in messages for t in _texts({"content": m.get("content")}))  \
        + sum(enc.count(c["function"]["arguments"]) for m in messages for c in m.get("tool_calls") or [])


def tokens_vs_raw() -> Row:
    from ctxeng import sdk
    from ctxeng.engine.tokens import tokenizer_for

    enc = tokenizer_for("o200k_base")
    history = support_chat(30)
    step = sdk.Session("chat-agent", model="gpt-4o").step(history, tools=TOOLS[:1]).raise_for_status()
    messages = step.kwargs["messages"]
    sent = sum(enc.count(t) for m in messages for t in _texts({"content": m.get("content")}))
    sent += sum(enc.count(c["function"]["arguments"]) for m in messages for c in m.get("tool_calls") or [])
    raw = _caller_tokens(enc, history)
    return at_most("8 payload", "30-turn support chat: payload text tokens / the caller's message tokens",
                   f"{sent} vs {raw} tokens (o200k)", sent / raw, 1.10, excluded=len(step.manifest["excluded"]))


def cache_eligible() -> list[Row]:
    from ctxeng import sdk
    from ctxeng.engine.tokens import tokenizer_for

    enc = tokenizer_for("o200k_base")
    rows = []
    for adapter, model in MODELS.items():
        eligible = total = recorded = recorded_total = 0
        for name, history in (("support", support_chat(30)), ("coding", coding_run(60))):
            session = sdk.Session("chat-agent" if name == "support" else "coding-agent", model=model, adapter=adapter)
            previous: list[str] = []
            for messages in steps_of(history):
                step = session.step(messages, tools=TOOLS).raise_for_status()
                payload = step.kwargs
                cache = step.manifest["cache"]  # the manifest's own figure (tools counted too), beside this one
                recorded += cache["cache_eligible_tokens"]
                recorded_total += cache["payload_text_tokens"]
                now = [json.dumps(m, sort_keys=True) for m in _serialized(payload)]
                counts = [sum(enc.count(t) for t in _texts(m)) for m in _serialized(payload)]
                same = 0
                while same < min(len(now), len(previous)) and now[same] == previous[same]:
                    same += 1
                eligible += sum(counts[:same])
                total += sum(counts)
                previous = now
        rows.append(Row("8 payload", f"{adapter}: cache-eligible share of input tokens (support 30 turns + coding 60 calls)",
                        f"{100 * eligible / total:.1f}% ({eligible} of {total} tokens; the manifests' cache_eligible_share "
                        f"over the runs {100 * recorded / recorded_total:.1f}%)", round(eligible / total, 3), "(reported)", None,
                        "leading messages byte-identical to the previous step's payload",
                        {"eligible": eligible, "total": total, "manifest_eligible": recorded, "manifest_total": recorded_total}))
    return rows


def step_time(rounds: int) -> list[Row]:
    from langchain_core.messages import trim_messages

    from ctxeng import sdk
    from ctxeng.engine.tokens import tokenizer_for
    from ctxeng.sdk.langchain import from_openai_messages

    enc = tokenizer_for("o200k_base")
    histories = steps_of(coding_run(60))
    lc_histories = [from_openai_messages(h) for h in histories]

    def count(messages) -> int:  # the per-message counter the langchain docs show, on the same encoding
        return sum(enc.count(m.content if isinstance(m.content, str) else str(m.content)) for m in messages)

    # Both warmed first (the encoding loaded, the engine imported), so the run's sums compare steps.
    sdk.Session("coding-agent", model="gpt-4o").step(histories[0], tools=TOOLS)
    trim_messages(lc_histories[0], max_tokens=100_000, token_counter=count, strategy="last", include_system=True)
    ctx_steps: list[list[float]] = []
    trim_steps: list[list[float]] = []
    for r in range(rounds):
        session = sdk.Session("coding-agent", model="gpt-4o")
        ours, theirs = [], []
        for history, lc in zip(histories, lc_histories, strict=True):
            order = ("ctxeng", "trim") if r % 2 == 0 else ("trim", "ctxeng")
            for who in order:
                c0 = cpu_now()
                if who == "ctxeng":
                    session.step(history, tools=TOOLS)
                    ours.append(cpu_now() - c0)
                else:
                    trim_messages(lc, max_tokens=100_000, token_counter=count, strategy="last", include_system=True)
                    theirs.append(cpu_now() - c0)
        ctx_steps.append(ours)
        trim_steps.append(theirs)
    per_step_ours = median([median(s) for s in ctx_steps])
    per_step_trim = median([median(s) for s in trim_steps])
    run_ours = median([sum(s) for s in ctx_steps])
    run_trim = median([sum(s) for s in trim_steps])
    last_ours = median([s[-1] for s in ctx_steps])
    last_trim = median([s[-1] for s in trim_steps])
    return [
        at_most("8 payload", "60-step coding run: SDK local step vs trim_messages, per step (median)",
                f"ctxeng {ms(per_step_ours)}, trim_messages {ms(per_step_trim)}", per_step_ours / per_step_trim, 2.0,
                ctxeng_steps=ctx_steps, trim_steps=trim_steps),
        Row("8 payload", "60-step coding run: the whole run", f"ctxeng {ms(run_ours)}, trim_messages {ms(run_trim)}",
            round(run_ours / run_trim, 3), "(reported)", None, "sum of the steps"),
        Row("8 payload", "60-step coding run: the last step (121 messages)", f"ctxeng {ms(last_ours)}, trim_messages {ms(last_trim)}",
            round(last_ours / last_trim, 3), "(reported)", None),
    ]


def import_time(rounds: int = 5) -> Row:
    code = "import time; t = time.process_time(); import ctxeng.sdk; print(time.process_time() - t)"
    times = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout) for _ in range(rounds)]
    t = median(times)
    return Row("8 payload", "import ctxeng.sdk, CPU time in a fresh interpreter (median of 5)", ms(t), None,
               "<= 150 ms", t <= 0.150, "", {"times": times})


def run(*, quick: bool = False) -> list[Row]:
    return [tokens_vs_raw(), *cache_eligible(), *step_time(1 if quick else 3), import_time(3 if quick else 5)]


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(f"{row.name}: {row.figure}" + (f" -> {row.ratio:g}x (target {row.target})" if row.ratio is not None else f" (target {row.target})"))
