"""Stale readings on real agent runs: does ctxeng drop a file reading once the agent has written the file?

`python -m bench.stale_reads [--traces DIR] [--per-step RUN]`

Measured against hand-made ground truth, not against the parser under test. For each of the four
mini-swe-agent runs (bench/traces/labels/README.md; the traces are OpenAI chat dicts under
`--traces`, default the mini-swe-agent/ folder of bench.infra.TRACES: ../shared/traces or $CTXENG_TRACES) the labels
say which tool results show a file's content (a *reading*: path, lines) and which later assistant
turn first wrote that file (`stale_by`). The run's last model call is replayed: its history (every
message before the last assistant message) goes through

    sdk.Session("coding-agent", model="gpt-4o", tools={"bash": sdk.shell("command", cwd="/testbed")})
    session.step(history, tools=[mini-swe-agent's `bash` function tool])

and the manifest's decisions are scored per call (a call's result is one item; `tool_pairs` maps
call_id -> result_item_id, keyed by the caller's own id even when the SDK rewrote a reused one):

- stale reads: labelled reading calls all of whose readings have a later write (a call reading two
  files of which only one is later written still shows live text, so it is not stale);
- excluded: of those, how many ctxeng excluded with reason `stale_revision`;
- missed: the rest, each named (call id, path, the labelled write, what ctxeng did instead);
- false stale: results ctxeng excluded as `stale_revision` or `duplicate` that are not stale by the
  labels (a live reading, or no reading at all), each named with ctxeng's detail, except verified
  duplicates;
- duplicates: exclusions saying a later reading covers the item (reason `duplicate`, a
  `stale_revision` naming "a newer reading", or the ranking's "duplicate content of" twin rule) of a
  result that is not stale by the labels; each is checked here, independently of ctxeng: every
  non-blank line of the excluded result (grep -n / nl line-number prefixes ignored) must be a line
  of the covering item's result text. Verified ones are reported as duplicates, the others count as
  false stale;
- unnamed: labelled reads no parser can name (`grep -r X dir/`, a script printing source), and any
  of them ctxeng nevertheless excluded as stale.

Goals (the issue): false stale = 0 and missed <= 10% of stale reads. Prints a Markdown table and
writes bench/results/stale_reads.json. `--per-step RUN` (default django__django-11815) also replays
every model call of one run with one session (history up to that call) and reports any call whose
result was excluded at one step and included again at a later one (a contradiction of the final
decision). Exits non-zero only when the harness cannot run (a trace or label file missing, the SDK
failing), not when a goal is missed ("goal not met" is printed).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.infra import TRACES

HERE = Path(__file__).resolve().parent
LABELS = HERE / "traces" / "labels"
RESULTS = HERE / "results"
TRACE_DIRS = (TRACES / "mini-swe-agent",)
RUNS = ("sqlfluff__sqlfluff-2419", "django__django-11815", "astropy__astropy-14995", "django__django-13964")
PER_STEP_RUN = "django__django-11815"
MISSED_GOAL = 0.10

# The one tool every mini-swe-agent run declares (minisweagent's BASH_TOOL).
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
            "required": ["command"],
        },
    },
}

STALE = "stale_revision"
DUPLICATE = "duplicate"


class HarnessError(RuntimeError):
    """The benchmark cannot run (not: ctxeng missed a goal)."""


# ---------------------------------------------------------------------------- inputs


def trace_dir(explicit: str | None = None) -> Path:
    candidates = [Path(explicit)] if explicit else list(TRACE_DIRS)
    for d in candidates:
        if d.is_dir():
            return d
    raise HarnessError(f"no trace directory: looked in {', '.join(str(d) for d in candidates)}")


def load_messages(path: Path) -> list[dict[str, Any]]:
    """The run's messages without mini-swe-agent's closing `{"role": "exit"}` entry."""
    if not path.is_file():
        raise HarnessError(f"trace missing: {path}")
    doc = json.loads(path.read_text())
    return [m for m in doc["messages"] if m.get("role") != "exit"]


def load_labels(run: str, labels_dir: Path = LABELS) -> dict[str, Any]:
    path = labels_dir / f"{run}.json"
    if not path.is_file():
        raise HarnessError(f"labels missing: {path}")
    return json.loads(path.read_text())


def last_call_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the run's last model call was given: everything before the last assistant message."""
    last = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")
    return messages[:last]


def result_texts(messages: list[dict[str, Any]]) -> dict[str, str]:
    """call_id -> the tool result's text (the trace's own, for the duplicate check)."""
    return {m["tool_call_id"]: m.get("content") or "" for m in messages if m.get("role") == "tool"}


# ---------------------------------------------------------------------------- the manifest


