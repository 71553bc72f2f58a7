"""bench.stale_reads: the hand labels are well-formed against their traces, the scoring counts each
bucket right on a hand-made manifest, and (once `sdk.shell` exists) the replay of the four real runs
excludes no live reading."""

from __future__ import annotations

import json
import os
import re

import pytest

from bench import stale_reads as sr

LINES = re.compile(r"^\d+-\d+$")


def _traces():
    try:
        return sr.trace_dir()
    except sr.HarnessError as exc:  # shared/ beside the repository holds them, on every machine and in CI
        pytest.fail(f"the mini-swe-agent traces are missing: {exc}")


@pytest.mark.parametrize("run", sr.RUNS)
def test_labels_name_real_calls_and_each_stale_by_is_the_first_later_write_of_the_same_path(run):
    labels = sr.load_labels(run)  # the labels are in the repo: missing ones fail
    assert labels["run"] == run and labels["cwd"] == "/testbed"
    messages = sr.load_messages(_traces() / f"{run}.json")
    call_at = {tc["id"]: i for i, m in enumerate(messages) if m.get("role") == "assistant" for tc in m.get("tool_calls") or []}
    result_at = {m["tool_call_id"]: i for i, m in enumerate(messages) if m.get("role") == "tool"}
    writes = {w["call_id"] + w["path"]: w for w in labels["writes"]}
    assert len(writes) == len(labels["writes"]), "one write entry per (call, file)"
    assert len({(r["call_id"], r["path"]) for r in labels["reads"]}) == len(labels["reads"]), "one read entry per (call, file)"
    for entry in labels["reads"] + labels["writes"]:
        assert entry["call_id"] in call_at, entry
        assert entry["message_index"] == call_at[entry["call_id"]], entry
        assert entry["path"].startswith("/") and os.path.normpath(entry["path"]) == entry["path"], entry
    for r in labels["reads"]:
        assert r["call_id"] in result_at, f"a reading shows a result: {r}"
        assert r["lines"] is None or LINES.match(r["lines"]), r
        later = sorted((w for w in labels["writes"] if w["path"] == r["path"] and not w.get("failed")
                        and w["message_index"] > r["message_index"]), key=lambda w: w["message_index"])
        if r["stale_by"] is None:
            assert not later, f"{r['call_id']} {r['path']}: written later by {later[0]['call_id']} but stale_by is null"
        else:
            w = writes.get(r["stale_by"] + r["path"])
            assert w is not None, f"stale_by {r['stale_by']} is no write of {r['path']}"
            assert not w.get("failed") and w["message_index"] > r["message_index"], r
            assert w is later[0], f"{r['call_id']}: the first later write is {later[0]['call_id']}, not {r['stale_by']}"
    for cid in labels["unnamed_reads"]:
        assert cid in result_at and cid not in {r["call_id"] for r in labels["reads"]}


# ---------------------------------------------------------------------------- scoring on a hand-made manifest

def _out(text):
    return f"<returncode>0</returncode>\n<output>\n{text}\n</output>"


LABELS = {
    "run": "hand", "cwd": "/testbed",
    "reads": [
        {"call_id": "c-stale-ok", "message_index": 2, "path": "/testbed/a.py", "lines": None, "stale_by": "w-a"},
        {"call_id": "c-stale-missed", "message_index": 4, "path": "/testbed/a.py", "lines": "1-5", "stale_by": "w-a"},
        {"call_id": "c-live", "message_index": 6, "path": "/testbed/b.py", "lines": None, "stale_by": None},
        {"call_id": "c-two", "message_index": 8, "path": "/testbed/a.py", "lines": None, "stale_by": "w-a"},
        {"call_id": "c-two", "message_index": 8, "path": "/testbed/b.py", "lines": None, "stale_by": None},
        {"call_id": "c-dup", "message_index": 12, "path": "/testbed/b.py", "lines": "2-3", "stale_by": None},
        {"call_id": "c-dup-bad", "message_index": 14, "path": "/testbed/b.py", "lines": "9-9", "stale_by": None},
        {"call_id": "c-cover", "message_index": 20, "path": "/testbed/b.py", "lines": "1-4", "stale_by": None},
        {"call_id": "c-renamed", "message_index": 16, "path": "/testbed/a.py", "lines": None, "stale_by": "w-a"},
    ],
    "writes": [{"call_id": "w-a", "message_index": 18, "path": "/testbed/a.py", "how": "sed -i"}],
    "unnamed_reads": ["c-grep-r"],
}
TEXTS = {
    "c-dup": _out("2:    return 1\n3:    pass"),
    "c-dup-bad": _out("9:something else"),
    "c-cover": _out("     1\tdef f():\n     2\t    return 1\n     3\t    pass\n     4\t"),
}


def _pair(call_id, item_id, serialized=None):
    return {"call_id": call_id, "serialized_call_id": serialized or call_id, "result_item_id": item_id}


