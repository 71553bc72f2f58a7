"""Priority that follows the task (issue 38 point 2).

What the user said, the newest correction in particular, is never evicted while older evidence
holds room; the evidence the current step depends on (the newest reading of the file about to be
edited) outranks older evidence; and a partition's maximum does not evict while the window has
room. Sizes are computed here from the texts (one word of filler is one cl100k token), never read
back from the manifest.
"""

from __future__ import annotations

import json

from ctxeng import sdk

FILLER = " alpha" * 880  # ~880 tokens: "alpha" with a leading space is one cl100k token


def call(call_id: str, name: str, **args) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def tool_history(n: int, *, path_of=lambda k: f"src/f{k}.py", filler: str = FILLER, tool_of=lambda k: "read_file") -> list[dict]:
    out: list[dict] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing build."},
    ]
    for k in range(n):
        out.append({"role": "assistant", "content": None, "tool_calls": [call(f"c{k}", tool_of(k), path=path_of(k))]})
        out.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"file {k}:" + filler})
    return out


def result_ids(step, *, included: bool) -> set[str]:
    pairs = {p["result_item_id"]: p["call_id"] for p in step.manifest["tool_pairs"]}
    records = step.manifest["included"] if included else step.manifest["excluded"]
    return {pairs[r["item_id"]] for r in records if r["item_id"] in pairs}


def test_a_maximum_does_not_evict_while_the_window_has_room():
    # 8k window: usable = 8192 - 1024 reserve - 1% - 3% = ~6,840 tokens (less framing); six results
    # of ~600 words plus their fence headers (~4,700 with the calls) fit the window, not the tool
    # partition's 40% maximum (3,276).
    history = tool_history(6, filler=" alpha" * 600)
    step = sdk.Session("coding-agent", model={"name": "small", "provider": "openai", "context_limit": 8192}).step(history)
    assert step.ready
    assert result_ids(step, included=True) == {f"c{k}" for k in range(6)}
    assert step.manifest["budget"]["payload_tokens"] <= 8192 - 1024


def test_a_user_correction_survives_a_full_window_holding_older_evidence():
    # An 8k window (usable ~6,840; the conversation's minimum 10% = 819): a long task statement
    # (~700 tokens) fills the conversation's minimum, ten ~890-token files (given as items, the
    # evidence partition) cannot all fit, and the user's correction (~240 tokens) comes last.
    task = "Fix the failing build." + " Context:" + " beta" * 700
    correction = "Correction: do not touch src/f0.py, the bug is in src/f9.py." + " Keep the public API." * 40
    history = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": task},
               {"role": "assistant", "content": "Reading the files."}, {"role": "user", "content": correction}]
    files = [sdk.file(f"src/f{k}.py", f"file {k}:" + FILLER, relevance=0.5 + k / 100) for k in range(10)]
    step = sdk.Session("coding-agent", model={"name": "small", "provider": "openai", "context_limit": 8192}).step(history, items=files)
    assert step.ready
    text = json.dumps(step.kwargs["messages"], ensure_ascii=False)
    assert "Correction: do not touch" in text and "Fix the failing build." in text
    evicted = {r["item_id"] for r in step.manifest["excluded"] if r["reason"] == "budget_evicted"}
    assert {f.item_id for f in files} & evicted, "the window was meant to be full"


def test_the_newest_reading_of_the_file_about_to_be_edited_outranks_newer_other_evidence():
    # config.py is read first, then eleven greps: under pressure the config.py reading (the newest
    # reading of a file, what the agent's edit_file writes) outranks the greps' older output, so it
    # stays while results of newer calls go; without the declaration recency alone decides.
    history = tool_history(12, path_of=lambda k: "config.py" if k == 0 else "src", tool_of=lambda k: "read_file" if k == 0 else "grep")
    model = {"name": "small", "provider": "openai", "context_limit": 8192}
    tools = {"read_file": sdk.reads("path"), "edit_file": sdk.writes("path")}
    declared = sdk.Session("coding-agent", model=model, tools=tools).step(history)
    assert "c0" in result_ids(declared, included=True)
    assert result_ids(declared, included=False), "the window was meant to be full"
    plain = sdk.Session("coding-agent", model=model).step(history)
    assert "c0" in result_ids(plain, included=False)


def test_the_readings_of_files_about_to_be_edited_rank_below_the_task_and_newest_first():
    """Two files read, both written by the declared edit tool: each reading ranks in (0.9, 1) — above
    every other result, below the user's task (1.0) — and the newer reading above the older."""
    history = tool_history(3, path_of=lambda k: ("a.py", "src", "b.py")[k], tool_of=lambda k: ("read_file", "grep", "read_file")[k])
    history.append({"role": "assistant", "content": "Both files read; editing them next."})
    tools = {"read_file": sdk.reads("path"), "edit_file": sdk.writes("path")}
    request, _ = sdk.Session("coding-agent", tools=tools).request(history)
    by_call = {c.get("source_ref", {}).get("call_id") or c["item_id"]: c for c in request["candidates"]}
    relevance = {k: c["relevance"] for k, c in by_call.items() if k in ("c0", "c1", "c2")}
    assert set(relevance) == {"c0", "c1", "c2"}, sorted(by_call)
    assert 0.9 < relevance["c0"] < relevance["c2"] < 1.0
    assert relevance["c1"] < 0.9