def call_of_item(manifest: dict[str, Any], known_calls: Iterable[str] = ()) -> dict[str, str]:
    """result_item_id -> the caller's call id. The pair record names the caller's id in `call_id`
    (the serialized one, if the SDK rewrote a reused id, in `serialized_call_id`); if a record's
    `call_id` is not a call of the trace but its `serialized_call_id` is, that one is used."""
    known = set(known_calls)
    out: dict[str, str] = {}
    for pair in manifest.get("tool_pairs") or []:
        item = pair.get("result_item_id")
        if not item:
            continue
        cid = pair.get("call_id")
        if known and cid not in known and pair.get("serialized_call_id") in known:
            cid = pair["serialized_call_id"]
        if cid:
            out[item] = cid
    return out


_COVER = re.compile(r"item '([^']+)'")


def _is_duplicate_claim(exclusion: dict[str, Any]) -> bool:
    reason, detail = exclusion.get("reason"), exclusion.get("detail") or ""
    if reason == DUPLICATE:
        return True
    if reason == STALE:
        return "newer reading" in detail or "duplicate" in detail or "covers" in detail or "covered" in detail
    return reason == "ranking_lost" and "duplicate content" in detail


def _covering_item(exclusion: dict[str, Any]) -> str | None:
    for key in ("superseded_by", "covered_by", "duplicate_of", "newer_item_id"):
        if exclusion.get(key):
            return str(exclusion[key])
    found = _COVER.search(exclusion.get("detail") or "")
    if found:
        return found.group(1)
    found = re.search(r"item \"([^\"]+)\"|higher-ranked item '([^']+)'", exclusion.get("detail") or "")
    return (found.group(1) or found.group(2)) if found else None


_NUMBERED = re.compile(r"^\s*\d+(?:[:-]|\t)")


def _lines(text: str) -> list[str]:
    body = text.split("<output>", 1)[-1].rsplit("</output>", 1)[0]
    return [_NUMBERED.sub("", line).rstrip() for line in body.splitlines() if line.strip()]


def covers(covering_text: str, duplicate_text: str) -> bool:
    """Does the covering result show every line the duplicate shows (line-number prefixes aside)?"""
    have = set(_lines(covering_text))
    want = _lines(duplicate_text)
    return bool(want) and all(line in have for line in want)


# ---------------------------------------------------------------------------- scoring


def score(labels: dict[str, Any], manifest: dict[str, Any], texts: dict[str, str] | None = None) -> dict[str, Any]:
    """Score one replayed step against one run's labels. `texts`: call_id -> result text, for the
    duplicate check (without it no duplicate can be verified). Pure: no SDK, no files."""
    texts = texts or {}
    reads_by_call: dict[str, list[dict[str, Any]]] = {}
    for r in labels["reads"]:
        reads_by_call.setdefault(r["call_id"], []).append(r)
    writes = {w["call_id"]: w for w in labels["writes"]}
    stale_calls = {c for c, rs in reads_by_call.items() if all(r.get("stale_by") for r in rs)}
    unnamed = set(labels.get("unnamed_reads") or [])
    known = set(reads_by_call) | set(writes) | unnamed | set(texts)
    item_call = call_of_item(manifest, known)
    call_item = {c: i for i, c in item_call.items()}
    excluded_by_call: dict[str, dict[str, Any]] = {}
    for e in manifest.get("excluded") or []:
        cid = item_call.get(e.get("item_id"))
        if cid is not None:
            excluded_by_call[cid] = e

    def decision(cid: str) -> str:
        if cid not in call_item:
            return "not in the manifest's tool_pairs"
        e = excluded_by_call.get(cid)
        return "included" if e is None else f"excluded: {e.get('reason')}: {e.get('detail')}"

    excluded, missed = [], []
    for cid in sorted(stale_calls, key=lambda c: reads_by_call[c][0]["message_index"]):
        e = excluded_by_call.get(cid)
        if e is not None and e.get("reason") == STALE:
            excluded.append(cid)
            continue
        for r in reads_by_call[cid]:
            w = writes.get(r["stale_by"], {})
            missed.append({"call_id": cid, "message_index": r["message_index"], "path": r["path"], "lines": r.get("lines"),
                           "stale_by": r["stale_by"], "stale_by_how": w.get("how"), "ctxeng": decision(cid)})

    false_stale, duplicates, unnamed_claimed, unlabelled_written = [], [], [], []
    for cid, e in excluded_by_call.items():
        reason = e.get("reason")
        dup_claim = _is_duplicate_claim(e)
        if cid in stale_calls or not (reason in (STALE, DUPLICATE) or dup_claim):
            continue
        if cid in unnamed:
            unnamed_claimed.append({"call_id": cid, "reason": reason, "detail": e.get("detail")})
        entry = {"call_id": cid, "item_id": e.get("item_id"), "reason": reason, "detail": e.get("detail"),
                 "reads": [{"path": r["path"], "lines": r.get("lines")} for r in reads_by_call.get(cid, [])]}
        if dup_claim:
            cover_item = _covering_item(e)
            cover_call = item_call.get(cover_item) if cover_item else None
            ok = cover_call is not None and cid in texts and cover_call in texts and covers(texts[cover_call], texts[cid])
            entry.update(covering_item=cover_item, covering_call=cover_call, verified=ok)
            duplicates.append(entry)
            if ok:
                continue
        if reason == "ranking_lost" and cid not in reads_by_call:
            continue  # the ranking's twin rule on a non-reading (e.g. two identical pip warnings): not this rule's
        if cid not in reads_by_call and reason == STALE:
            # Not a reading by the labels (an empty grep of a named file: "no match" in a version the
            # agent then changed); still not false if the write it names is a labelled, successful
            # write of a path the detail names.
            named = [w for wid, w in writes.items() if f"'{wid}'" in (e.get("detail") or "")
                     and not w.get("failed") and f"'{w['path']}'" in (e.get("detail") or "")]
            if named:
                unlabelled_written.append({**entry, "write": named[0]["path"]})
                continue
        false_stale.append(entry)

    n_stale = len(stale_calls)
    return {
        "reads": len(labels["reads"]),
        "read_calls": len(reads_by_call),
        "stale_reads": n_stale,
        "stale_read_entries": sum(1 for r in labels["reads"] if r.get("stale_by")),
        "excluded": len(excluded),
        "missed": missed,
        "missed_calls": n_stale - len(excluded),
        "false_stale": false_stale,
        "duplicates": duplicates,
        "duplicates_verified": sum(1 for d in duplicates if d["verified"]),
        "unnamed": len(unnamed),
        "unnamed_claimed": unnamed_claimed,
        "unlabelled_stale_by_a_labelled_write": unlabelled_written,
        "goal_false_stale": not false_stale,
        "goal_missed": (n_stale - len(excluded)) <= MISSED_GOAL * n_stale,
    }


