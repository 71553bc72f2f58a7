"""Benchmark 9 — the agent's step on real histories (issue 48).

`python -m bench.step_traces [--quick]`. Each shared real trace (`../shared/traces/` beside the repository, or
`$CTXENG_TRACES`: four mini-swe-agent runs and one SWE-agent run) is replayed step by step — the
history as the agent held it before each model call, and the whole history last — through
`sdk.Session("coding-agent", model="gpt-4o")` in local mode, beside langchain-core's
`trim_messages(strategy="last", include_system=True)` on the same messages as LangChain messages,
with a per-message counter on the same o200k encoding that keeps its counts by content digest (its
own `TiktokenTokenizer`, not the session's: what a careful integration does; the goal's baseline),
and beside it the counter the langchain docs show (tiktoken's `Encoding`, every message encoded at
every call; reported), and `max_tokens` = the step's usable input (the manifest's
`budget.usable_input`: 106,880 at 128k, 26,720 at 32k). 32k is
`model={"name": "gpt-4o", "provider": "openai", "context_limit": 32000}`.

CPU time (bench.timing.cpu_now), each step timed for both, in an order that alternates from step to
step; the figures are medians over the rounds. The bench's own LangChain copies of the histories
are frozen out of the garbage collector (`gc.freeze`) while a run is timed. Per step: median, p95 and the last step, pooled over
the runs and per run. Beside them, in fresh interpreters (CPU time measured inside the child, the
interpreter's own start not counted; modules read from bytecode a first start wrote, as an installed
package's are): the o200k tokenizer's load, and `import
ctxeng.engine` plus a session's first step on a 40-message history; in this process, how many
secret scans the replay made against the distinct texts it saw (the goal: each text scanned once);
and, in a child, the peak RSS of a generated 1,000-call coding session (`memory_rows`) with what the
session and the process caches hold at its end.

Normalization of the SWE-agent run (the SDK refuses both, so the bench rewrites them and says so):
a tool message's `tool_call_ids` list becomes its one `tool_call_id`, and the call id reused in a
later turn gets a `-2` suffix in that turn and its result.
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from .infra import ROOT, TRACES, python, python_env
from .timing import Row, at_most, cpu_now, median, ms

LIMITS = {"128k": "gpt-4o", "32k": {"name": "gpt-4o", "provider": "openai", "context_limit": 32000}}
STEP_GOAL = 3.0  # per-step median and the longest run's last step, x trim_messages
TOKENIZER_GOAL = 0.100  # s CPU, the o200k tokenizer in a fresh process
FIRST_STEP_GOAL = 0.250  # s CPU, import ctxeng.engine + a session's first step on 40 messages
BASH = {"type": "function", "function": {"name": "bash", "description": "Run a bash command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


def _clean(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}


def load_traces(root: Path = TRACES) -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    """(name, messages, tool definitions) of each trace, as OpenAI chat dicts."""
    out = []
    for path in sorted((root / "mini-swe-agent").glob("*.json")):
        doc = json.loads(path.read_text())
        messages = [_clean(m) for m in doc["messages"] if m.get("role") != "exit"]
        out.append((path.stem, messages, [BASH]))
    for path in sorted((root / "swe-agent").glob("*.traj")):
        messages = _swe_agent(json.loads(path.read_text())["history"])
        names = sorted({c["function"]["name"] for m in messages for c in m.get("tool_calls") or []})
        tools = [{"type": "function", "function": {"name": n, "description": n, "parameters": {"type": "object", "properties": {}}}}
                 for n in names]
        out.append((path.name.split(".")[0], messages, tools))
    return out


def _swe_agent(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    uses: dict[str, int] = {}  # call id -> turns that used it so far
    renamed: dict[str, str] = {}
    for raw in history:
        m = _clean(raw)
        if "tool_call_ids" in raw:
            m["tool_call_id"] = raw["tool_call_ids"][0]
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                call = dict(call)
                n = uses[call["id"]] = uses.get(call["id"], 0) + 1
                if n > 1:
                    renamed[call["id"]] = call["id"] = f"{call['id']}-{n}"
                calls.append(call)
            m["tool_calls"] = calls
        elif m.get("role") == "tool" and m.get("tool_call_id") in renamed:
            m["tool_call_id"] = renamed.pop(m["tool_call_id"])
        messages.append(m)
    return messages


def steps_of(messages: list[dict[str, Any]]) -> list[int]:
    """The history's length before each model call (each assistant message), then the whole history."""
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
    if messages[-1]["role"] != "assistant":
        ends.append(len(messages))
    return ends


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[-1] if len(values) > 1 else values[0]


