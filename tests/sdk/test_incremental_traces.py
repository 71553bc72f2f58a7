"""What a session and the process keep between steps (digests, token counts, secret findings,
unit counts, the per-machine rank table) changes no decision on real histories or on generated
ones (issue 48): every compared step's sealed manifest and payload are those of a fresh engine
given the same request, with a tokenizer of its own (an empty count cache) and every per-content
memo of the process empty (`memo.fresh`: secret findings, canonical JSON texts, digests, sha256
states, argument texts), the session's own given back for its next step. Real histories are the shared traces (`bench.infra.TRACES`: the
`shared/` folder beside the repository, or `$CTXENG_TRACES`), at 128k and under the pressure of 32k; generated
ones come from hypothesis (derandomized). Outputs are compared, never timings."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.step_traces import TRACES, load_traces, steps_of
from ctxeng import sdk, starters
from ctxeng.engine import assemble, memo, parse_request
from ctxeng.engine.tokens import TiktokenTokenizer

from .test_incremental_step import without_seal_facts

MODELS = {"128k": "gpt-4o", "32k": {"name": "gpt-4o", "provider": "openai", "context_limit": 32000}}
EVERY = 7  # real traces: every 7th step and the last are compared (each fresh assembly counts all)


def _fresh(request: dict):
    with memo.off():  # computed as without any per-content memo (findings, JSON texts, digests); the session's kept
        return assemble(parse_request(json.loads(json.dumps(request))), starters.load("coding-agent"),
                        tokenizer=TiktokenTokenizer("o200k_base"))


def _replay_and_compare(session: sdk.Session, messages: list[dict], tools: list[dict], ends: list[int], compare) -> int:
    compared = 0
    for k, end in enumerate(ends):
        if not compare(k):
            session.step(messages[:end], tools=tools)
            continue
        request, _ = session.request(messages[:end], tools=tools)
        step = session.step(messages[:end], tools=tools)
        fresh = _fresh(request)
        assert step.status == fresh.status, (k, end)
        assert step.payload == fresh.serialized_input, (k, end)
        assert without_seal_facts(step.manifest) == without_seal_facts(fresh.manifest_dict()), (k, end)
        compared += 1
    return compared


def _traces():
    assert TRACES.is_dir(), f"the shared traces are missing: {TRACES} (the `shared/` folder beside the repository, or $CTXENG_TRACES)"
    return load_traces()


@pytest.mark.parametrize("limit", list(MODELS))
@pytest.mark.parametrize("trace", range(5))
def test_every_compared_step_of_a_real_trace_is_a_fresh_engines(trace, limit):
    traces = _traces()
    assert len(traces) == 5, [name for name, _, _ in traces]  # four mini-swe-agent runs, one SWE-agent run
    name, messages, tools = traces[trace]
    ends = steps_of(messages)
    session = sdk.Session("coding-agent", model=MODELS[limit], run_id=f"run-{name[:40]}")
    compared = _replay_and_compare(session, messages, tools, ends, lambda k: k % EVERY == 0 or k == len(ends) - 1)
    assert compared >= 2


READ = {"type": "function", "function": {"name": "read_file", "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
WRITE = {"type": "function", "function": {"name": "write_file", "description": "Write a file",
         "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}}}}
EVENTS = st.lists(st.tuples(st.sampled_from(["read", "read", "write", "user", "say", "secret"]), st.integers(0, 3),
                            st.integers(0, 40)), min_size=2, max_size=25)


def _history(events) -> list[dict]:
    """A coding run from events: reads and writes of four files (repeated content included), user
    turns, assistant text, and a result holding a credential."""
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."},
                            {"role": "user", "content": "Fix the retry loop."}]
    for n, (kind, file, size) in enumerate(events):
        path = f"src/m{file}.py"
        if kind == "user":
            messages.append({"role": "user", "content": f"Also look at {path} ({size})."})
            continue
        if kind == "say":
            messages.append({"role": "assistant", "content": f"Thinking about {path}. " * (size % 5 + 1)})
            continue
        args = {"path": path} if kind != "write" else {"path": path, "text": "x = 1\n" * size}
        name = "write_file" if kind == "write" else "read_file"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        body = f"def f_{file}(x):\n    return x + {size % 3}\n" * (size + 1)
        if kind == "secret":
            body += 'API_KEY = "sk-proj-' + "A1b2C3d4" * 4 + '"\n'
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": "ok" if kind == "write" else body})
    return messages


@settings(max_examples=20, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS, limit=st.sampled_from([4000, 8000, 128000]))
def test_every_step_of_a_generated_run_is_a_fresh_engines(events, limit):
    messages = _history(events)
    ends = [end for end in range(2, len(messages) + 1) if messages[end - 1]["role"] in ("user", "tool")]
    model = {"name": "gpt-4o", "provider": "openai", "context_limit": limit}
    session = sdk.Session("coding-agent", model=model, run_id="run-generated",
                          tools={"read_file": sdk.reads("path"), "write_file": sdk.writes("path")})
    assert _replay_and_compare(session, messages, [READ, WRITE], ends, lambda k: True) == len(ends)