# ---------------------------------------------------------------------------- replay


def new_session():
    from ctxeng import sdk

    if not hasattr(sdk, "shell"):
        raise HarnessError("ctxeng.sdk has no shell() declaration yet (the shell-command parser has not landed)")
    return sdk.Session("coding-agent", model="gpt-4o", tools={"bash": sdk.shell("command", cwd="/testbed")})


def replay_last_call(messages: list[dict[str, Any]]) -> dict[str, Any]:
    step = new_session().step(last_call_history(messages), tools=[BASH_TOOL])
    return step.manifest


def per_step(messages: list[dict[str, Any]], labels: dict[str, Any]) -> dict[str, Any]:
    """Replay every model call of one run (one session, history up to that call) and look for
    contradictions between the steps' decisions (`contradictions`)."""
    session = new_session()
    known = {r["call_id"] for r in labels["reads"]} | {w["call_id"] for w in labels["writes"]} | set(result_texts(messages))
    steps = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    decisions = []
    for idx in steps:
        manifest = session.step(messages[:idx], tools=[BASH_TOOL]).manifest
        decisions.append(step_decisions(manifest, known))
    return {"run_steps": len(steps), "contradictions": contradictions(decisions)}


def step_decisions(manifest: dict[str, Any], known_calls: Iterable[str] = ()) -> dict[str, str | None]:
    """call_id -> the exclusion reason of its result at this step (None: included)."""
    item_call = call_of_item(manifest, known_calls)
    out: dict[str, str | None] = dict.fromkeys(item_call.values())
    for e in manifest.get("excluded") or []:
        if e.get("item_id") in item_call:
            out[item_call[e["item_id"]]] = e.get("reason")
    return out


def contradictions(decisions: list[dict[str, str | None]]) -> list[dict[str, Any]]:
    """Results excluded as stale (or duplicate) at step k and included again at a later step: a
    reading once stale stays stale (a write is never undone), so this is a bug."""
    found = []
    excluded_at: dict[str, int] = {}
    for k, step in enumerate(decisions):
        for cid, reason in step.items():
            if reason in (STALE, DUPLICATE):
                excluded_at.setdefault(cid, k)
            elif reason is None and cid in excluded_at:
                found.append({"call_id": cid, "excluded_at_step": excluded_at.pop(cid), "included_at_step": k})
    return found


# ---------------------------------------------------------------------------- report