def replay(limit: str, rounds: int, traces=None) -> dict[str, Any]:
    """CPU seconds per step, ctxeng and trim_messages (both counters), per run: medians over `rounds`."""
    from langchain_core.messages import trim_messages

    from ctxeng import sdk
    from ctxeng.engine.tokens import TiktokenTokenizer, _encoding
    from ctxeng.sdk.langchain import from_openai_messages

    enc = _encoding("o200k_base")
    kept = TiktokenTokenizer("o200k_base")  # its own count cache, not the session's

    def text(m) -> str:
        return m.content if isinstance(m.content, str) else str(m.content)

    def count(messages) -> int:  # the docs' counter: every message encoded at every call
        return sum(len(enc.encode_ordinary(text(m))) for m in messages)

    def count_kept(messages) -> int:  # a careful integration: counts kept by content digest
        return sum(kept.count(text(m)) for m in messages)

    traces = traces or load_traces()
    runs: dict[str, dict[str, Any]] = {}
    # Both warmed first: the engine imported, the encoding loaded.
    name0, msgs0, tools0 = traces[0]
    usable = sdk.Session("coding-agent", model=LIMITS[limit]).step(msgs0[:3], tools=tools0).manifest["budget"]["usable_input"]
    trim_messages(from_openai_messages(msgs0[:3]), max_tokens=usable, token_counter=count, strategy="last", include_system=True)
    for name, messages, tools in traces:
        ends = steps_of(messages)
        lc = [from_openai_messages(messages[:end]) for end in ends]
        # The harness's own data (LangChain copies of every step's history: ~200,000 objects for
        # the longest run) is frozen out of the collector's walks while the run is timed, so a full
        # collection landing on a step charges that step the cost of the library, not of the bench.
        gc.collect()
        gc.freeze()
        ours: list[list[float]] = []
        theirs: list[list[float]] = []
        raw: list[list[float]] = []
        statuses: list[str] = []
        for r in range(rounds):
            session = sdk.Session("coding-agent", model=LIMITS[limit])
            o, t, u = [], [], []
            order = ["ctxeng", "trim", "trim_raw"]
            for k, end in enumerate(ends):
                for who in order[(k + r) % 3:] + order[:(k + r) % 3]:
                    c0 = cpu_now()
                    if who == "ctxeng":
                        step = session.step(messages[:end], tools=tools)
                        o.append(cpu_now() - c0)
                        if r == 0:
                            statuses.append(step.status)
                    elif who == "trim":
                        trim_messages(lc[k], max_tokens=usable, token_counter=count_kept, strategy="last", include_system=True)
                        t.append(cpu_now() - c0)
                    else:
                        trim_messages(lc[k], max_tokens=usable, token_counter=count, strategy="last", include_system=True)
                        u.append(cpu_now() - c0)
            ours.append(o)
            theirs.append(t)
            raw.append(u)
        gc.unfreeze()
        runs[name] = {"steps": len(ends), "calls": sum(1 for m in messages if m["role"] == "assistant"),
                      "ctxeng": [median(list(s)) for s in zip(*ours, strict=True)],
                      "trim": [median(list(s)) for s in zip(*theirs, strict=True)],
                      "trim_raw": [median(list(s)) for s in zip(*raw, strict=True)],
                      "blocked": statuses.count("blocked")}
    return {"usable_input": usable, "runs": runs}


def step_rows(limit: str, result: dict[str, Any]) -> list[Row]:
    runs = result["runs"]
    ours = [t for r in runs.values() for t in r["ctxeng"]]
    theirs = [t for r in runs.values() for t in r["trim"]]
    raw = [t for r in runs.values() for t in r["trim_raw"]]
    longest = max(runs, key=lambda n: runs[n]["steps"])
    lo, lt = runs[longest]["ctxeng"][-1], runs[longest]["trim"][-1]
    per_run = ", ".join(f"{n.split('__')[0]} {len(r['ctxeng'])} steps {median(r['ctxeng']) / median(r['trim']):.1f}x"
                        for n, r in runs.items())
    label = f"{limit} (usable input {result['usable_input']:,})"
    return [
        at_most("9 real traces", f"{label}: SDK step vs trim_messages, per step (median over {len(ours)} steps of {len(runs)} runs)",
                f"ctxeng {ms(median(ours))} (p95 {ms(_p95(ours))}), trim_messages {ms(median(theirs))} (p95 {ms(_p95(theirs))})",
                median(ours) / median(theirs), STEP_GOAL, note=per_run, runs=runs),
        at_most("9 real traces", f"{label}: the last step of the longest run ({longest}, {runs[longest]['calls']} calls)",
                f"ctxeng {ms(lo)}, trim_messages {ms(lt)}", lo / lt, STEP_GOAL),
        Row("9 real traces", f"{label}: per step (median), beside trim_messages counting every message at every call",
            f"ctxeng {ms(median(ours))}, trim_messages {ms(median(raw))}", round(median(ours) / median(raw), 3), "(reported)",
            note=f"the last step of the longest run: {lo / runs[longest]['trim_raw'][-1]:.2f}x"),
        Row("9 real traces", f"{label}: the whole replay (every step of every run)",
            f"ctxeng {ms(sum(ours))}, trim_messages {ms(sum(theirs))}", round(sum(ours) / sum(theirs), 3), "(reported)",
            note=f"blocked steps: {sum(r['blocked'] for r in runs.values())}"),
    ]