def _manifest():
    pairs = [_pair(c, f"r-{c}") for c in ("c-stale-ok", "c-stale-missed", "c-live", "c-two", "c-dup", "c-dup-bad",
                                          "c-cover", "c-grep-r", "c-ls", "w-a")]
    # a reused call id the SDK rewrote: the record's call_id is the rewritten one here, the serialized
    # one is the caller's; the scorer must still find the call
    pairs.append({"call_id": "c-renamed#2", "serialized_call_id": "c-renamed", "result_item_id": "r-c-renamed"})
    write = "superseded by item 'r-w-a', a write of path '/testbed/a.py'"
    return {
        "tool_pairs": pairs,
        "excluded": [
            {"item_id": "r-c-stale-ok", "reason": "stale_revision", "detail": write},
            {"item_id": "r-c-renamed", "reason": "stale_revision", "detail": write},
            {"item_id": "r-c-live", "reason": "stale_revision", "detail": "superseded by item 'r-w-a', a write of path '/testbed/b.py'"},
            {"item_id": "r-c-two", "reason": "stale_revision", "detail": write},
            {"item_id": "r-c-dup", "reason": "stale_revision", "detail": "superseded by item 'r-c-cover', a newer reading of path '/testbed/b.py'"},
            {"item_id": "r-c-dup-bad", "reason": "duplicate", "detail": "covered by item 'r-c-cover'"},
            {"item_id": "r-c-ls", "reason": "budget_evicted", "detail": "over budget"},
        ],
        "included": [], "candidate_items": [],
    }


def test_each_bucket_is_counted_from_the_manifest_against_the_labels():
    s = sr.score(LABELS, _manifest(), TEXTS)
    # stale calls: c-stale-ok, c-stale-missed, c-renamed (c-two also reads b.py, which stays live)
    assert (s["reads"], s["read_calls"], s["stale_reads"]) == (9, 8, 3)
    assert s["excluded"] == 2  # c-stale-ok and c-renamed (found through serialized_call_id)
    assert s["missed_calls"] == 1 and [(m["call_id"], m["stale_by"], m["ctxeng"]) for m in s["missed"]] == [("c-stale-missed", "w-a", "included")]
    assert sorted(f["call_id"] for f in s["false_stale"]) == ["c-dup-bad", "c-live", "c-two"]
    live = next(f for f in s["false_stale"] if f["call_id"] == "c-live")
    assert "a write of path '/testbed/b.py'" in live["detail"]
    assert [(d["call_id"], d["covering_call"], d["verified"]) for d in sorted(s["duplicates"], key=lambda d: d["call_id"])] == [
        ("c-dup", "c-cover", True), ("c-dup-bad", "c-cover", False)]
    assert s["duplicates_verified"] == 1
    assert s["unnamed"] == 1 and s["unnamed_claimed"] == []
    assert not s["goal_false_stale"] and not s["goal_missed"]  # 1 missed of 3 is over 10%


def test_a_clean_manifest_meets_both_goals_and_a_claim_on_an_unnamed_read_is_false_stale():
    m = _manifest()
    m["excluded"] = [e for e in m["excluded"] if e["item_id"] in ("r-c-stale-ok", "r-c-renamed", "r-c-dup")]
    m["excluded"].append({"item_id": "r-c-stale-missed", "reason": "stale_revision", "detail": "superseded by item 'r-w-a', a write"})
    s = sr.score(LABELS, m, TEXTS)
    assert (s["excluded"], s["missed_calls"], s["false_stale"]) == (3, 0, [])
    assert s["goal_false_stale"] and s["goal_missed"]
    m["excluded"].append({"item_id": "r-c-grep-r", "reason": "stale_revision", "detail": "superseded by item 'r-w-a', a write"})
    s = sr.score(LABELS, m, TEXTS)
    assert [f["call_id"] for f in s["false_stale"]] == ["c-grep-r"] and len(s["unnamed_claimed"]) == 1


def test_a_duplicate_is_covered_only_when_every_line_it_shows_is_in_the_later_text():
    assert sr.covers(TEXTS["c-cover"], TEXTS["c-dup"])  # grep -n and nl -ba numbering ignored
    assert not sr.covers(TEXTS["c-cover"], TEXTS["c-dup-bad"])
    assert not sr.covers(TEXTS["c-cover"], _out(""))  # nothing shown covers nothing


def test_a_result_excluded_at_one_step_and_included_at_a_later_one_is_a_contradiction():
    steps = [{"a": None, "b": None}, {"a": "stale_revision", "b": None}, {"a": "stale_revision", "b": "budget_evicted"},
             {"a": None, "b": None}]
    assert sr.contradictions(steps) == [{"call_id": "a", "excluded_at_step": 1, "included_at_step": 3}]
    assert sr.contradictions(steps[:3]) == []


def test_the_last_model_call_sees_everything_before_the_last_assistant_message():
    msgs = [{"role": "system"}, {"role": "user"}, {"role": "assistant", "tool_calls": []}, {"role": "tool"},
            {"role": "assistant", "tool_calls": []}]
    assert sr.last_call_history(msgs) == msgs[:4]


def test_the_harness_fails_loudly_when_a_trace_is_missing(tmp_path):
    with pytest.raises(sr.HarnessError, match="trace missing"):
        sr.load_messages(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "exit"}]}))
    assert sr.load_messages(tmp_path / "x.json") == [{"role": "user", "content": "hi"}]
    assert sr.main(["--traces", str(tmp_path), "--per-step", ""]) == 2


# ---------------------------------------------------------------------------- the real replay (needs sdk.shell)

def test_replay_on_the_shared_traces_excludes_no_live_read():
    tdir = _traces()
    for run in sr.RUNS:
        messages = sr.load_messages(tdir / f"{run}.json")
        s = sr.score(sr.load_labels(run), sr.replay_last_call(messages), sr.result_texts(messages))
        assert s["false_stale"] == [], f"{run}: {s['false_stale']}"
        assert s["missed_calls"] <= sr.MISSED_GOAL * s["stale_reads"], f"{run}: {s['missed']}"