def table(rows: dict[str, dict[str, Any]]) -> str:
    lines = ["| run | reads | stale reads | excluded | missed | false stale | duplicates | unnamed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run, s in rows.items():
        lines.append(f"| {run} | {s['reads']} ({s['read_calls']} calls) | {s['stale_reads']} | {s['excluded']} | "
                     f"{s['missed_calls']} | {len(s['false_stale'])} | {s['duplicates_verified']}/{len(s['duplicates'])} verified | "
                     f"{s['unnamed']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.stale_reads")
    parser.add_argument("--traces", help="directory of the mini-swe-agent traces (<instance_id>.json)")
    parser.add_argument("--per-step", default=PER_STEP_RUN, help="run replayed step by step ('' to skip)")
    args = parser.parse_args(argv)
    try:
        tdir = trace_dir(args.traces)
        rows: dict[str, dict[str, Any]] = {}
        for run in RUNS:
            messages = load_messages(tdir / f"{run}.json")
            labels = load_labels(run)
            rows[run] = score(labels, replay_last_call(messages), result_texts(messages))
        step_check = None
        if args.per_step:
            messages = load_messages(tdir / f"{args.per_step}.json")
            step_check = {"run": args.per_step, **per_step(messages, load_labels(args.per_step))}
    except HarnessError as exc:
        print(f"bench.stale_reads: {exc}", file=sys.stderr)
        return 2

    total_stale = sum(s["stale_reads"] for s in rows.values())
    total_missed = sum(s["missed_calls"] for s in rows.values())
    total_false = sum(len(s["false_stale"]) for s in rows.values())
    goals = {"false_stale": total_false == 0, "missed": total_missed <= MISSED_GOAL * total_stale}
    print(table(rows))
    print()
    for run, s in rows.items():
        for m in s["missed"]:
            print(f"missed  {run} {m['call_id']} (message {m['message_index']}) {m['path']} lines {m['lines']}: "
                  f"written by {m['stale_by']} ({m['stale_by_how']}); ctxeng: {m['ctxeng']}")
        for u in s.get("unlabelled_stale_by_a_labelled_write", []):
            print(f"stale, not a labelled reading, by a labelled write  {run} {u['call_id']}: {u['detail']}")
        for f in s["false_stale"]:
            print(f"false stale  {run} {f['call_id']} {f['reads'] or 'not a labelled reading'}: {f['reason']}: {f['detail']}")
        for d in s["duplicates"]:
            print(f"duplicate {'verified' if d['verified'] else 'NOT verified'}  {run} {d['call_id']} covered by {d['covering_call']}: {d['detail']}")
        for u in s["unnamed_claimed"]:
            print(f"unnamed read claimed  {run} {u['call_id']}: {u['reason']}: {u['detail']}")
    print(f"\nmissed {total_missed}/{total_stale} stale reads (goal <= {MISSED_GOAL:.0%}): "
          + ("met" if goals["missed"] else "goal not met"))
    print(f"false stale {total_false} (goal 0): " + ("met" if goals["false_stale"] else "goal not met"))
    if step_check is not None:
        c = step_check["contradictions"]
        print(f"per-step replay of {step_check['run']} ({step_check['run_steps']} steps): "
              + (f"{len(c)} result(s) excluded at one step and included again later: {c}" if c
                 else "no step's decision contradicts a later one"))
    RESULTS.mkdir(exist_ok=True)
    doc = {"runs": rows, "totals": {"stale_reads": total_stale, "missed": total_missed, "false_stale": total_false},
           "goals_met": goals, "per_step": step_check}
    tmp = RESULTS / "stale_reads.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(RESULTS / "stale_reads.json")
    return 0


def run(*, quick: bool = False) -> list:
    """Section 10 of `make bench`: the four runs' last model calls, as rows of the results table."""
    from .timing import Row

    tdir = trace_dir(None)
    out = []
    stale = missed = false = 0
    for name in RUNS:
        messages = load_messages(tdir / f"{name}.json")
        s = score(load_labels(name), replay_last_call(messages), result_texts(messages))
        stale, missed, false = stale + s["stale_reads"], missed + s["missed_calls"], false + len(s["false_stale"])
        out.append(Row("10 stale reads", f"{name}: reads made stale by a later write, excluded",
                       f"{s['excluded']} of {s['stale_reads']}", note=f"{len(s['false_stale'])} live reads excluded"))
    out.append(Row("10 stale reads", "missed, all four runs", f"{missed} of {stale}", target=f"<= {MISSED_GOAL:.0%}",
                   met=missed <= MISSED_GOAL * stale))
    out.append(Row("10 stale reads", "live reads excluded, all four runs", str(false), target="0", met=false == 0))
    return out


if __name__ == "__main__":
    sys.exit(main())