_TOKENIZER_CHILD = """
import time
import ctxeng.engine  # imported before the timer: this figure is the tokenizer's load alone
from ctxeng.engine.tokens import tokenizer_for
t = time.process_time()
tokenizer_for("o200k_base").count("warm")
print(time.process_time() - t)
"""

_FIRST_STEP_CHILD = """
import json, sys, time
from bench.step_traces import load_traces
_, messages, tools = load_traces()[int(sys.argv[1])]
t = time.process_time()
import ctxeng.engine
from ctxeng import sdk
step = sdk.Session("coding-agent", model="gpt-4o").step(messages[:40], tools=tools)
assert step.status == "ready", step.status
print(time.process_time() - t)
"""


def _child(code: str, *args: str, bytecode: Path | None = None) -> str:
    """The last line a fresh interpreter running `code` prints. `bytecode`: a directory where it
    keeps the modules it compiles (`PYTHONPYCACHEPREFIX`), as an installed package has them;
    None leaves the environment's own setting (here often PYTHONDONTWRITEBYTECODE=1: every
    module of the checkout compiled from source at every start)."""
    env = python_env()
    if bytecode is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    out = subprocess.run([python(), "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-600:])
    return out.stdout.strip().splitlines()[-1]


def fresh_process_rows(rounds: int) -> list[Row]:
    """The fresh-process goals as an installed package meets them: bytecode written by a first
    start (pip compiles an installed package's modules; a checkout writes its __pycache__ on
    first import), kept in a directory of this run, so an environment with
    PYTHONDONTWRITEBYTECODE=1 and a checkout without __pycache__ does not charge every start the
    compilation of every module (~110 ms of the first step here)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ctxeng-bench-pyc-") as pyc:
        bytecode = Path(pyc)
        _child(_TOKENIZER_CHILD, bytecode=bytecode)  # a first start builds whatever a machine builds once
        _child(_FIRST_STEP_CHILD, "1", bytecode=bytecode)
        tok = [float(_child(_TOKENIZER_CHILD, bytecode=bytecode)) for _ in range(rounds)]
        first = [float(_child(_FIRST_STEP_CHILD, "1", bytecode=bytecode)) for _ in range(rounds)]
    return [
        Row("9 real traces", f"fresh process: the o200k tokenizer ready (median of {rounds})", ms(median(tok)),
            round(median(tok) / TOKENIZER_GOAL, 3), f"<= {TOKENIZER_GOAL * 1000:.0f} ms", median(tok) <= TOKENIZER_GOAL,
            data={"times": tok}),
        Row("9 real traces", f"fresh process: import ctxeng.engine + a session's first step on 40 messages (median of {rounds})",
            ms(median(first)), round(median(first) / FIRST_STEP_GOAL, 3), f"<= {FIRST_STEP_GOAL * 1000:.0f} ms",
            median(first) <= FIRST_STEP_GOAL, data={"times": first}),
    ]


_MEMORY_CHILD = """
import json, resource, sys
from bench.payload import TOOLS, coding_run
from ctxeng import sdk
from ctxeng.engine import secrets
from ctxeng.engine.tokens import tokenizer_for

def kb(field):  # this process's own figure: ru_maxrss keeps the parent's peak across fork and exec
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

calls, every = int(sys.argv[1]), int(sys.argv[2])
keep = {"default": {}, "all": {"keep_steps": None}}[sys.argv[3]]
history = coding_run(calls)
sdk.Session("coding-agent", model="gpt-4o").step(history[:4], tools=TOOLS)  # warmed: the imports, the tokenizer
base = kb("VmRSS")
session = sdk.Session("coding-agent", model="gpt-4o", **keep)
for n in range(every, calls + 1, every):
    session.step(history[:2 + 2 * n], tools=TOOLS)  # before the model call that follows the n-th result
peak = kb("VmHWM")
retired = sum(len(s._retired or b"") for s in session.steps)
print(json.dumps({"base_kb": base, "peak_kb": peak, "history_bytes": len(json.dumps(history)), "messages": len(history),
                  "steps": len(session.steps), "keep_steps": session.keep_steps, "retired_bytes": retired, "seen_at": len(session._seen_at),
                  "token_counts": len(tokenizer_for("o200k_base")._cache), "findings": len(secrets._by_digest),
                  "status": session.steps[-1].status}))
"""


def memory_rows(calls: int = 1000, every: int = 10) -> list[Row]:
    """Peak RSS of one process running a generated `calls`-call coding session (bench.payload's
    coding_run: a call and a ~1 kB file read each) with a step at every `every`-th call, above its
    RSS after one warm step (Linux: the process's own high-water mark, VmHWM); beside it what the
    session keeps per item and per step. Twice: with the session's default `keep_steps` (the latest
    steps keep their payload and manifests) and with `keep_steps=None` (every step's, as before)."""
    import json as _json
    import tempfile

    rows = []
    for keep in ("default", "all"):
        with tempfile.TemporaryDirectory(prefix="ctxeng-bench-pyc-") as pyc:
            r = _json.loads(_child(_MEMORY_CHILD, str(calls), str(every), keep, bytecode=Path(pyc)))
        above = (r["peak_kb"] - r["base_kb"]) / 1024
        kept = "every step's" if r["keep_steps"] is None else f"the latest {r['keep_steps']} steps' (the default)"
        rows.append(Row("9 real traces", f"peak memory, a generated {calls:,}-call session ({r['steps']} steps, every {every}th call; "
                        f"{r['messages']:,} messages, {r['history_bytes'] / 1e6:.1f} MB of history), keep_steps={r['keep_steps']}",
                        f"{above:.0f} MB above a {r['base_kb'] / 1024:.0f} MB warmed process (peak RSS {r['peak_kb'] / 1024:.0f} MB)",
                        None, "(reported)",
                        note=(f"kept: {kept} retired payloads and manifests {r['retired_bytes'] / 1e6:.1f} MB (each the size of "
                              f"its history), {r['seen_at']:,} first-seen times (one per "
                              f"message), {r['token_counts']:,} token counts (bounded: 200,000), {r['findings']:,} scans' findings "
                              f"(bounded: {16_384:,}); last step {r['status']}"),
                        data=r))
    return rows


def scan_rows(traces) -> list[Row]:
    """Secret scans made over one replay of every run, against the distinct texts scanned."""
    from ctxeng import sdk
    from ctxeng.engine import memo, secrets

    scanned: list[str] = []
    original = secrets._scan
    memo.clear_all()  # the replays before this one scanned every text already (findings, and answers built on them)

    def counting(text: str):
        scanned.append(text)
        return original(text)

    secrets._scan = counting
    try:
        for _, messages, tools in traces:
            session = sdk.Session("coding-agent", model="gpt-4o")
            for end in steps_of(messages):
                session.step(messages[:end], tools=tools)
    finally:
        secrets._scan = original
    distinct = len(set(scanned))
    return [Row("9 real traces", "secret scans over one replay of every run / distinct texts scanned",
                f"{len(scanned):,} scans of {distinct:,} distinct texts", round(len(scanned) / max(1, distinct), 3), "<= 1x",
                len(scanned) <= distinct)]


def run(*, quick: bool = False) -> list[Row]:
    rounds = 1 if quick else 2
    traces = load_traces()
    rows: list[Row] = []
    for limit in LIMITS:
        rows += step_rows(limit, replay(limit, rounds, traces))
    rows += scan_rows(traces)
    rows += fresh_process_rows(3 if quick else 5)
    rows += memory_rows(every=25 if quick else 10)  # quick: 40 steps, so the default keep_steps (20) lets some go
    return rows


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        met = "" if row.met is None else (" met" if row.met else " NOT MET")
        print(f"{row.name}: {row.figure}" + (f" -> {row.ratio:g}x" if row.ratio is not None else "") + f" (goal {row.target}){met}"
              + (f" [{row.note}]" if row.note else ""))
